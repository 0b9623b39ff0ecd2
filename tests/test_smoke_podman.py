"""The real smoke suite against a real image (``HPCENV_SMOKE_IMAGE``), through podman."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.podman

IMAGE = os.environ.get("HPCENV_SMOKE_IMAGE")
MOUNT_CHECKS = os.environ.get("HPCENV_SMOKE_MOUNT_CHECKS", "") not in ("", "0")


@pytest.mark.skipif(
    not IMAGE,
    reason="HPCENV_SMOKE_IMAGE is not set: name a built hpcenv image (e.g. "
    "localhost/hpcenv-proto:latest; add HPCENV_SMOKE_MOUNT_CHECKS=1 when its "
    "/opt/hpcenv/checks is not baked in) to run the real smoke suite",
)
def test_real_smoke_suite(tmp_path: Path) -> None:
    from hpcenv.datasets import prepare_mnist
    from hpcenv.smoke.runner import run_smoke

    assert IMAGE
    report = run_smoke(
        IMAGE, tmp_path / "results", data_dir=prepare_mnist().directory, mount_checks=MOUNT_CHECKS
    )
    outcomes = {t.name: t for t in report.tests}
    failed = {n: (t.message or "")[:2000] for n, t in outcomes.items() if t.outcome != "passed"}
    required = [
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
