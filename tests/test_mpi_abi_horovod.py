"""Horovod's MPI operations built against the MPI-5 standard ABI: one image, any site MPI (issue 38).

``hpcenv build --site local-bind --recipe horovod-abi``: the resolver decides the ABI (the site
binds Intel MPI 2021.18.1, which provides ``libmpi_abi.so.1``; the recipe's MPI programs are
mpi4py and Horovod, both allowed by rule ``mpi-abi-programs``), so Horovod 0.28.1 is compiled
with ``CC``/``CXX`` the ABI wrappers of PyPI's mpich 5.0.2 (``mpicc_abi``/``mpicxx_abi``): its
``mpi_lib_v2`` needs ``libmpi_abi.so.1`` and no family ``libmpi.so.*`` (the build checks it, and
so does the first test here).

Then ONE image (by its id) runs 2 ranks of tests/data/hvd_identity.py: Horovod's exact-sum
allreduces (float32, float64, a 1 MiB float64 tensor), each rank reporting the MPI library
Horovod's own ``libmpi_abi.so.1`` says it is and every ``libmpi`` in ``/proc/self/maps``:

- alone, on its own MPICH 5.0.2; under MPICH 5.0.2 and under Intel MPI 2021.18.1 bound in, each
  started by its own ``mpiexec`` (rule ``mpi-abi-launcher``);
- on the two Slurm rehearsal nodes as ``hpcenv submit`` renders the job for a bind site (one rank
  per node): under Intel MPI (site-configs/local-2node-bind.yaml, srun --mpi=pmix) and under
  MPICH 5.0.2 (srun --mpi=pmi2), in podman and as a SIF (``hpcenv build --site local-bind-sif``,
  converted from the same build).

Not here: Open MPI 6 under this image. Debian sid's Open MPI 6.0.0~rc2 needs glibc 2.38 (rule
``mpi-abi-glibc``) and this image is Debian 12 (glibc 2.36); the Debian 13 image
(tests/test_mpi_abi_trixie.py runs its mpi4py under Open MPI 6) has Python 3.13, for which this
machine has no CPU torch wheel (only cp311 on its disk; download.pytorch.org is not reachable,
PyPI's cp313 torch is the multi-GB CUDA build), and Horovod 0.28.1 builds its operations only
with a framework.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from image_builds import built
from requirements import need_file
from test_mpi_abi_image import (
    DATA,
    HPCENV,
    IMPI,
    MPICH5,
    _injection,
    _podman,
    _run,
    apptainer_runtime,
    two_node_job,
    two_node_workdir,
)
from test_mpi_abi_trixie import MPICH5_SAYS, _bind_site

from hpcenv.mpi_abi import soname

if TYPE_CHECKING:
    from services import TwoNodeInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.podman, pytest.mark.timeout(1800)]

IMAGE = "localhost/hpcenv/horovod-abi:local-bind"
PROBE = "/probe/hvd_identity.py"
IMPI_SAYS = "Intel(R) MPI Library 2021.18.1"


@pytest.fixture(scope="module")
def hvd_abi_image() -> str:
    """The image's id, built by ``hpcenv build`` (tests/image_builds.py builds it in the
    background while the unit tests run; found cached here)."""
    built("hvd-abi")
    ident = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE)
    assert ident.returncode == 0, ident.stderr
    return ident.stdout.strip()


def _ranks(out: str) -> list[dict[str, Any]]:
    rows = [
        json.loads(ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("hvd-identity ")
    ]
    return sorted(rows, key=lambda r: r["rank"])


def _assert_two_exact_ranks(out: str, says: str, lib: str) -> list[dict[str, Any]]:
    """Two Horovod ranks over MPI with exact sums, each on ``says``'s library with only ``lib``
    mapped (no family libmpi, not the image's own ABI library)."""
    ranks = _ranks(out)
    assert [(r["rank"], r["size"]) for r in ranks] == [(0, 2), (1, 2)], out[-3000:]
    for r in ranks:
        assert r["mpi_built"] and r["mpi_enabled"] and r["allreduce_exact"], r
        assert says in r["library"], r
        assert r["maps"] == [lib], r
    return ranks


def test_horovod_is_built_against_the_abi(hvd_abi_image: str, tmp_path: Path) -> None:
    """The lock says ABI for mpi and Horovod; Horovod's MPI operations need libmpi_abi.so.1 and
    no family libmpi."""
    label = '{{index .Labels "io.hpcenv.lock"}}'
    lock = json.loads(_podman("image", "inspect", "--format", label, hvd_abi_image).stdout)
    comps = lock["components"]
    assert comps["mpi"]["options"]["standard_abi"] == soname()
    assert comps["horovod"]["options"]["CXX"] == "/opt/venv/bin/mpicxx_abi"
    assert "mpi-abi-image" in comps["horovod"]["rules"]
    # the image has no binutils: the library is copied out and read with the host's readelf
    ops = "/opt/venv/lib/python3*/site-packages/horovod/torch/mpi_lib_v2.*.so"
    tmp_path.chmod(0o777)  # the image's user (hpc) writes it
    copy = _podman(
        "run", "--rm", "-v", f"{tmp_path}:/out", hvd_abi_image, "sh", "-c", f"cp {ops} /out/"
    )
    assert copy.returncode == 0, copy.stderr
    (lib,) = tmp_path.glob("mpi_lib_v2.*.so")
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True)
    libs = [ln.split("[")[1].rstrip("]") for ln in needed.stdout.splitlines() if "(NEEDED)" in ln]
    assert soname() in libs and not [x for x in libs if x.startswith("libmpi.so")], libs


def test_one_horovod_image_alone_and_under_mpich_5_and_intel_mpi(hvd_abi_image: str) -> None:
    alone = _run(hvd_abi_image, None, ["mpiexec", "-n", "2", "python3", PROBE])
    assert alone.returncode == 0, alone.stderr[-3000:]
    _assert_two_exact_ranks(alone.stdout, MPICH5_SAYS, f"/opt/venv/lib/{soname()}")
    need_file(
        MPICH5 / "lib" / soname(), "MPICH 5.0.2's libmpi_abi", "it is bound in", "`make host`"
    )
    inj = _injection("mpich@5.0.2", MPICH5)
    mpich = _run(hvd_abi_image, inj, [f"{MPICH5}/bin/mpiexec", "-n", "2", "python3", PROBE])
    assert mpich.returncode == 0, mpich.stderr[-3000:]
    _assert_two_exact_ranks(mpich.stdout, MPICH5_SAYS, f"{MPICH5}/lib/{soname()}")
    need_file(IMPI / "lib" / soname(), "Intel MPI's libmpi_abi", "it is bound in", "`make host`")
    inj = _injection("intel-mpi@2021.18.1", IMPI)
    keep = ("I_MPI_ROOT", "FI_PROVIDER_PATH", "FI_PROVIDER")
    env = {k: v for k, v in inj.env.items() if k in keep}
    intel = _run(hvd_abi_image, inj, [f"{IMPI}/bin/mpiexec", "-n", "2", "python3", PROBE], env)
    assert intel.returncode == 0, intel.stderr[-3000:]
    _assert_two_exact_ranks(intel.stdout, IMPI_SAYS, f"{IMPI}/lib/{soname()}")
    same = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
    assert same == hvd_abi_image


@pytest.fixture
def hvd_image_option(request: pytest.FixtureRequest, hvd_abi_image: str) -> tuple[str, str]:
    """The runtime lines of a two-node site and its ``--image``: the podman image above, or its
    SIF (``hpcenv build --site local-bind-sif``: the same build stage, converted and delivered
    on the scratch disk both nodes see)."""
    if request.param == "podman":
        return "", IMAGE
    request.getfixturevalue("site_apptainer")
    built("hvd-abi-sif")
    dry = [HPCENV, "submit", "--site", "local-bind-sif", "--recipe", "horovod-abi", "--dry-run"]
    plan = subprocess.run([*dry, "--json", "--", "true"], capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    sif = json.loads(plan.stdout)["image"]  # where the build delivered it
    assert sif.endswith(".sif") and Path(sif).is_file(), sif
    return apptainer_runtime("local-bind-sif"), sif


@pytest.mark.slurm
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("mpi", ["intel", "mpich5"])
@pytest.mark.parametrize(
    "hvd_image_option",
    [
        pytest.param("podman", id="podman"),
        pytest.param("sif", id="sif", marks=pytest.mark.apptainer),
    ],
    indirect=True,
)
def test_one_horovod_image_on_two_nodes_under_intel_mpi_and_mpich_5(
    hvd_abi_image: str,
    hvd_image_option: tuple[str, str],
    mpi: str,
    site_mpi_prefix: Path,
    two_node: TwoNodeInfo,
) -> None:
    """``hpcenv submit`` on the two-node rehearsal as a bind site (local-2node-bind): one rank
    on node1 and one on node2, the site's libmpi_abi bound in each, Horovod's exact sums over
    MPI; Intel MPI over srun --mpi=pmix, MPICH 5.0.2 over srun --mpi=pmi2."""
    runtime, image = hvd_image_option
    with two_node_workdir(f"hvd-abi-{mpi}-2node") as wd:
        shutil.copy(DATA / "hvd_identity.py", wd)
        if mpi == "intel":
            prefix, says = site_mpi_prefix, IMPI_SAYS
            site = wd / "site.yaml"
            site.write_text(
                "extends: local-2node-bind\nname: local-2node-bind-hvd\n"
                "description: local-2node-bind for the Horovod ABI image\n"
                f"recipes: [horovod-abi]\n{runtime}"
            )
        else:
            lib = MPICH5 / "lib" / soname()
            need_file(lib, "MPICH 5.0.2's libmpi_abi", "it is bound in", "`make host`")
            prefix, says = MPICH5, MPICH5_SAYS
            site = _bind_site(wd, "local-2node-bind", mpi, prefix, runtime)
        proc, log, _ = two_node_job(site, "horovod-abi", wd, "hvd_identity.py", image)
        assert proc.returncode == 0, log
        assert f"provides {prefix}/lib/{soname()} (ABI version 1.0)" in log, log
        ranks = _assert_two_exact_ranks(log, says, f"{prefix}/lib/{soname()}")
        assert [r["host"] for r in ranks] == ["node1", "node2"], log
        same = _podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
        assert same == hvd_abi_image
