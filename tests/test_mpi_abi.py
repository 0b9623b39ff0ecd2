"""The MPI-5 standard ABI, for real: one binary compiled ONCE with MPICH 5.0.2's ``mpicc_abi``
(``mpi_abi.h``, ``libmpi_abi.so.1``) runs 2 ranks, unchanged, under three implementations:
MPICH 5.0.2 (PyPI wheel, scripts/mpi-abi-setup.sh) and Intel MPI 2021.18.1 (the local-bind site
MPI, scripts/site-mpi-setup.sh), both under /opt/site, with their own mpiexec, and Open MPI 6.0.0~rc2 (Debian sid, the image
tests/data/ompi6-abi) with its mpirun. Every rank reports an exact allreduce, ABI version 1.0,
the library's own name and only that library's libmpi_abi in /proc/self/maps.

Also shown here: the rules ``mpi-abi-providers``, ``mpi-abi-fortran`` and ``mpi-abi-pmpi`` (what
each library file carries), ``mpi-abi-launcher`` (another family's launcher cannot start the
ranks), and the job preflight's ABI check against the real libraries.

An hpcenv image built against the ABI (recipe mpi4py-abi: mpi4py compiled with mpicc_abi, PyPI's
mpich wheel as the image's own libmpi_abi) runs, as one image digest, under MPICH 5.0.2 and Intel
MPI 2021.18.1 bound in, and under the job hpcenv writes for local-bind on the real one-node
Slurm, in podman and as a SIF, and on the two-node rehearsal (site local-2node-bind):
tests/test_mpi_abi_image.py.

Not shown here (what blocks it): that image under Open MPI 6 (Debian sid's 6.0.0~rc2 needs glibc
2.38, the image is Debian 12 with 2.36: rule mpi-abi-glibc, shown by tests/test_mpi_abi_image.py);
Horovod's MPI ops against the ABI (rule mpi-abi-programs: Horovod 0.28.1 not built against
mpi_abi.h).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from image_builds import build_ompi6_image
from requirements import need_file, need_tool

from hpcenv.jobs.bindmodel import ABI_MISMATCH_EXIT, preflight_args, site_mpi, standard_abi
from hpcenv.knowledge import rule
from hpcenv.mpi_abi import soname

pytestmark = [pytest.mark.podman, pytest.mark.timeout(1500)]

DATA = Path(__file__).parent / "data"
SETUP = "`make host` (scripts/mpi-abi-setup.sh) installs it"
SITE = Path(os.environ.get("HPCENV_SITE_ROOT", "/opt/site"))
MPICH5 = SITE / "mpich-5"
IMPI = SITE / "intel-mpi"  # 2021.18.1, the local-bind site MPI; its wheel has libmpi_abi.so.1 too
SITE_MPI = "`make host` (scripts/site-mpi-setup.sh) installs it"
RANK = re.compile(
    r"^ABI-RANK rank=(\d) size=(\d) sum=(\d+) expect=(\d+) abi=(\S+) maps=(\S*) lib=(.*)$"
)
OMPI_ROOT = {
    k: "1"
    for k in (
        "OMPI_ALLOW_RUN_AS_ROOT",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
        "PRTE_ALLOW_RUN_AS_ROOT",
        "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM",
    )
}


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


def _ranks(out: str) -> list[tuple[str, ...]]:
    return sorted(m.groups() for m in map(RANK.match, out.splitlines()) if m)


def _assert_two_ranks(proc: subprocess.CompletedProcess[str], lib: str, maps: str) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks = _ranks(proc.stdout)
    assert [r[:5] for r in ranks] == [
        ("0", "2", "3", "3", "1.0"),
        ("1", "2", "3", "3", "1.0"),
    ], proc.stdout
    for r in ranks:
        assert r[5] == maps + ";", r  # one libmpi_abi mapped: the bound one
        assert lib in r[6], r


@pytest.fixture(scope="module")
def abi_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/mpi_abi_probe.c compiled once with MPICH 5's mpicc_abi."""
    need_tool("cc", why="mpicc_abi compiles with it")
    need_file(MPICH5 / "bin" / "mpicc_abi", "MPICH 5.0.2's mpicc_abi", "it compiles", SETUP)
    out = tmp_path_factory.mktemp("abi") / "mpi_abi_probe"
    proc = _run([str(MPICH5 / "bin" / "mpicc_abi"), "-o", str(out), str(DATA / "mpi_abi_probe.c")])
    assert proc.returncode == 0, proc.stderr
    needed = _run(["readelf", "-d", str(out)]).stdout
    assert f"Shared library: [{soname()}]" in needed and "libmpi.so" not in needed, needed
    return out


@pytest.fixture(scope="module")
def ompi6_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Open MPI 6.0.0~rc2 from Debian sid over the local base (built once; podman caches it)."""
    need_tool("podman", why="Open MPI 6 runs in a container with Debian sid's packages")
    return build_ompi6_image(tmp_path_factory.mktemp("ompi6"))


def test_the_libraries_carry_what_the_rules_say(abi_binary: Path) -> None:
    """Rules mpi-abi-providers (the soname), mpi-abi-fortran (only Intel ships a Fortran ABI
    library) and mpi-abi-pmpi (the PMPI_ ABI symbols are exported)."""
    need_tool("readelf", why="it reads the libraries' SONAME and symbols")
    libs = {}
    for prefix, how in ((MPICH5, SETUP), (IMPI, SITE_MPI)):
        libs[prefix] = need_file(prefix / "lib" / soname(), "an MPI-5 ABI library", "run", how)
        assert f"Library soname: [{soname()}]" in _run(["readelf", "-d", str(libs[prefix])]).stdout
        symbols = _run(["readelf", "--dyn-syms", "--wide", str(libs[prefix])]).stdout
        assert re.search(r" PMPI_Allreduce$", symbols, re.M), prefix
        assert re.search(r" MPI_Abi_get_version$", symbols, re.M), prefix
    fortran = rule("mpi-abi-providers").data["fortran"]
    assert (IMPI / "lib" / fortran["intel-mpi"]).exists()
    assert not list((MPICH5 / "lib").glob("libmpifort*")) and "mpich" not in fortran


def test_one_binary_runs_under_mpich_intel_mpi_and_open_mpi(
    abi_binary: Path, ompi6_image: str
) -> None:
    digest = hashlib.sha256(abi_binary.read_bytes()).hexdigest()
    mpich = _run([str(MPICH5 / "bin" / "mpiexec"), "-n", "2", str(abi_binary)])
    _assert_two_ranks(mpich, "MPICH Version:      5.0.2", f"{MPICH5}/lib/{soname()}")

    impi_env = {"I_MPI_ROOT": str(IMPI), "LD_LIBRARY_PATH": f"{IMPI}/lib"}
    impi = _run([str(IMPI / "bin" / "mpiexec"), "-n", "2", str(abi_binary)], impi_env)
    _assert_two_ranks(impi, "Intel(R) MPI Library 2021.18.1", f"{IMPI}/lib/{soname()}")

    from hpcenv.engines import engine_env

    env = [a for k, v in OMPI_ROOT.items() for a in ("--env", f"{k}={v}")]
    ompi = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            *env,
            "-v",
            f"{abi_binary.parent}:/abi:ro",
            ompi6_image,
            "mpirun",
            "--oversubscribe",
            "-np",
            "2",
            f"/abi/{abi_binary.name}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=engine_env(),
    )
    _assert_two_ranks(
        ompi,
        "Open MPI v6.0.0rc2",
        # the file behind libmpi_abi.so.1 (its SONAME) in Debian's libopenmpi40
        "/usr/lib/x86_64-linux-gnu/libmpi_abi_openmpi.so.1.0.0",
    )
    assert hashlib.sha256(abi_binary.read_bytes()).hexdigest() == digest  # the same file


def test_another_familys_launcher_cannot_start_the_ranks(abi_binary: Path) -> None:
    """Rule mpi-abi-launcher: the binary is portable, the launch is not. Bound to MPICH 5 but
    started by Debian's Open MPI 4.1.4 mpirun (PMIx), MPICH stops in MPI_Init."""
    mpirun = need_tool("mpirun", why="Debian's Open MPI launcher (make host)")
    proc = _run(
        [mpirun, "--oversubscribe", "-x", "LD_LIBRARY_PATH", "-np", "2", str(abi_binary)],
        {"LD_LIBRARY_PATH": f"{MPICH5}/lib", **OMPI_ROOT},
    )
    assert proc.returncode != 0 and not _ranks(proc.stdout)
    assert "unsupported PMI version PMIx" in proc.stdout + proc.stderr


def _mpich5_site():  # type: ignore[no-untyped-def]
    """The local-bind rehearsal site with MPICH 5.0.2 as its MPI (a provider of the ABI)."""
    from hpcenv.site import load_site

    site = load_site("local-bind")
    mpi = site.mpi.model_copy(update={"spec": "mpich@5.0.2", "root": str(MPICH5)})
    return site.model_copy(update={"mpi": mpi})


def _preflight_args(spec: str, root: Path) -> list[str]:
    """The preflight's arguments for an ABI image (bindmodel.standard_abi), with the site MPI
    ``spec`` at ``root`` in the place of the one the rule knows."""
    inj = site_mpi(_mpich5_site())
    abi = standard_abi(inj) if inj else None
    assert abi is not None
    args = preflight_args(abi)
    args[1:4] = [str(root), f"{root}/lib", spec]
    return args


def _preflight(tmp_path: Path, spec: str, root: Path) -> subprocess.CompletedProcess[str]:
    from hpcenv.jobs.render import step_script

    script = tmp_path / "bind-preflight.sh"
    script.write_text(step_script("bind_preflight") + "\n")
    return _run(["sh", str(script), *_preflight_args(spec, root)])


def test_preflight_prints_the_abi_version_or_names_both_libraries(tmp_path: Path) -> None:
    need_file(
        MPICH5 / "lib" / soname(), "MPICH 5.0.2's libmpi_abi", "the preflight reads it", SETUP
    )
    ok = _preflight(tmp_path, "mpich@5.0.2", MPICH5)
    assert (
        f"hpcenv: MPI-5 standard ABI: site MPI mpich@5.0.2 provides {MPICH5}/lib/{soname()} "
        "(ABI version 1.0)"
    ) in ok.stdout, ok.stdout + ok.stderr
    # This host is no ABI image (its loader cache has Open MPI 4's libmpi.so.40, no libmpi_abi):
    # the usual check that follows names both libraries.
    assert ok.returncode == ABI_MISMATCH_EXIT, ok.stdout + ok.stderr
    assert "(libmpi.so.40, openmpi ABI)" in ok.stderr and "bind model ABI mismatch" in ok.stderr
    # A site MPI without the ABI (Debian's Open MPI 4.1.4): the preflight names both libraries.
    lib = Path("/usr/lib/x86_64-linux-gnu")
    need_file(lib / "libmpi.so.40", "Debian's Open MPI 4.1.4", "the preflight looks at it", SETUP)
    bad = _preflight(tmp_path, "openmpi@4.1.4", lib.parent)
    bad_args = _preflight_args("openmpi@4.1.4", lib.parent)
    assert bad_args[2] == f"{lib.parent}/lib"
    bad = _run(["sh", str(tmp_path / "bind-preflight.sh"), *bad_args[:2], str(lib), *bad_args[3:]])
    assert bad.returncode == ABI_MISMATCH_EXIT, bad.stdout + bad.stderr
    assert (
        f"the image's MPI programs need {soname()} (MPI-5 standard ABI) but site MPI "
        f"openmpi@4.1.4 provides {lib}/libmpi.so.40 (libmpi.so.40, openmpi ABI)"
    ) in bad.stderr


def test_preflight_in_an_abi_image_replaces_its_library_with_the_sites(
    tmp_path: Path, ompi6_image: str
) -> None:
    """In the Open MPI 6 image (whose loader cache has libmpi_abi.so.1), MPICH 5 bound in the
    way a bind-model job binds it: the site's ABI library replaces the image's."""
    from hpcenv.engines import engine_env
    from hpcenv.jobs.render import step_script

    need_file(MPICH5 / "lib" / soname(), "MPICH 5.0.2's libmpi_abi", "it is bound in", SETUP)
    site = MPICH5.parent
    args = _preflight_args("mpich@5.0.2", MPICH5)
    script = tmp_path / "bind-preflight.sh"
    script.write_text(step_script("bind_preflight") + "\n")
    proc = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "-v",
            f"{site}:{site}:ro",
            "-v",
            f"{tmp_path}:/steps:ro",
            "--env",
            f"LD_LIBRARY_PATH={MPICH5}/lib",
            ompi6_image,
            "sh",
            "/steps/bind-preflight.sh",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=engine_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"site MPI mpich@5.0.2 provides {MPICH5}/lib/{soname()}" in proc.stdout
    assert f"replaces the image's /usr/lib/x86_64-linux-gnu/{soname()}" in proc.stdout
