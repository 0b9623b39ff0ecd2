"""The bind model, rendered: the site MPI is injected by the same code for every bind-model site
(the ``local-bind`` rehearsal with podman, Frontier with Apptainer, Perlmutter with podman-hpc),
the control switch removes it, the ABI preflight names both libraries, and the resolver refuses an
image MPI of the other ABI family before anything is built. The real runs are in
tests/test_rehearsal_bind.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.jobs.bindmodel import ABI_MISMATCH_EXIT, SiteMpi, preflight_args, site_mpi
from hpcenv.jobs.render import render_job, step_script
from hpcenv.jobs.shell import join
from hpcenv.jobs.spec import JobSpec
from hpcenv.site import load_site

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
IMAGE = "localhost/hpcenv/horovod-cpu:local"


def _job(**kw: object) -> JobSpec:
    return JobSpec(name="swap", command=["python3", "x.py"], ranks_per_node=2, **kw)  # type: ignore[arg-type]


def test_local_bind_injects_site_mpi_into_podman_ranks() -> None:
    script = render_job(load_site("local-bind"), _job(), IMAGE)
    launch = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    assert "--mpi=pmix" in launch
    assert "--volume=/opt/site/intel-mpi:/opt/site/intel-mpi" in launch
    assert "--volume=/usr/lib/x86_64-linux-gnu/libpmix.so.2:" in launch
    assert "--env=LD_LIBRARY_PATH=/opt/site/intel-mpi/lib" in launch
    assert "export I_MPI_PMI=pmix" in script and "--env=I_MPI_PMI " in launch
    assert "hpcenv: bind model ABI mismatch" in script  # the preflight runs before the ranks
    assert script.index("bind model ABI mismatch") < script.index("\nsrun ")


def test_local_bind_sif_injects_the_same_site_mpi_into_sif_ranks() -> None:
    """The SIF variant: the site's own apptainer command, --bind of the same paths, the loader
    path and the site's library list in Apptainer's words (as Frontier's scripts)."""
    site = load_site("local-bind-sif")
    inj = site_mpi(site)
    assert inj is not None and inj == site_mpi(load_site("local-bind"))
    script = render_job(site, _job(), "/scratch/x.sif")
    launch = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    rank_step = 'sh "$HPCENV_STEPS/rank-env.sh"'
    assert f"--mpi=pmix {rank_step} /opt/site/apptainer/bin/apptainer exec " in launch
    for path in inj.mounts:
        assert f"--bind {path} " in launch
    assert "/scratch/x.sif python3 x.py" in launch
    assert "export APPTAINERENV_LD_LIBRARY_PATH=/opt/site/intel-mpi/lib" in script
    assert f"export APPTAINER_CONTAINLIBS={','.join(inj.libs)}" in script
    assert "/usr/lib/x86_64-linux-gnu/libmunge.so.2" in inj.libs
    preflight = script.index("/opt/site/apptainer/bin/apptainer exec")
    assert preflight < script.index("\nsrun ") and "bind model ABI mismatch" in script
    control = render_job(site, _job(site_mpi=False), "/scratch/x.sif")
    assert (
        "--bind /opt/site/intel-mpi" not in control
        and "APPTAINERENV_LD_LIBRARY_PATH" not in control
    )


def test_the_local_bind_image_loads_its_mpich_under_the_abi_name() -> None:
    """Debian's MPICH is libmpich.so.12; the site replaces libmpi.so.12, so the image for the
    site adds that name and relinks Horovod to it (rule debian-mpich-soname), and the preflight
    finds it through HPCENV_MPICH_ABI_LIB. Hybrid and source-MPICH images are left alone."""
    from hpcenv.recipe import load_recipe
    from hpcenv.render import render
    from hpcenv.resolver import resolve

    site = load_site("local-bind")
    lock = resolve(site, load_recipe("horovod-cpu"))
    mpi = lock.components["mpi"]
    assert (mpi.implementation, mpi.source, mpi.version) == ("mpich", "apt", "4.0.2")
    assert mpi.options["abi_soname"] == "libmpi.so.12 -> libmpich.so.12"
    assert "debian-mpich-soname" in mpi.rules and "debian-mpich-soname" in lock.rules
    rendered = render(lock, site)
    docker = rendered.dockerfile
    relink = (
        "RUN sh /opt/hpcenv-steps/relink-mpich-abi.sh libmpich.so.12 libmpi.so.12 /opt/venv "
        "libmpichcxx.so.12"
    )
    assert relink in docker
    assert "COPY hpcenv-steps/relink-mpich-abi.sh /opt/hpcenv-steps/relink-mpich-abi.sh" in docker
    assert set(rendered.context) == {"hpcenv-steps/relink-mpich-abi.sh"}
    assert 'ENV HPCENV_MPICH_ABI_LIB="/usr/lib/x86_64-linux-gnu"' in docker
    assert docker.index(relink) > docker.index("horovodrun --check-build")
    for other in ("local", "frontier", "perlmutter"):
        lock = resolve(load_site(other), load_recipe("horovod-cpu"))
        assert "abi_soname" not in lock.components["mpi"].options, other


def test_aurora_image_loads_ubuntu_mpich_under_the_abi_name() -> None:
    """Aurora's image carries Ubuntu 22.04's apt MPICH (libmpich12 4.0-3: libmpich.so.12, no
    libmpi.so.12 per packages.ubuntu.com's file list); Aurora's MPICH replaces libmpi.so.12 at
    run time, so the image must add that name as on local-bind, or the preflight stops the job."""
    from hpcenv.recipe import load_recipe
    from hpcenv.render import render
    from hpcenv.resolver import resolve

    site = load_site("aurora")
    for recipe in ("horovod-cpu", "daal4py"):
        lock = resolve(site, load_recipe(recipe))
        mpi = lock.components["mpi"]
        assert (mpi.implementation, mpi.source) == ("mpich", "apt"), recipe
        assert mpi.options["abi_soname"] == "libmpi.so.12 -> libmpich.so.12", recipe
        docker = render(lock, site).dockerfile
        assert "ln -s libmpich.so.12 /usr/lib/x86_64-linux-gnu/libmpi.so.12" in docker, recipe


def test_control_run_has_no_injection() -> None:
    script = render_job(load_site("local-bind"), _job(site_mpi=False), IMAGE)
    assert "/opt/site/intel-mpi:/opt/site/intel-mpi" not in script
    assert "LD_LIBRARY_PATH" not in script
    assert "ABI mismatch" not in script


def test_frontier_gets_the_same_injection_through_apptainer() -> None:
    site = load_site("frontier")
    inj = site_mpi(site)
    assert inj is not None and inj.soname == "libmpi.so.12" and inj.abi == "mpich"
    script = render_job(site, _job(), "/lustre/orion/x.sif")
    # OLCF's wiring names $CRAY_LD_LIBRARY_PATH (set by cray-mpich-abi): double-quoted.
    assert f'export APPTAINERENV_LD_LIBRARY_PATH="{inj.ld_library_path}"' in script
    for path in inj.mounts:
        assert f"--bind {path}" in script
    assert "apptainer exec" in script and "bind model ABI mismatch" in script


def test_hybrid_sites_inject_nothing() -> None:
    assert site_mpi(load_site("local")) is None
    assert "ABI mismatch" not in render_job(load_site("local"), _job(), IMAGE)


def _fake_image(tmp_path: Path, *sonames: str) -> dict[str, str]:
    lib = tmp_path / "image-lib"
    lib.mkdir()
    for name in sonames:
        (lib / name).write_bytes(b"")
    bin_dir = tmp_path / "bin"  # an ldconfig that knows nothing: the image is just `lib`
    bin_dir.mkdir()
    (bin_dir / "ldconfig").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "ldconfig").chmod(0o755)
    return {"HPCENV_MPICH_ABI_LIB": str(lib), "PATH": f"{bin_dir}:/usr/bin:/bin"}


def _preflight(inj: SiteMpi, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The shipped preflight step, run as the job runs it (its arguments expanded by a shell),
    with the site MPI root moved to ``root``."""
    step = root.parent / "bind-preflight.sh"
    step.write_text(step_script("bind_preflight") + "\n")
    line = f"sh {step} " + join(preflight_args(inj)).replace(inj.root, str(root))
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, env=env)


def test_preflight_accepts_a_same_abi_image(tmp_path: Path, site_root: Path) -> None:
    inj = site_mpi(load_site("local-bind"))
    assert inj is not None
    proc = _preflight(inj, site_root, _fake_image(tmp_path, "libmpi.so.12"))
    assert proc.returncode == 0, proc.stderr
    assert "replaces the image's" in proc.stdout and "libmpi.so.12" in proc.stdout


def test_preflight_names_both_libraries_on_abi_mismatch(tmp_path: Path, site_root: Path) -> None:
    inj = site_mpi(load_site("local-bind"))
    assert inj is not None
    proc = _preflight(inj, site_root, _fake_image(tmp_path, "libmpi.so.40"))
    assert proc.returncode == ABI_MISMATCH_EXIT
    msg = proc.stderr
    assert "ABI mismatch" in msg and "intel-mpi@2021.18.1" in msg
    assert f"{site_root}/lib/libmpi.so.12 (libmpi.so.12, mpich ABI)" in msg
    assert "libmpi.so.40 (libmpi.so.40, openmpi ABI)" in msg


def test_preflight_site_build_image_has_no_mpi_of_its_own(tmp_path: Path, site_root: Path) -> None:
    """site-build: the image was compiled against the site MPI at this very path and has none
    to replace; the step checks only that the site library is visible."""
    site = load_site("local-bind")
    built = site.model_copy(update={"mpi": site.mpi.model_copy(update={"model": "site-build"})})
    inj = site_mpi(built)
    assert inj is not None and inj.model == "site-build"
    proc = _preflight(inj, site_root, _fake_image(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"hpcenv: site-build model: site MPI intel-mpi@2021.18.1 {site_root}/lib/libmpi.so.12 "
        "(mpich ABI) is the one the image's MPI programs were built against\n"
    )
    (site_root / "lib" / "libmpi.so.12").unlink()  # the bind mount missing
    (tmp_path / "again").mkdir()
    proc = _preflight(inj, site_root, _fake_image(tmp_path / "again"))
    assert proc.returncode == 1 and "is not visible in the container" in proc.stderr


@pytest.fixture
def site_root(tmp_path: Path) -> Path:
    root = tmp_path / "site-mpi"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libmpi.so.12").write_bytes(b"")
    return root


@pytest.mark.parametrize("command", ["resolve", "build"])
def test_resolver_refuses_open_mpi_image_under_mpich_abi_site(command: str) -> None:
    argv = [
        HPCENV,
        command,
        "--site",
        "local-bind",
        "--recipe",
        "horovod-cpu",
        "--set",
        "mpi=openmpi",
    ]
    if command == "build":
        argv.append("--dry-run")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "mpi openmpi" in err and "intel-mpi@2021.18.1" in err and "rule mpi-bind-abi" in err


def test_submit_check_reads_the_image_lock() -> None:
    import json

    from hpcenv.jobs.bindmodel import image_mismatch

    site = load_site("local-bind")
    local_lock = json.loads(Path("tests/golden/local__horovod-cpu/stack.lock.json").read_text())
    # Open MPI image with Debian MPICH as daal4py's side runtime: the site MPI replaces that one.
    assert image_mismatch(site, IMAGE, local_lock) is None
    openmpi_only = {
        "components": {
            "mpi": {"implementation": "openmpi", "version": "4.1.4", "options": {"abi": "openmpi"}}
        }
    }
    why = image_mismatch(site, "img", openmpi_only)
    assert why is not None
    assert "openmpi@4.1.4 (openmpi ABI)" in why and "intel-mpi@2021.18.1 (libmpi.so.12" in why
    assert image_mismatch(load_site("local"), "img", openmpi_only) is None  # hybrid: no check


def test_preflight_finds_frontier_libmpi_through_cray_ld_library_path(tmp_path: Path) -> None:
    """Frontier's loader path starts with the GTL folder; cray-mpich-abi's libmpi.so.12 is in
    lib-abi-mpich, reached through $CRAY_LD_LIBRARY_PATH (set by the module, seen in the
    container). The preflight must search the whole path, not take its first entry."""
    inj = site_mpi(load_site("frontier"))
    assert inj is not None
    root = tmp_path / "cray"
    abi = root / "ofi" / "crayclang" / "17.0" / "lib-abi-mpich"
    (root / "gtl" / "lib").mkdir(parents=True)
    abi.mkdir(parents=True)
    (abi / "libmpi.so.12").write_bytes(b"")
    env = _fake_image(tmp_path, "libmpi.so.12")
    env |= {"CRAY_MPICH_ROOTDIR": str(root), "CRAY_LD_LIBRARY_PATH": f"{tmp_path}/none:{abi}"}
    proc = _preflight(inj, root, env)
    assert proc.returncode == 0, proc.stderr
    assert f"{abi}/libmpi.so.12 (mpich ABI) replaces the image's" in proc.stdout
    env["CRAY_LD_LIBRARY_PATH"] = f"{tmp_path}/none"  # module not loaded / bind missing
    proc = _preflight(inj, root, env)
    assert proc.returncode == 1 and "libmpi.so.12 (cray-mpich@" in proc.stderr
