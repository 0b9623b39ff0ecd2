"""``hpcenv tune --measure`` for real: the sweep runs in the local image with podman, writes the
tuning file, ``--show`` reports it in force, and a rendered job applies it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_image

pytestmark = pytest.mark.podman

HPCENV = Path(sys.executable).with_name("hpcenv")
IMAGE = "localhost/hpcenv/horovod-cpu:local"


def run(*args: str, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict, str]:
    from hpcenv.jobs.runtimes.registry import get_runtime

    need_image(IMAGE, "the tuning sweep runs in it")
    assert get_runtime("podman").image_identity(IMAGE) is not None
    env = dict(os.environ, HPCENV_TUNING_DIR=str(tmp_path_factory.mktemp("tuning")))
    proc = run(
        "tune",
        "--site",
        "local",
        "--ranks-per-node",
        "2",
        "--measure",
        "--quick",
        "--budget",
        "30",  # a budget cut skips later candidates: this checks the file, not the choice
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    path = Path(env["HPCENV_TUNING_DIR"]) / "local" / "1n2r1c.json"
    return env, json.loads(path.read_text()), proc.stdout


def test_measure_writes_a_file_for_this_image_and_layout(measured) -> None:
    _, doc, out = measured
    assert "[1/" in out and "Open MPI coll_tuned allreduce" in out  # progress was shown
    assert doc["image_id"].startswith(
        subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Id}}", IMAGE],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()[:12]
    )
    assert doc["layout"] == {"nodes": 1, "ranks_per_node": 2, "cores_per_rank": 1}
    om = doc["measurements"]["openmpi"]
    assert set(om["default_busbw"]) >= {"8", str(64 << 20)}
    assert all(v > 0 for v in om["default_busbw"].values())
    assert doc["reasons"] and doc["date"].startswith("20")
    assert "horovod" not in doc["measurements"]  # --quick: recorded-only knobs are skipped
    assert any("Horovod knobs not swept (--quick)" in r for r in doc["reasons"])


def test_show_reports_it_in_force_and_submit_applies_it(measured) -> None:
    env, doc, _ = measured
    proc = run("tune", "--site", "local", "--ranks-per-node", "2", "--show", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "in force:" in proc.stdout and doc["image_id"][:12] in proc.stdout
    proc = run(
        "submit",
        "--site",
        "local",
        "--recipe",
        "horovod-cpu",
        "--ranks-per-node",
        "2",
        "--dry-run",
        "--",
        "python3",
        "x.py",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "# measured tuning: " in proc.stdout
    if doc["collective_rules"]:
        assert "<<'HPCENV_ALLREDUCE'" in proc.stdout
        assert "OMPI_MCA_coll_tuned_dynamic_rules_filename" in proc.stdout
    for key, value in doc["env"].items():
        assert f"export {key}={value}" in proc.stdout
