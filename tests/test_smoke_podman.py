"""The real smoke suite against the local image (``make images`` builds it), through podman.

``make smoke-test`` runs the same suite with ``hpcenv smoke``, which exits 1 only when a check
fails: this test also holds each check of the horovod-cpu image to *passed* (a check that skipped
would not fail the command), the CCL check to its reasoned skip, and the report files to their
format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from requirements import need_image

from hpcenv.naming import image_tag

pytestmark = pytest.mark.podman

IMAGE = image_tag(recipe="horovod-cpu", site="local")


def test_real_smoke_suite(tmp_path: Path) -> None:
    from hpcenv.datasets import prepare_mnist
    from hpcenv.smoke.runner import run_smoke

    need_image(IMAGE, "the smoke suite runs in it")
    report = run_smoke(IMAGE, tmp_path / "results", data_dir=prepare_mnist().directory)
    outcomes = {t.name: t for t in report.tests}
    failed = {n: (t.message or "")[:2000] for n, t in outcomes.items() if t.outcome != "passed"}
    required = [
        "test_mpi4py_world",
        "test_allreduce[mpi4py]",
        "test_allreduce[horovod-mpi]",
        "test_allreduce[horovod-gloo]",
        "test_allreduce[torch-gloo]",
        "test_mnist_horovod",
        "test_kmeans_daal4py",
    ]
    for name in required:
        assert outcomes[name].outcome == "passed", failed
    ccl = outcomes["test_torch_ccl"]
    assert ccl.outcome in ("passed", "skipped"), failed
    if ccl.outcome == "skipped":
        assert ccl.message and "oneccl_bindings_for_pytorch" in ccl.message

    assert outcomes["test_mnist_horovod"].metrics["accuracy"] >= 0.90
    assert outcomes["test_kmeans_daal4py"].metrics["spmd_vs_batch_rel_diff"] <= 1e-6
    results = tmp_path / "results"
    doc = json.loads((results / "report.json").read_text())
    assert doc["image"] == IMAGE and doc["ok"] is True
    assert (results / "allreduce_bandwidth.png").read_bytes()[:4] == b"\x89PNG"
    assert "<testsuite" in (results / "junit.xml").read_text()


def test_an_injected_2x_slowdown_fails_the_references(tmp_path: Path) -> None:
    """A real slowdown, set where a site would set it (its ``tuning:`` environment): a Horovod
    cycle time of 80 ms (1 ms by default) makes every training step wait for the next cycle
    (40 ms measured step / compute 4.4 here against the reference 1.15 +/-30 %; 80 ms keeps the
    ratio above the bound even if a loaded machine made the compute step 5x slower); the run
    exits 1 naming the figure. It needs a machine that gives the ranks their cores (issue 40):
    where each run's ranks were starved (hpcenv/smoke/starved.yaml) the figure is inconclusive,
    the run exits 0 and this test fails showing the measured load.
    Open MPI's TCP transport instead of vader is no such injection: measured 2026-11-24 it took
    busbw_per_copy from 0.45 to 0.32 only (0.71x), inside the bounds, so it is not used here."""
    import os
    import subprocess
    import sys

    import yaml

    need_image(IMAGE, "the smoke suite runs in it")
    local = Path(__file__).resolve().parent.parent / "site-configs" / "local.yaml"
    sites = tmp_path / "sites"
    sites.mkdir()
    slow = {
        "extends": str(local),
        "tuning": {"HOROVOD_CYCLE_TIME": "80"},
    }
    (sites / "local.yaml").write_text(yaml.safe_dump(slow))
    hpcenv = Path(sys.executable).with_name("hpcenv")
    argv = [str(hpcenv), "smoke", "--site", "local", "--mount-checks", "--quiet"]
    argv += ["--select", "test_mnist_horovod and not ccl", "--check-references"]
    env = os.environ | {"HPCENV_SITE_PATH": str(sites)}
    proc = subprocess.run(
        [*argv, "--results", str(tmp_path / "results")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    regressions = [line for line in proc.stderr.splitlines() if line.startswith("regression: ")]
    named = {line.split()[1] for line in regressions}
    assert "mnist_horovod.step_per_compute" in named, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "results" / "report.json").read_text())
    assert doc["ok"] is True  # the checks themselves passed: only the references failed
    # confirmed before it failed: the MNIST check ran again, beside the first results
    assert "again to confirm (retry 1 of 1)" in proc.stderr
    again = json.loads((tmp_path / "results-retry-1" / "report.json").read_text())
    assert [t["nodeid"].rsplit("::", 1)[-1] for t in again["tests"]] == ["test_mnist_horovod"]
    step = next(v for v in again["references"] if v["figure"] == "mnist_horovod.step_per_compute")
    # a retry whose ranks were starved cannot judge, and keeps the regression judged before it
    assert step["verdict"] in ("regression", "inconclusive"), step
