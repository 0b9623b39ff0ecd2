"""An Open MPI image under the MPICH-ABI site MPI of ``local-bind``: refused at submit (the
image's lock names its MPI), and when forced the job's preflight stops it with a message naming
both libraries, before any rank starts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from requirements import need_image
from test_rehearsal_bind import DATA, _private_cache, _submit  # noqa: F401 (autouse fixture)

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.podman, pytest.mark.timeout(900)]


@pytest.fixture
def wd(tmp_path: Path) -> Path:
    shutil.copy(DATA / "mpi_identity.py", tmp_path)
    return tmp_path


# -- an Open MPI image under the MPICH-ABI site MPI ------------------------------------------
OPENMPI_IMAGE = "localhost/hpcenv-test/openmpi-only:1"
OPENMPI_LOCK = {
    "components": {
        "mpi": {"implementation": "openmpi", "version": "4.1.4", "options": {"abi": "openmpi"}}
    }
}


@pytest.fixture(scope="module")
def openmpi_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small image whose only MPI is Debian's Open MPI (libmpi.so.40), with an hpcenv lock
    label saying so; built from the local base image (cached by podman after the first time)."""
    from hpcenv.engines import engine_env, get_engine

    engine = get_engine("podman")
    base = "localhost/hpcenv-base:bookworm"
    need_image(base, "the Open MPI-only image is built from it")
    if not engine.image_exists(OPENMPI_IMAGE):
        ctx = tmp_path_factory.mktemp("openmpi-only")
        (ctx / "Containerfile").write_text(
            f"FROM {base}\n"
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            "--no-install-recommends libopenmpi3 && rm -rf /var/lib/apt/lists/*\n"
            f"LABEL io.hpcenv.lock={json.dumps(json.dumps(OPENMPI_LOCK))}\n"
        )
        proc = subprocess.run(
            ["podman", "build", "-t", OPENMPI_IMAGE, "-f", str(ctx / "Containerfile"), str(ctx)],
            capture_output=True,
            text=True,
            timeout=600,
            env=engine_env(),
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return OPENMPI_IMAGE


def test_open_mpi_image_is_refused_at_submit_and_fails_at_run_time_when_forced(
    slurm: SlurmInfo, site_mpi_prefix: Path, openmpi_image: str, wd: Path
) -> None:
    # Refused before anything runs: the image's lock says Open MPI, the site injects MPICH ABI.
    code, log, out = _submit(openmpi_image, wd, "true")
    assert code == 2 and not log, out
    assert "openmpi@4.1.4 (openmpi ABI)" in out and "intel-mpi@2021.18.1 (libmpi.so.12" in out
    # Forced: the job's preflight stops it, naming both libraries; no rank starts.
    code, log, out = _submit(openmpi_image, wd, "echo", "RANK-STARTED", extra=("--force",))
    assert code == 2, out + log
    assert "bind model ABI mismatch" in log, out + log
    assert f"{site_mpi_prefix}/lib/libmpi.so.12 (libmpi.so.12, mpich ABI)" in log
    assert "libmpi.so.40 (libmpi.so.40, openmpi ABI)" in log
    assert "RANK-STARTED" not in log
