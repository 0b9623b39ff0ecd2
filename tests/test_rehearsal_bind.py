"""The bind-model rehearsal (site ``local-bind``) for real: Intel MPI from the site prefix
(/opt/site/intel-mpi, installed by scripts/site-mpi-setup.sh) replaces the image's own MPICH-ABI
MPI at run time, injected by the job script that hpcenv renders for the site (the same code that
writes Frontier's and Perlmutter's), under the project's real Slurm.

The proof is per rank: ``MPI_Get_library_version()`` names Intel MPI, /proc/self/maps shows the
site prefix, and an allreduce of known values is exact; the control run (``--no-site-mpi``) shows
the image's MPICH instead, so the proof can fail. An image whose MPI is of the other ABI family is
refused at submit, and when forced the job stops with a message naming both libraries.

Two images: the ``local`` one (Open MPI, with Debian's MPICH as daal4py's side runtime: mpi4py and
daal4py only, its Horovod links Open MPI), and the site's own (``hpcenv build --site local-bind``:
Debian's MPICH under its ABI name, Horovod built against it), which the tests build or find
cached, and run in podman (``local-bind``) and as a SIF (``local-bind-sif``, ranks under the
site's ``apptainer exec``): Horovod's MPI ops, mpi4py and daal4py SPMD K-Means on the site MPI.
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
from image_builds import REAL_ENV, built  # REAL_ENV: the real cache (layers, SIF stamp)
from requirements import need_file

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.podman, pytest.mark.timeout(400)]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
DATA = Path(__file__).parent / "data"
PY = "/opt/venv/bin/python3"
# The image keeps its MPICH-ABI libmpi.so.12 in $HPCENV_MPICH_ABI_LIB (the daal4py side runtime):
# appended to the loader path, after whatever the job injected in front of it.
WITH_IMAGE_MPI = [
    "bash",
    "-c",
    'export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$HPCENV_MPICH_ABI_LIB"'
    '; exec "$0" "$@"',
    PY,
]


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path_factory.mktemp("cache")))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
    )


def _submit(
    image: str, wd: Path, *args: str, extra: tuple[str, ...] = (), site: str = "local-bind"
) -> tuple[int, str, str]:
    """``hpcenv submit --site SITE ... --wait`` as a process; (exit code, log, output).
    ``image`` is a tag or SIF path, or ``recipe:NAME`` for the site's own image of NAME."""
    which = ["--recipe", image[7:]] if image.startswith("recipe:") else ["--image", image]
    proc = _cli(
        "submit",
        "--site",
        site,
        *which,
        "--ranks-per-node",
        "2",
        "--workdir",
        str(wd),
        "--wait",
        "--timeout",
        "240",
        *extra,
        "--",
        *args,
    )
    out = proc.stdout + proc.stderr
    # "submitted ID ..." on success; "error: job ID: FAILED ..." when --wait sees it fail.
    found = re.search(r"^submitted (\S+) |^error: job (\S+): ", out, re.M)
    job = (found.group(1) or found.group(2)) if found else None
    log = _cli("logs", job).stdout if job else ""
    return proc.returncode, log, out


def _ranks(log: str) -> list[dict[str, Any]]:
    rows = [
        json.loads(ln.split(" ", 1)[1]) for ln in log.splitlines() if ln.startswith("mpi-identity ")
    ]
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
    code, log, out = _submit(
        local_image, wd, *WITH_IMAGE_MPI, "{workdir}/mpi_identity.py", extra=("--no-site-mpi",)
    )
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
    maps = [
        json.loads(ln.split(" ", 1)[1]) for ln in log.splitlines() if ln.startswith("d4p-maps ")
    ]
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
    from hpcenv.jobs.bindmodel import preflight_args, site_mpi
    from hpcenv.jobs.render import step_script
    from hpcenv.jobs.runtimes.base import RunContext
    from hpcenv.jobs.runtimes.registry import get_runtime
    from hpcenv.site import Runtime, load_site

    need_file(SIF, "the local SIF", "its ranks run in it")
    site = load_site("local-bind")
    sif_site = site.model_copy(update={"runtime": Runtime(kind="apptainer")})
    cl = get_runtime("apptainer").launch(sif_site, str(SIF), RunContext(workdir=str(wd)))
    inj = site_mpi(site)
    assert inj is not None and cl.env == {
        "APPTAINERENV_LD_LIBRARY_PATH": inj.ld_library_path,
        "APPTAINER_CONTAINLIBS": ",".join(inj.libs),
    }
    # mpiexec.hydra brings its own PMI: the site's Slurm-PMIx settings do not apply here.
    env = {k: v for k, v in site.mpi.env.items() if not k.startswith("I_MPI_PMI")} | cl.env
    flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    # Single files of the site's library list are mounted into the helper one by one.
    flags += [
        x for m in (*inj.mounts, *inj.libs) if Path(m).is_file() for x in ("-v", f"{m}:{m}:ro")
    ]
    app = Apptainer()
    app.ensure_helper()
    prefix = shlex.join(cl.prefix)
    step = wd / "bind-preflight.sh"  # the job's step file, in a folder the ranks see
    step.write_text(step_script("bind_preflight") + "\n")
    script = (
        f"{prefix} sh {step} {shlex.join(preflight_args(inj))} && "
        f"{inj.root}/bin/mpiexec.hydra -n 2 {prefix} {PY} {wd}/mpi_identity.py"
    )
    argv = app.helper_command(
        ["bash", "-c", script], paths=[Path(p) for p in inj.mounts] + [SIF.parent, wd], extra=flags
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=engine_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "replaces the image's /opt/mpich-abi/lib/libmpi.so.12" in proc.stdout
    ranks = _ranks(proc.stdout)
    assert [r["rank"] for r in ranks] == [0, 1], proc.stdout + proc.stderr
    for r in ranks:
        assert r["library"].startswith("Intel(R) MPI Library 2021.18"), r
        assert any(m.startswith(f"{site_mpi_prefix}/lib/libmpi.so") for m in r["maps"]), r
        assert r["allreduce"] == 3.0 and r["allreduce_exact"], r


# -- The local-bind image itself: Debian MPICH in the image, Horovod built against it ----------
# `hpcenv build --site local-bind` (the resolver's image for the site: mpich 4.0.2 from apt under
# its ABI name libmpi.so.12, rule debian-mpich-soname) and its SIF for `local-bind-sif`, whose
# ranks run `apptainer exec` (the site's apptainer, scripts/site-apptainer). Each job runs under
# the real Slurm, submitted by `hpcenv submit --wait` as a process; the same programs with
# --no-site-mpi show the image's MPICH, so every check here can fail.
BIND_SITES = [
    pytest.param("local-bind", id="podman"),
    pytest.param("local-bind-sif", id="sif", marks=pytest.mark.apptainer),
]
IMAGE_LIB = "/usr/lib/x86_64-linux-gnu/libmpi.so.12"  # Debian's MPICH under its ABI name


@pytest.fixture(scope="session")
def bind_image() -> str:
    """localhost/hpcenv/horovod-cpu:local-bind, built (or found cached) by hpcenv itself."""
    built("bind")
    return "localhost/hpcenv/horovod-cpu:local-bind"


@pytest.fixture(scope="session")
def bind_sif(bind_image: str, site_apptainer: Path) -> None:
    """The SIF that `hpcenv build --site local-bind-sif` (its default format: sif) converts from
    the same build stage and delivers to the site's image path."""
    built("bind-sif")


@pytest.fixture
def bind_site(request: pytest.FixtureRequest, bind_image: str) -> str:
    """Each bind site with its image ready: the podman tag, or the SIF."""
    site: str = request.param
    if site == "local-bind-sif":
        request.getfixturevalue("bind_sif")
    return site


def _rows(log: str, tag: str) -> list[dict[str, Any]]:
    rows = [json.loads(ln.split(" ", 1)[1]) for ln in log.splitlines() if ln.startswith(tag + " ")]
    return sorted(rows, key=lambda r: r.get("rank", 0))


def _only_site_mpi(maps: list[str], prefix: Path) -> bool:
    """Every MPI library the rank mapped is the site's; nothing of the image's MPICH."""
    mpi = [m for m in maps if "libmpi" in m]
    return bool(mpi) and all(m.startswith(f"{prefix}/lib/") for m in mpi)


@pytest.mark.timeout(2400)  # a cold build of the image and its SIF comes first
@pytest.mark.parametrize("bind_site", BIND_SITES, indirect=True)
def test_horovod_mpi_ops_run_on_the_site_mpi(
    slurm: SlurmInfo, site_mpi_prefix: Path, bind_site: str, wd: Path
) -> None:
    shutil.copy(DATA / "hvd_identity.py", wd)
    code, log, out = _submit(
        "recipe:horovod-cpu", wd, PY, "{workdir}/hvd_identity.py", site=bind_site
    )
    assert code == 0, out + log
    assert f"replaces the image's {IMAGE_LIB}" in log  # the preflight, inside the image
    ranks = _rows(log, "hvd-identity")
    assert [r["rank"] for r in ranks] == [0, 1], out + log
    for r in ranks:
        assert r["size"] == 2 and r["mpi_built"] and r["mpi_enabled"], r  # Horovod's MPI ops
        assert r["library"].startswith("Intel(R) MPI Library 2021.18"), r
        assert _only_site_mpi(r["maps"], site_mpi_prefix), r
        assert r["allreduce"] == {"torch.float32": 3.0, "torch.float64": 3.0}, r
        assert r["allreduce_exact"], r


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("bind_site", BIND_SITES, indirect=True)
def test_mpi4py_runs_on_the_site_mpi(
    slurm: SlurmInfo, site_mpi_prefix: Path, bind_site: str, wd: Path
) -> None:
    code, log, out = _submit(
        "recipe:horovod-cpu", wd, PY, "{workdir}/mpi_identity.py", site=bind_site
    )
    assert code == 0, out + log
    ranks = _ranks(log)
    assert [r["rank"] for r in ranks] == [0, 1], out + log
    for r in ranks:
        assert r["size"] == 2 and r["library"].startswith("Intel(R) MPI Library 2021.18"), r
        assert _only_site_mpi(r["maps"], site_mpi_prefix), r
        assert r["allreduce"] == 3.0 and r["allreduce_exact"], r


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("bind_site", BIND_SITES, indirect=True)
def test_daal4py_spmd_kmeans_runs_on_the_site_mpi(
    slurm: SlurmInfo, site_mpi_prefix: Path, bind_site: str, wd: Path
) -> None:
    shutil.copy(DATA / "kmeans_site_mpi.py", wd)
    code, log, out = _submit(
        "recipe:horovod-cpu", wd, PY, "{workdir}/kmeans_site_mpi.py", site=bind_site
    )
    assert code == 0, out + log
    maps = _rows(log, "d4p-maps")
    assert len(maps) == 2, out + log
    assert all(_only_site_mpi(m["maps"], site_mpi_prefix) for m in maps), maps
    doc = next(json.loads(ln) for ln in log.splitlines() if '"kmeans_daal4py"' in ln)
    assert doc["world_size"] == 2  # SPMD joined both ranks through the site MPI
    # The distributed centroids and objective are the single-process ones (daal4py batch on all
    # the data) and scikit-learn's, from the same start, after the same 5 Lloyd iterations.
    assert doc["spmd_vs_batch_rel_diff"] < 1e-9 and doc["sklearn_vs_batch_rel_diff"] < 1e-9, doc
    spmd, batch, skl = doc["daal4py_spmd"], doc["daal4py_batch"], doc["sklearn"]
    assert spmd["iterations"] == batch["iterations"] == skl["iterations"] == 5, doc
    assert abs(skl["objective"] - batch["objective"]) <= 1e-6 * batch["objective"], doc
    # daal4py's distributed objective is its own sum over the ranks' partial results: measured
    # 6.4e-5 from the batch one after these 5 (unconverged) iterations, with equal centroids.
    assert abs(spmd["objective"] - batch["objective"]) <= 1e-3 * batch["objective"], doc
    assert doc["init_shift"] > 1e-3  # the centroids moved: five real iterations


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("program", ["hvd_identity.py", "mpi_identity.py", "kmeans_site_mpi.py"])
@pytest.mark.parametrize("bind_site", BIND_SITES, indirect=True)
def test_control_runs_without_injection_show_the_image_mpich(
    slurm: SlurmInfo, site_mpi_prefix: Path, bind_site: str, wd: Path, program: str
) -> None:
    shutil.copy(DATA / program, wd)
    code, log, out = _submit(
        "recipe:horovod-cpu",
        wd,
        PY,
        f"{{workdir}}/{program}",
        site=bind_site,
        extra=("--no-site-mpi",),
    )
    assert "replaces the image's" not in log and "bind model: host" not in log, log
    rows = _rows(
        log,
        {
            "hvd_identity.py": "hvd-identity",
            "mpi_identity.py": "mpi-identity",
            "kmeans_site_mpi.py": "d4p-maps",
        }[program],
    )
    assert len(rows) == 2, out + log
    for r in rows:
        assert not any(str(site_mpi_prefix) in m for m in r["maps"]), r
        assert any(m.endswith("/libmpich.so.12.2.2") for m in r["maps"]), r  # Debian's MPICH
        if "library" in r:
            assert r["library"].startswith("MPICH Version:"), r


@pytest.mark.apptainer
def test_site_apptainer_runs_the_helper_or_says_what_is_missing(site_apptainer: Path) -> None:
    env = dict(REAL_ENV)
    env.pop("CONTAINERS_CONF", None)  # the command brings its own containers.conf
    proc = subprocess.run(
        [str(site_apptainer), "version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and re.fullmatch(r"1\.\d+\.\d+\S*", proc.stdout.strip()), proc
    env["HPCENV_APPTAINER_HELPER"] = "localhost/hpcenv-no-such-helper:0"
    proc = subprocess.run(
        [str(site_apptainer), "version"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 127
    assert proc.stderr.strip() == (
        "apptainer: hpcenv's Apptainer helper image localhost/hpcenv-no-such-helper:0 is "
        "missing (build it: hpcenv apptainer version)"
    )
