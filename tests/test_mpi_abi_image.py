"""One hpcenv image built against the MPI-5 standard ABI, run under site MPIs of two families.

``hpcenv build --site local-bind --recipe mpi4py-abi``: the resolver decides the ABI (the site
binds Intel MPI 2021.18.1, which provides ``libmpi_abi.so.1``; the recipe's only MPI program is
mpi4py), so the image carries PyPI's mpich 5.0.2 wheel in its venv as its own ABI library and
mpi4py 4.1.2 is built from source with that wheel's ``mpicc_abi`` (rule ``mpi-abi-image``; the
build fails unless ``mpi4py.MPI`` links ``libmpi_abi.so.1`` and no ``libmpi.so.*``).

Then ONE image (by its digest, the same for every run) runs 2 ranks of an mpi4py allreduce with
exact sums (tests/data/mpi_abi_allreduce.py), each rank reporting ``MPI.Get_library_version()``,
``MPI.Get_abi_version()`` and every ``libmpi_abi`` in ``/proc/self/maps``:

- alone: the image's own MPICH 5.0.2 (``/opt/venv/lib/libmpi_abi.so.1``) with its own mpiexec;
- MPICH 5.0.2 from /opt/site/mpich-5 (scripts/mpi-abi-setup.sh) bound over it, the way the
  bind model binds a site MPI (``bindmodel.site_mpi``: the site prefix mounted, its ``lib``
  first on the loader path; ``mpicc_abi``'s RUNPATH gives way to it), started by the site's
  mpiexec (rule ``mpi-abi-launcher``);
- Intel MPI 2021.18.1, the local-bind site's own MPI (scripts/site-mpi-setup.sh), bound the same
  way with its mounts and started by its mpiexec: a second implementation, of a second vendor.

Each bound run shows only the site's ``libmpi_abi`` mapped, not the image's. The job's
preflight (``bindmodel.standard_abi``) run inside the image with the injection prints the site
library's ABI version and passes. And ``hpcenv submit --site local-bind --recipe mpi4py-abi``
under the real one-node Slurm runs the same image with Intel MPI bound the way the site file
says (srun --mpi=pmix): the job's preflight checks ``libmpi_abi.so.1`` and both ranks run on
Intel MPI's; so does its SIF (``--site local-bind-sif``, ranks under ``apptainer exec``), and
on the two-node rehearsal as a bind-model site (site-configs/local-2node-bind.yaml: one rank on
node1, one on node2, Intel MPI's libfabric tcp provider over the veth link).

Not shown here (what blocks it):

- Open MPI 6 bound into this image: the only Open MPI 6 here is Debian sid's 6.0.0~rc2
  (tests/data/ompi6-abi), whose libraries need glibc 2.38 (``libopen-pal.so.40``,
  ``libpmix.so.2``, ``prted``: ``GLIBC_2.38`` symbol versions, read with objdump -T
  2026-11-28) while the image is Debian 12 (glibc 2.36); a site's MPI built for an older glibc
  than its image's binds, a newer one does not. tests/test_mpi_abi.py runs one ABI binary under
  Open MPI 6 inside sid itself, and tests/test_mpi_abi_trixie.py runs the same recipe built on
  Debian 13 (glibc 2.41) under Open MPI 6, MPICH 5 and Intel MPI, one image.

Horovod's MPI operations against the ABI: tests/test_mpi_abi_horovod.py (recipe horovod-abi).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from image_builds import REAL_ENV, build_ompi6_image
from requirements import need_file, need_tool

from hpcenv.jobs.bindmodel import SiteMpi, preflight_args, site_mpi, standard_abi
from hpcenv.mpi_abi import soname
from hpcenv.site import Site, load_site

if TYPE_CHECKING:
    from services import SlurmInfo, TwoNodeInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.podman, pytest.mark.timeout(1800)]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
DATA = Path(__file__).parent / "data"
SITE = Path(os.environ.get("HPCENV_SITE_ROOT", "/opt/site"))
MPICH5 = SITE / "mpich-5"
IMPI = SITE / "intel-mpi"
IMAGE = "localhost/hpcenv/mpi4py-abi:local-bind"
PROBE = "/probe/mpi_abi_allreduce.py"
RANK = re.compile(
    r"^ABI-RANK rank=(\d) size=(\d) sum=(\d+) expect=(\d+) abi=(\S+) host=(\S+) maps=(\S*) "
    r"lib=(.*)$"
)


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    from hpcenv.engines import engine_env

    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=300, env=engine_env()
    )


def _job(
    cli: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """``hpcenv submit ... --wait`` run; its process, its job's log (``hpcenv logs``), and the
    ``ABI-RANK`` lines of that log. The job id comes from ``--json`` or the text output, or from
    the error of a failed wait."""
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    out = proc.stdout + proc.stderr
    try:
        job: str | None = str(json.loads(proc.stdout)["job_id"])
    except (ValueError, KeyError):
        found = re.search(r"^submitted (\S+) |^error: job (\S+): ", out, re.M)
        job = (found.group(1) or found.group(2)) if found else None
    log = ""
    if job:
        log = subprocess.run([HPCENV, "logs", job], capture_output=True, text=True, env=env).stdout
    lines = "\n".join(ln for ln in log.splitlines() if ln.startswith("ABI-RANK "))
    return proc, out + log, lines


@pytest.fixture(scope="module")
def abi_image() -> str:
    """The image's id (its digest), built once (or found cached) by ``hpcenv build``."""
    need_tool("podman", why="the ABI image is built and run with podman")
    proc = subprocess.run(
        [HPCENV, "build", "--site", "local-bind", "--recipe", "mpi4py-abi", "--format", "oci"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=REAL_ENV,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    ident = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE)
    assert ident.returncode == 0, ident.stderr
    return ident.stdout.strip()


def _site(spec: str, root: Path) -> Site:
    """The local-bind rehearsal site with ``spec`` at ``root`` as its MPI."""
    site = load_site("local-bind")
    mpi = site.mpi.model_copy(update={"spec": spec, "root": str(root)})
    if spec.startswith("mpich"):  # MPICH 5 needs none of Intel MPI's PMIx libraries
        mpi = mpi.model_copy(update={"bind_paths": [], "host_libs": [], "env": {}})
    return site.model_copy(update={"mpi": mpi})


def _injection(spec: str, root: Path) -> SiteMpi:
    inj = site_mpi(_site(spec, root))
    assert inj is not None
    abi = standard_abi(inj)  # the ABI image's injection: libmpi_abi.so.1 is what is replaced
    assert abi is not None and abi.soname == soname()
    return abi


def _run(image: str, inj: SiteMpi | None, argv: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """``argv`` in ``image`` with the site MPI ``inj`` bound as the bind model binds it."""
    opts = ["--rm", "-v", f"{DATA}:/probe:ro", "--shm-size", "256m"]
    if inj is not None:
        for path in (*inj.mounts, *inj.libs):
            opts += ["-v", f"{path}:{path}:ro"]
        opts += ["--env", f"LD_LIBRARY_PATH={inj.ld_library_path}"]
    for key, value in (env or {}).items():
        opts += ["--env", f"{key}={value}"]
    return _podman("run", *opts, image, *argv)


def _assert_two_ranks(
    proc: subprocess.CompletedProcess[str], lib: str, maps: str
) -> list[tuple[str, ...]]:
    """Two ranks, each with the exact sum, ABI 1.0, ``lib`` and only ``maps`` mapped; the rows."""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks = sorted(m.groups() for m in map(RANK.match, proc.stdout.splitlines()) if m)
    assert [r[:5] for r in ranks] == [
        ("0", "2", "3", "3", "1.0"),
        ("1", "2", "3", "3", "1.0"),
    ], proc.stdout + proc.stderr
    for r in ranks:
        assert r[6] == maps + ";", r  # one libmpi_abi mapped: the bound one
        assert lib in r[7], r
    return ranks


def test_the_image_is_built_against_the_abi(abi_image: str) -> None:
    """The lock in the image says ABI; mpi4py.MPI needs libmpi_abi.so.1 and no family libmpi."""
    lock = json.loads(
        _podman(
            "image", "inspect", "--format", '{{index .Labels "io.hpcenv.lock"}}', abi_image
        ).stdout.strip()
    )
    mpi = lock["components"]["mpi"]
    assert mpi["options"]["standard_abi"] == soname() and mpi["options"]["abi"] == "MPI-5"
    assert "mpi-abi-image" in mpi["rules"]
    needed = _run(
        abi_image,
        None,
        [
            "python3",
            "-c",
            "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.__file__); print(MPI.Get_library_version().splitlines()[0])",
        ],
    )
    assert needed.returncode == 0, needed.stderr
    assert "MPICH Version:      5.0.2" in needed.stdout, needed.stdout


def test_alone_the_image_runs_its_own_abi_library(abi_image: str) -> None:
    proc = _run(abi_image, None, ["mpiexec", "-n", "2", "python3", PROBE])
    _assert_two_ranks(proc, "MPICH Version:      5.0.2", f"/opt/venv/lib/{soname()}")


def test_one_image_runs_under_mpich_5_bound_in(abi_image: str) -> None:
    need_file(
        MPICH5 / "lib" / soname(), "MPICH 5.0.2's libmpi_abi", "it is bound in", "`make host`"
    )
    inj = _injection("mpich@5.0.2", MPICH5)
    proc = _run(abi_image, inj, [f"{MPICH5}/bin/mpiexec", "-n", "2", "python3", PROBE])
    _assert_two_ranks(proc, "MPICH Version:      5.0.2", f"{MPICH5}/lib/{soname()}")


def test_one_image_runs_under_intel_mpi_bound_in(abi_image: str) -> None:
    need_file(IMPI / "lib" / soname(), "Intel MPI's libmpi_abi", "it is bound in", "`make host`")
    inj = _injection("intel-mpi@2021.18.1", IMPI)
    # Intel MPI's own mpiexec (Hydra) starts the ranks: the site's srun/PMIx variables are not
    # for it (rule mpi-abi-launcher), its root and libfabric providers are.
    env = {
        k: v for k, v in inj.env.items() if k in ("I_MPI_ROOT", "FI_PROVIDER_PATH", "FI_PROVIDER")
    }
    proc = _run(abi_image, inj, [f"{IMPI}/bin/mpiexec", "-n", "2", "python3", PROBE], env)
    _assert_two_ranks(proc, "Intel(R) MPI Library 2021.18.1", f"{IMPI}/lib/{soname()}")


def test_the_preflight_passes_in_the_abi_image(abi_image: str, tmp_path: Path) -> None:
    """The job's preflight, with the ABI injection, in the image: the site library replaces
    the image's libmpi_abi.so.1, and its ABI version is printed."""
    from hpcenv.jobs.render import step_script

    need_file(
        MPICH5 / "lib" / soname(), "MPICH 5.0.2's libmpi_abi", "it is bound in", "`make host`"
    )
    inj = _injection("mpich@5.0.2", MPICH5)
    script = tmp_path / "bind-preflight.sh"
    script.write_text(step_script("bind_preflight") + "\n")
    tmp_path.chmod(0o755)  # the image's user (hpc) reads it
    opts = ["--rm", "-v", f"{tmp_path}:/steps:ro", "-v", f"{MPICH5}:{MPICH5}:ro"]
    opts += ["--env", f"LD_LIBRARY_PATH={inj.ld_library_path}"]
    proc = _podman("run", *opts, abi_image, "sh", "/steps/bind-preflight.sh", *preflight_args(inj))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        f"site MPI mpich@5.0.2 provides {MPICH5}/lib/{soname()} (ABI version 1.0)" in proc.stdout
    ), proc.stdout


GLIBC_LIBS = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux")


@pytest.fixture(scope="module")
def ompi6_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Open MPI 6.0.0~rc2 (Debian sid, tests/data/ompi6-abi) as a site prefix: its
    libmpi_abi.so.1 and the libraries that one needs, glibc's own left out (the image has one)."""
    need_tool("podman", why="Open MPI 6 comes from a container image of Debian sid's packages")
    image = build_ompi6_image(tmp_path_factory.mktemp("ompi6"))
    root = tmp_path_factory.mktemp("site") / "openmpi-6"
    (root / "lib").mkdir(parents=True)
    lib = f"/usr/lib/x86_64-linux-gnu/{soname()}"
    skip = "|".join(GLIBC_LIBS).replace(".", "\\.")
    copy = (
        f"cp -L {lib} /out/lib/ && ldd {lib} | awk '$3 ~ /^\\// {{print $3}}' "
        f"| grep -Ev '/({skip})' | xargs -r cp -L -t /out/lib/"
    )
    proc = _podman("run", "--rm", "-v", f"{root}:/out", image, "sh", "-c", copy)
    assert proc.returncode == 0, proc.stderr
    return root


def test_a_site_mpi_built_for_a_newer_glibc_does_not_bind(
    abi_image: str, ompi6_prefix: Path
) -> None:
    """Rule mpi-abi-glibc: Open MPI 6.0.0~rc2 provides the ABI (rule mpi-abi-providers, and
    tests/test_mpi_abi.py runs an ABI binary under it in sid), but Debian sid built it for glibc
    2.38; bound into this Debian 12 (glibc 2.36) image, the loader refuses it."""
    inj = _injection("openmpi@6.0.0", ompi6_prefix)
    proc = _run(abi_image, inj, ["python3", PROBE])
    assert proc.returncode != 0 and not RANK.search(proc.stdout), proc.stdout
    assert "version `GLIBC_2.38' not found" in proc.stderr, proc.stderr[-2000:]


@pytest.fixture
def abi_site(request: pytest.FixtureRequest, abi_image: str) -> str:
    """Each bind site with the ABI image ready: the podman image, or its SIF (``hpcenv build
    --site local-bind-sif``: converted from the same build and delivered where jobs look)."""
    site: str = request.param
    if site == "local-bind-sif":
        request.getfixturevalue("site_apptainer")
        proc = subprocess.run(
            [HPCENV, "build", "--site", site, "--recipe", "mpi4py-abi"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=REAL_ENV,
            timeout=1500,
        )
        assert proc.returncode == 0, proc.stdout[-4000:]
    return site


@pytest.mark.slurm
@pytest.mark.parametrize(
    "abi_site",
    [
        pytest.param("local-bind", id="podman"),
        pytest.param("local-bind-sif", id="sif", marks=pytest.mark.apptainer),
    ],
    indirect=True,
)
def test_the_job_hpcenv_writes_runs_the_abi_image_under_the_sites_intel_mpi(
    abi_site: str, slurm: SlurmInfo, site_mpi_prefix: Path, tmp_path: Path
) -> None:
    """``hpcenv submit --site local-bind[-sif] --recipe mpi4py-abi --wait`` under the real
    one-node Slurm: the job script hpcenv renders for the site (srun --mpi=pmix, one podman
    container per rank, or the SIF under the site's apptainer exec; Intel MPI 2021.18.1 bound as
    the site file says) runs the ABI image; its preflight
    checks libmpi_abi.so.1 (bindmodel.standard_abi, chosen by the job renderer for this recipe)
    and every rank runs on Intel MPI's libmpi_abi only."""
    shutil.copy(DATA / "mpi_abi_allreduce.py", tmp_path)
    tmp_path.chmod(0o755)
    cli = [HPCENV, "submit", "--site", abi_site, "--recipe", "mpi4py-abi"]
    cli += ["--ranks-per-node", "2", "--workdir", str(tmp_path), "--wait", "--timeout", "240"]
    cli += ["--", "/opt/venv/bin/python3", "{workdir}/mpi_abi_allreduce.py"]
    proc, log, lines = _job(cli)
    assert proc.returncode == 0, log
    assert (
        f"site MPI intel-mpi@2021.18.1 provides {site_mpi_prefix}/lib/{soname()} "
        "(ABI version 1.0)" in log
    ), log
    assert f"replaces the image's /opt/venv/lib/{soname()}" in log, log
    fake = subprocess.CompletedProcess(cli, 0, lines, "")
    _assert_two_ranks(fake, "Intel(R) MPI Library 2021.18.1", f"{site_mpi_prefix}/lib/{soname()}")


SCRATCH = Path("/var/tmp/hpcenv-scratch/rehearsal-tests")  # both rehearsal nodes see it


@contextmanager
def two_node_workdir(name: str) -> Iterator[Path]:
    """A job folder on the scratch disk both rehearsal nodes see, with the job records there
    (``cache``: each node has its own /tmp); removed afterwards."""
    wd = SCRATCH / f"{name}-{os.getpid()}"
    (wd / "cache").mkdir(parents=True)
    try:
        yield wd
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def two_node_job(
    site: Path | str, recipe: str, wd: Path, script: str, image: str | None = None
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """``hpcenv submit`` of ``{workdir}/script`` on both rehearsal nodes, one rank each, as
    :func:`_job` runs it; the site file names its own Slurm, the records go to ``wd/cache``."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["HPCENV_CACHE"] = str(wd / "cache")
    cli = [HPCENV, "submit", "--site", str(site), "--recipe", recipe]
    cli += ["--image", image] if image else []
    cli += ["--nodes", "2", "--ranks-per-node", "1", "--workdir", str(wd)]
    cli += ["--wait", "--timeout", "300", "--json"]
    cli += ["--", "/opt/venv/bin/python3", f"{{workdir}}/{script}"]
    return _job(cli, env, wd)


def apptainer_runtime(site: str) -> str:
    """The site-file lines that give a two-node site ``site``'s Apptainer as its runtime."""
    return f"runtime: {{kind: apptainer, executable: {load_site(site).runtime.executable}}}\n"


@pytest.mark.slurm
@pytest.mark.timeout(2400)
def test_the_abi_image_runs_on_two_nodes_under_the_sites_intel_mpi(
    two_node: TwoNodeInfo, site_mpi_prefix: Path
) -> None:
    """The two-node rehearsal as a bind-model site (site-configs/local-2node-bind.yaml): the
    ABI image built for it, one rank on node1 and one on node2 (srun --mpi=pmix), Intel MPI's
    libmpi_abi bound in each, libfabric's tcp provider over the veth link; exact sums."""
    build = subprocess.run(
        [HPCENV, "build", "--site", "local-2node-bind", "--recipe", "mpi4py-abi"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=REAL_ENV,
        timeout=1500,
    )
    assert build.returncode == 0, build.stdout[-4000:]
    with two_node_workdir("abi-2node") as wd:
        shutil.copy(DATA / "mpi_abi_allreduce.py", wd)
        proc, log, lines = two_node_job(
            "local-2node-bind", "mpi4py-abi", wd, "mpi_abi_allreduce.py"
        )
        assert proc.returncode == 0, log
        assert f"provides {site_mpi_prefix}/lib/{soname()} (ABI version 1.0)" in log, log
        ranks = _assert_two_ranks(
            subprocess.CompletedProcess([], 0, lines, ""),
            "Intel(R) MPI Library 2021.18.1",
            f"{site_mpi_prefix}/lib/{soname()}",
        )
        assert [r[5] for r in ranks] == ["node1", "node2"], log
