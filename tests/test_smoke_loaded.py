"""``hpcenv smoke --check-references`` on a machine kept busy for the whole run (issue 40): two
CPU-bound ``yes`` processes, started here, beside the local image's podman smoke. The run must
not fail: every referenced figure passes, or is reported inconclusive with the load its ranks
measured (``hpcenv/checks/_cpu.py``: run-queue wait per CPU second). The injected 2x slowdown that
must still fail on a machine that gives the ranks their cores is
tests/test_smoke_podman.py::test_an_injected_2x_slowdown_fails_the_references."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from requirements import need_image

from hpcenv.naming import image_tag

pytestmark = pytest.mark.podman

IMAGE = image_tag(recipe="horovod-cpu", site="local")
# the checks behind the local site's references (site-configs/local.yaml): the run stays short
REFERENCED = (
    "(test_allreduce and mpi4py) or (test_mnist_horovod and not ccl) or test_kmeans_daal4py"
)


@pytest.fixture
def two_busy_cores() -> Iterator[list[subprocess.Popen[bytes]]]:
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_loaded_machine_does_not_fail_the_references(
    tmp_path: Path, two_busy_cores: list[subprocess.Popen[bytes]]
) -> None:
    need_image(IMAGE, "the smoke suite runs in it")
    hpcenv = Path(sys.executable).with_name("hpcenv")
    results = tmp_path / "results"
    argv = [str(hpcenv), "smoke", "--site", "local", "--mount-checks", "--quiet", "--json"]
    argv += ["--select", REFERENCED, "--check-references", "--results", str(results)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert all(hog.poll() is None for hog in two_busy_cores), "the load ran the whole time"
    said = proc.stderr[-3000:]
    assert proc.returncode == 0, said
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["reference_outcome"]["failed"] == [], said
    judged = [v for v in doc["references"] if v["reference"] is not None]
    assert {v["figure"] for v in judged} >= {
        "allreduce.mpi4py.busbw_per_copy",
        "mnist_horovod.step_per_compute",
        "kmeans.sklearn_per_batch",
    }
    for v in judged:
        # the ranks measured what they got, in every check: schedstat from each rank
        assert v["load"]["ranks"] >= 2 and v["load"]["wait_per_run_max"] is not None, v
        assert v["verdict"] in ("pass", "improvement", "inconclusive"), v
    for v in doc["reference_outcome"]["inconclusive"]:
        assert v["reason"].startswith("ranks starved: the worst of"), v
        line = f"inconclusive: {v['figure']} = {v['value']:.4g} {v['unit']}, outside"
        assert line in proc.stderr
