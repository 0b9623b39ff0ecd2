"""One MPI-5 ABI image under three site MPIs of two lineages, Open MPI 6 included (issue 38).

tests/test_mpi_abi_image.py shows the ABI image (Debian 12) under MPICH 5.0.2 and Intel MPI
2021.18.1 bound in, and that Debian sid's Open MPI 6.0.0~rc2 cannot bind into it: sid built it for
glibc 2.38 (rule ``mpi-abi-glibc``). Here the same recipe is built on Debian 13 (site-configs/
local-bind-trixie.yaml: glibc 2.41, python 3.13; compat.yaml ``os.debian-13``), and ONE image
(its id, the same for every run) runs 2 ranks of the exact-sum mpi4py allreduce
(tests/data/mpi_abi_allreduce.py):

- alone, on its own MPICH 5.0.2, and under MPICH 5.0.2 and Intel MPI 2021.18.1 bound in, each
  started by its own ``mpiexec`` (rule ``mpi-abi-launcher``);
- under Open MPI 6.0.0~rc2 bound in (its ``libmpi_abi.so.1`` and the libraries it needs, from
  Debian sid: tests/data/ompi6-abi), as the job ``hpcenv submit`` renders for a bind site whose
  MPI is ``openmpi@6.0.0``: srun --mpi=pmix under the real one-node Slurm, one podman container
  per rank, the job's preflight checking the site's ``libmpi_abi.so.1``.

Each rank reports ``MPI.Get_library_version()``, ``MPI.Get_abi_version()`` and every
``libmpi_abi`` in ``/proc/self/maps``: only the bound one is mapped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from image_builds import built
from requirements import need_file
from test_mpi_abi_image import (
    DATA,
    HPCENV,
    IMPI,
    MPICH5,
    PROBE,
    _assert_two_ranks,
    _injection,
    _job,
    _podman,
    _run,
    apptainer_runtime,
    ompi6_prefix,  # noqa: F401 (a fixture)
    two_node_job,
    two_node_workdir,
)

from hpcenv.mpi_abi import soname

if TYPE_CHECKING:
    from services import SlurmInfo, TwoNodeInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.podman, pytest.mark.timeout(1800)]

SITE = "local-bind-trixie"
IMAGE = f"localhost/hpcenv/mpi4py-abi:{SITE}"
OMPI6_SAYS = "Open MPI v6.0.0rc2"
MPICH5_SAYS = "MPICH Version:      5.0.2"
# the site MPIs bound in by the jobs below: spec and PMI. MPICH 5.0.2's wheel starts under srun
# --mpi=pmi2 only (measured 2026-11-28 with a C program from its mpicc_abi, bare on both
# rehearsal nodes: --mpi=pmix stops in MPIR_pmi_init with any MPIR_CVAR_PMI_VERSION)
SITE_MPIS = {"openmpi6": ("openmpi@6.0.0", "pmix@4"), "mpich5": ("mpich@5.0.2", "pmi2")}


@pytest.fixture(scope="module")
def trixie_image() -> str:
    """The image's id, built once by ``hpcenv build`` (tests/image_builds.py builds it in the
    background while the unit tests run; found cached here)."""
    built("abi-trixie")
    ident = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE)
    assert ident.returncode == 0, ident.stderr
    return ident.stdout.strip()


def test_the_image_is_debian_13_and_built_against_the_abi(trixie_image: str) -> None:
    proc = _run(
        trixie_image,
        None,
        [
            "sh",
            "-c",
            "ldd --version | head -1 && /opt/venv/bin/python3 -c 'import mpi4py, sys; "
            "mpi4py.rc.initialize = False; from mpi4py import MPI; print(sys.version_info[:2]); "
            "print(MPI.Get_library_version().splitlines()[0])'",
        ],
    )
    assert proc.returncode == 0, proc.stderr
    assert "2.41" in proc.stdout and "(3, 13)" in proc.stdout, proc.stdout
    assert "MPICH Version:      5.0.2" in proc.stdout, proc.stdout


def test_alone_and_under_mpich_5_and_intel_mpi(trixie_image: str) -> None:
    alone = _run(trixie_image, None, ["mpiexec", "-n", "2", "python3", PROBE])
    _assert_two_ranks(alone, "MPICH Version:      5.0.2", f"/opt/venv/lib/{soname()}")
    need_file(
        MPICH5 / "lib" / soname(), "MPICH 5.0.2's libmpi_abi", "it is bound in", "`make host`"
    )
    inj = _injection("mpich@5.0.2", MPICH5)
    mpich = _run(trixie_image, inj, [f"{MPICH5}/bin/mpiexec", "-n", "2", "python3", PROBE])
    _assert_two_ranks(mpich, "MPICH Version:      5.0.2", f"{MPICH5}/lib/{soname()}")
    need_file(IMPI / "lib" / soname(), "Intel MPI's libmpi_abi", "it is bound in", "`make host`")
    inj = _injection("intel-mpi@2021.18.1", IMPI)
    keep = ("I_MPI_ROOT", "FI_PROVIDER_PATH", "FI_PROVIDER")
    env = {k: v for k, v in inj.env.items() if k in keep}
    intel = _run(trixie_image, inj, [f"{IMPI}/bin/mpiexec", "-n", "2", "python3", PROBE], env)
    _assert_two_ranks(intel, "Intel(R) MPI Library 2021.18.1", f"{IMPI}/lib/{soname()}")


def _bind_site(folder: Path, base: str, mpi: str, prefix: Path, more: str = "") -> Path:
    """``base`` with ``mpi`` (a key of :data:`SITE_MPIS`) at ``prefix`` as the site's MPI
    (``more``: further site-file lines); nothing of Intel MPI's (no host PMIx library: Open MPI 6
    brings its own PMIx client, sid's libpmix.so.2; PyPI's MPICH 5 speaks PMI-2 only)."""
    spec, pmi = SITE_MPIS[mpi]
    path = folder / f"{base}-{mpi}.yaml"
    plugin = f"scheduler:\n  mpi_plugin: {pmi}\n" if pmi == "pmi2" else ""
    path.write_text(
        f"extends: {base}\n"
        f"name: {base}-{mpi}\n"
        f"description: {base} with {spec} as the site MPI\n"
        f"{more}{plugin}"
        "mpi:\n"
        f"  spec: {spec}\n"
        f"  pmi: {pmi}\n"
        f"  root: {prefix}\n"
        "  bind_paths: []\n"
        "  host_libs: []\n"
        "  env: {}\n"
    )
    return path


def _mpi_programs(image: str) -> str:
    """The sha256 of the image's compiled MPI program (mpi4py.MPI) and of its libmpi_abi."""
    sums = "sha256sum /opt/venv/lib/python3*/site-packages/mpi4py/MPI.*.so /opt/venv/lib/libmpi_abi.so.1"
    proc = _podman("run", "--rm", image, "sh", "-c", sums)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 2, proc.stderr
    return proc.stdout


@pytest.fixture
def runtime_image(request: pytest.FixtureRequest, trixie_image: str) -> tuple[str, list[str]]:
    """The site to extend and the ``--image`` option: the podman image above, or its SIF
    (``hpcenv build --site local-bind-trixie-sif``: the same build stage, so the same compiled
    mpi4py.MPI and libmpi_abi, converted and delivered where jobs look)."""
    if request.param == "podman":
        return SITE, ["--image", IMAGE]
    request.getfixturevalue("site_apptainer")
    built("abi-trixie-sif")
    assert _mpi_programs(f"{IMAGE}-sif") == _mpi_programs(IMAGE)  # the SIF's source
    dry = [HPCENV, "submit", "--site", f"{SITE}-sif", "--recipe", "mpi4py-abi", "--dry-run"]
    plan = subprocess.run([*dry, "--json", "--", "true"], capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    sif = json.loads(plan.stdout)["image"]  # where the build delivered it
    assert sif.endswith(".sif") and Path(sif).is_file(), sif
    return f"{SITE}-sif", ["--image", sif]


@pytest.mark.slurm
@pytest.mark.parametrize(
    "runtime_image",
    [
        pytest.param("podman", id="podman"),
        pytest.param("sif", id="sif", marks=pytest.mark.apptainer),
    ],
    indirect=True,
)
def test_the_job_hpcenv_writes_runs_the_image_under_open_mpi_6(
    trixie_image: str,
    runtime_image: tuple[str, list[str]],
    ompi6_prefix: Path,  # noqa: F811 (the fixture imported above)
    slurm: SlurmInfo,
    tmp_path: Path,
) -> None:
    """``hpcenv submit`` for a bind site whose MPI is Open MPI 6.0.0~rc2, with the same image
    (podman: ``--image``, the id above; SIF: its conversion): srun --mpi=pmix, the preflight
    finds Open MPI's libmpi_abi.so.1, and both ranks run on it with exact sums."""
    base, image_option = runtime_image
    ompi6_prefix.parent.chmod(0o755)
    shutil.copy(DATA / "mpi_abi_allreduce.py", tmp_path)
    tmp_path.chmod(0o755)
    site = _bind_site(tmp_path, base, "openmpi6", ompi6_prefix)
    cli = [HPCENV, "submit", "--site", str(site), "--recipe", "mpi4py-abi", *image_option]
    cli += ["--ranks-per-node", "2", "--workdir", str(tmp_path), "--wait", "--timeout", "240"]
    cli += ["--", "/opt/venv/bin/python3", "{workdir}/mpi_abi_allreduce.py"]
    proc, log, lines = _job(cli)
    assert proc.returncode == 0, log
    assert f"site MPI openmpi@6.0.0 provides {ompi6_prefix}/lib/{soname()}" in log, log
    fake = subprocess.CompletedProcess(cli, 0, lines, "")
    _assert_two_ranks(fake, OMPI6_SAYS, f"{ompi6_prefix}/lib/{soname()}")
    same = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
    assert same == trixie_image  # one image: the one the other MPIs ran


@pytest.mark.slurm
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("mpi", ["openmpi6", "mpich5"])
@pytest.mark.parametrize(
    "runtime_image",
    [
        pytest.param("podman", id="podman"),
        pytest.param("sif", id="sif", marks=pytest.mark.apptainer),
    ],
    indirect=True,
)
def test_the_same_image_runs_on_two_nodes_under_open_mpi_6_and_mpich_5(
    trixie_image: str,
    runtime_image: tuple[str, list[str]],
    mpi: str,
    request: pytest.FixtureRequest,
    two_node: TwoNodeInfo,
) -> None:
    """The two-node rehearsal as a bind site (local-2node-bind with the Debian 13 image) whose
    MPI is Open MPI 6.0.0~rc2 (srun --mpi=pmix) or MPICH 5.0.2 (srun --mpi=pmi2: the rank
    wrapper carries Slurm's PMI_FD into the container; without it each rank ran alone, size 1,
    measured 2026-11-28): one rank on node1 and one on node2, the site's libmpi_abi bound in
    each, exact sums; the image is the one above (``--image``: its id, or its SIF, on the
    scratch disk both nodes see)."""
    one_node_site, (_, image) = runtime_image
    runtime = apptainer_runtime(one_node_site) if one_node_site.endswith("-sif") else ""
    with two_node_workdir(f"abi-{mpi}-2node") as wd:
        if mpi == "openmpi6":  # /tmp is each node's own
            prefix = shutil.copytree(request.getfixturevalue("ompi6_prefix"), wd / "openmpi-6")
            says = OMPI6_SAYS
        else:
            lib = MPICH5 / "lib" / soname()
            need_file(lib, "MPICH 5.0.2's libmpi_abi", "it is bound in", "`make host`")
            prefix, says = MPICH5, MPICH5_SAYS
        shutil.copy(DATA / "mpi_abi_allreduce.py", wd)
        debian_13 = (  # local-2node-bind with the Debian 13 image
            "os: debian-13\ndefaults: {python: '3.13'}\n"
            "build: {base_image: 'localhost/hpcenv-base:trixie'}\n"
        )
        site = _bind_site(wd, "local-2node-bind", mpi, prefix, debian_13 + runtime)
        proc, log, lines = two_node_job(site, "mpi4py-abi", wd, "mpi_abi_allreduce.py", image)
        assert proc.returncode == 0, log
        assert f"provides {prefix}/lib/{soname()} (ABI version 1.0)" in log, log
        ranks = _assert_two_ranks(
            subprocess.CompletedProcess([], 0, lines, ""), says, f"{prefix}/lib/{soname()}"
        )
        assert [r[5] for r in ranks] == ["node1", "node2"], log
        same = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
        assert same == trixie_image
