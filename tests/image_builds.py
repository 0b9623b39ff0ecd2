"""The images the real tests build beyond `make images`' local one, in one place.

Each entry is the ``hpcenv build`` argument list a test fixture runs (the fixtures take it from
here). `make test` runs this file first, in the background, while the unit tests run: the cold
builds spend much of their time off the CPU (downloads, layer commits) or on one core (dpkg
under qemu, mksquashfs' tail), and the unit tests fill the rest. The builds run one at a time
(they share podman's storage). When the real tests start, their fixtures run the same builds and
find them cached; a build that failed here is simply built again there, and its test says why.

The real tests that build no podman image, need none of these images and time nothing are
marked ``alongside``: `make test` runs them once the unit tests are done, while these builds go
on (the Apptainer helper their SIF runs use is made current first, here). A test that builds
(a user recipe, a small test image, a base import) stays in the quiet pass: beside these its
build waits for the engine's storage lock (``Engine.storage_lock``) behind one of them, and in
a fresh run (2026-11-27) two such tests waited 173 s and 149 s that way.

Usage: python tests/image_builds.py HPCENV   (exit 1 when a build failed; each build's time and
outcome on one line)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# name -> the arguments after ``hpcenv build``; the order is the order they are built in.
BUILDS: dict[str, tuple[str, ...]] = {
    # test_aarch64_podman.py: the arm64 base and image under qemu (mostly one core)
    "arm64": ("--site", "local-arm64", "--recipe", "mpi4py-os"),
    # test_horovod_ccl_podman.py: Horovod compiled on oneCCL
    "horovod-ccl": ("--site", "local", "--recipe", "horovod-ccl", "--format", "oci"),
    # test_rehearsal_bind.py: Horovod on Debian's MPICH for the bind model, then its SIF
    "bind": ("--recipe", "horovod-cpu", "--site", "local-bind", "--format", "oci"),
    "bind-sif": ("--recipe", "horovod-cpu", "--site", "local-bind-sif"),
    # test_mpi_abi_horovod.py: Horovod compiled against the MPI-5 ABI (local-bind's torch layer,
    # the compiler cache of the bind build), then its SIF
    "hvd-abi": ("--recipe", "horovod-abi", "--site", "local-bind", "--format", "oci"),
    "hvd-abi-sif": ("--recipe", "horovod-abi", "--site", "local-bind-sif"),
    # test_rehearsal_podman_hpc.py: local-bind's layers built by podman-hpc, then migrated
    "podman-hpc": ("--recipe", "horovod-cpu", "--site", "local-podman-hpc"),
    # test_rehearsal_sitebuild.py: mpi4py compiled against the mounted site MPI, then its SIF
    "sitebuild": ("--recipe", "daal4py", "--site", "local-sitebuild", "--format", "oci"),
    "sitebuild-sif": ("--recipe", "daal4py", "--site", "local-sitebuild-sif"),
    # test_mpi_abi_trixie.py: the MPI-5 ABI image on the Debian 13 base (debootstrap, mpi4py
    # compiled), then its SIF
    "abi-trixie": ("--site", "local-bind-trixie", "--recipe", "mpi4py-abi", "--format", "oci"),
    "abi-trixie-sif": ("--site", "local-bind-trixie-sif", "--recipe", "mpi4py-abi"),
}


HPCENV = str(Path(sys.executable).with_name("hpcenv"))  # the installed command of this venv
# Taken when the tests are collected, before any fixture points HPCENV_CACHE at a private cache:
# these builds use the real cache (layers, SIF stamp), as the background pass did.
REAL_ENV = dict(os.environ)


def build(name: str, hpcenv: str = HPCENV) -> subprocess.CompletedProcess[str]:
    """``hpcenv build`` with the arguments of ``BUILDS[name]``, its output captured (merged)."""
    return subprocess.run(
        [hpcenv, "build", *BUILDS[name]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=REAL_ENV,
        timeout=3000,
    )


def built(name: str) -> None:
    """For a fixture: the build done (or found cached), else a failure with its output's tail."""
    proc = build(name)
    assert proc.returncode == 0, f"hpcenv build {' '.join(BUILDS[name])}: {proc.stdout[-4000:]}"


OMPI6_IMAGE = "localhost/hpcenv-test/ompi6-abi:1"


def build_ompi6_image(log_dir: Path) -> str:
    """Open MPI 6.0.0~rc2 from Debian sid over the local base (tests/data/ompi6-abi), built
    once (podman caches it; the build's log in ``log_dir``): test_mpi_abi.py runs an ABI binary
    in it, test_mpi_abi_image.py and test_mpi_abi_trixie.py copy its libraries out as a site
    prefix. Not an ``hpcenv build``: it is the site's MPI, not an image hpcenv makes."""
    from hpcenv.baseimage import default_mirror, ensure_base_image
    from hpcenv.engines import get_engine

    engine = get_engine("podman")
    if not engine.image_exists(OMPI6_IMAGE):
        ctx = Path(__file__).parent / "data" / "ompi6-abi"
        engine.build(
            ctx,
            ctx / "Containerfile",
            OMPI6_IMAGE,
            log_path=log_dir / "ompi6-abi-build.log",
            build_args={"BASE": ensure_base_image(), "APT_MIRROR": default_mirror("sid")},
        )
    return OMPI6_IMAGE


def helper_ready() -> str:
    """The Apptainer helper image, built first when its Containerfile changed: the alongside
    tests' ``site_apptainer`` fixture then finds it current (or waits on its lock) and builds
    nothing beside these builds. Empty when it is ready; else why not."""
    from hpcenv.apptainer import Apptainer

    try:
        Apptainer().ensure_helper()
    except Exception as err:  # its fixture builds it again and says why
        return f"{type(err).__name__}: {err}"
    return ""


def build_all(hpcenv: str) -> int:
    start = time.monotonic()
    why = helper_ready()
    print(f"image_builds: apptainer helper: {why or 'ok'} in {time.monotonic() - start:.0f} s")
    failed = 1 if why else 0
    for name, args in BUILDS.items():
        start = time.monotonic()
        proc = build(name, hpcenv)
        took = time.monotonic() - start
        verdict = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        print(f"image_builds: {name}: hpcenv build {' '.join(args)}: {verdict} in {took:.0f} s")
        if proc.returncode != 0:
            failed += 1
            print(proc.stdout[-3000:])
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/image_builds.py HPCENV")
    sys.exit(build_all(sys.argv[1]))
