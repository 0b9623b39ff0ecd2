"""The bind-model rehearsal (site ``local-bind``) for real: Intel MPI from the site prefix
(/opt/site/intel-mpi, installed by scripts/site-mpi-setup.sh) replaces the image's own MPICH-ABI
MPI at run time, injected by the job script that hpcenv renders for the site (the same code that
writes Frontier's and Perlmutter's), under the project's real Slurm.

The proof is per rank: ``MPI_Get_library_version()`` names Intel MPI, /proc/self/maps shows the
site prefix, and an allreduce of known values is exact; the control run (``--no-site-mpi``) shows
the image's MPICH instead, so the proof can fail. An image whose MPI is of the other ABI family is
refused at submit, and when forced the job stops with a message naming both libraries.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.podman, pytest.mark.timeout(400)]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
DATA = Path(__file__).parent / "data"
PY = "/opt/venv/bin/python3"
# The image keeps its MPICH-ABI libmpi.so.12 in $HPCENV_MPICH_ABI_LIB (the daal4py side runtime):
# appended to the loader path, after whatever the job injected in front of it.
WITH_IMAGE_MPI = ["bash", "-c",
                  'export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$HPCENV_MPICH_ABI_LIB"'
                  '; exec "$0" "$@"', PY]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path_factory.mktemp("cache")))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HPCENV, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))  # fmt: skip


def _submit(image: str, wd: Path, *args: str, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``hpcenv submit --site local-bind ... --wait`` as a process; (exit code, log, output)."""
    proc = _cli("submit", "--site", "local-bind", "--image", image, "--ranks-per-node", "2",
                "--workdir", str(wd), "--wait", "--timeout", "240", *extra, "--", *args)  # fmt: skip
    out = proc.stdout + proc.stderr
    # "submitted ID ..." on success; "error: job ID: FAILED ..." when --wait sees it fail.
    found = re.search(r"^submitted (\S+) |^error: job (\S+): ", out, re.M)
    job = (found.group(1) or found.group(2)) if found else None
    log = _cli("logs", job).stdout if job else ""
    return proc.returncode, log, out


def _ranks(log: str) -> list[dict[str, Any]]:
    rows = [json.loads(ln.split(" ", 1)[1]) for ln in log.splitlines()
            if ln.startswith("mpi-identity ")]  # fmt: skip
    return sorted(rows, key=lambda r: r["rank"])


@pytest.fixture
def wd(tmp_path: Path) -> Path:
    shutil.copy(DATA / "mpi_identity.py", tmp_path)
    return tmp_path


def test_site_mpi_replaces_the_image_mpi_in_every_rank(
    slurm: SlurmInfo, site_mpi_prefix: Path, local_image: str, wd: Path
) -> None:
    code, log, out = _submit(local_image, wd, *WITH_IMAGE_MPI, "{workdir}/mpi_identity.py")
    assert code == 0, out + log
    assert "replaces the image's /opt/mpich-abi/lib/libmpi.so.12" in log  # the preflight
    ranks = _ranks(log)
    assert [r["rank"] for r in ranks] == [0, 1], log
    for r in ranks:
        assert r["size"] == 2
        assert r["library"].startswith("Intel(R) MPI Library 2021.18"), r
        assert any(m.startswith(f"{site_mpi_prefix}/lib/libmpi.so") for m in r["maps"]), r
        assert not any(m.startswith("/opt/mpich-abi") or "libmpich" in m for m in r["maps"]), r
        assert r["allreduce"] == 3.0 and r["allreduce_exact"], r


def test_control_run_without_injection_shows_the_image_mpi(
    slurm: SlurmInfo, site_mpi_prefix: Path, local_image: str, wd: Path
) -> None:
    code, log, out = _submit(local_image, wd, *WITH_IMAGE_MPI, "{workdir}/mpi_identity.py",
                             extra=("--no-site-mpi",))  # fmt: skip
    ranks = _ranks(log)
    assert ranks, out + log
    for r in ranks:
        assert r["library"].startswith("MPICH Version"), r
        assert not any(str(site_mpi_prefix) in m for m in r["maps"]), r


def test_daal4py_spmd_kmeans_runs_under_the_site_mpi(
    slurm: SlurmInfo, site_mpi_prefix: Path, local_image: str, wd: Path
) -> None:
    shutil.copy(DATA / "kmeans_site_mpi.py", wd)
    code, log, out = _submit(local_image, wd, *WITH_IMAGE_MPI, "{workdir}/kmeans_site_mpi.py")
    assert code == 0, out + log
    maps = [json.loads(ln.split(" ", 1)[1]) for ln in log.splitlines()
            if ln.startswith("d4p-maps ")]  # fmt: skip
    assert len(maps) == 2, log
    for m in maps:
        assert any(x.startswith(f"{site_mpi_prefix}/lib/libmpi.so") for x in m["maps"]), m
    result = next(json.loads(ln) for ln in log.splitlines() if '"kmeans_daal4py"' in ln)
    assert result["world_size"] == 2  # SPMD connected both ranks through the site MPI
    assert result["spmd_vs_batch_rel_diff"] < 1e-9


# -- SIF: the same injection through Apptainer, ranks started by the site MPI's mpiexec.hydra --
def _sif() -> Path:
    from hpcenv.paths import cache_dir

    return cache_dir() / "sif" / "horovod-cpu-local.sif"


SIF = _sif()  # the real cache (make smoke-test builds it), before the private-cache fixture


@pytest.mark.apptainer
def test_site_mpi_replaces_the_image_mpi_in_sif_ranks(site_mpi_prefix: Path, wd: Path) -> None:
    from hpcenv.apptainer import Apptainer
    from hpcenv.engines import engine_env
    from hpcenv.jobs.bindmodel import preflight_script, site_mpi
    from hpcenv.jobs.containers import RunContext, get_runtime
    from hpcenv.site import Runtime, load_site

    if not SIF.is_file():
        pytest.skip(f"{SIF} not built: run `make smoke-test` (it builds the SIF) first")
    site = load_site("local-bind")
    sif_site = site.model_copy(update={"runtime": Runtime(kind="apptainer")})
    cl = get_runtime("apptainer").launch(sif_site, str(SIF), RunContext(workdir=str(wd)))
    inj = site_mpi(site)
    assert inj is not None and cl.env == {"APPTAINERENV_LD_LIBRARY_PATH": inj.ld_library_path}
    # mpiexec.hydra brings its own PMI: the site's Slurm-PMIx settings do not apply here.
    env = {k: v for k, v in site.mpi.env.items() if not k.startswith("I_MPI_PMI")} | cl.env
    flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    # Single files of the site's library list are mounted into the helper one by one.
    flags += [x for m in inj.mounts if Path(m).is_file() for x in ("-v", f"{m}:{m}:ro")]
    app = Apptainer()
    app.ensure_helper()
    prefix = shlex.join(cl.prefix)
    script = (f"{prefix} sh -c {shlex.quote(preflight_script(inj))} && "
              f"{inj.root}/bin/mpiexec.hydra -n 2 {prefix} {PY} {wd}/mpi_identity.py")  # fmt: skip
    argv = app.helper_command(["bash", "-c", script], paths=[Path(p) for p in inj.mounts]
                              + [SIF.parent, wd], extra=flags)  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=engine_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "replaces the image's /opt/mpich-abi/lib/libmpi.so.12" in proc.stdout
    ranks = _ranks(proc.stdout)
    assert [r["rank"] for r in ranks] == [0, 1], proc.stdout + proc.stderr
    for r in ranks:
        assert r["library"].startswith("Intel(R) MPI Library 2021.18"), r
        assert any(m.startswith(f"{site_mpi_prefix}/lib/libmpi.so") for m in r["maps"]), r
        assert r["allreduce"] == 3.0 and r["allreduce_exact"], r
