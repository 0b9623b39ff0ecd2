"""The daal4py stack written as an hpccm recipe, for the build-cost comparison.

This is what a user of NVIDIA's HPC Container Maker would write for the same stack hpcenv's
``daal4py`` recipe resolves on the ``local`` site: the same bootstrapped Debian base, the same apt
packages (Open MPI primary, Debian MPICH as the MPICH-ABI side runtime linked as
``libmpi.so.12``), a venv at ``/opt/venv`` and the same pinned pip packages, then the lock and the
checks. hpccm's own ``openmpi``/``mpich`` building blocks compile from source (tens of minutes on
2 cores), so MPI comes from apt through the ``packages`` block, as the distribution ships it.
It is idiomatic single-stage hpccm: ``packages``/``pip`` have no ``runtime()`` worth copying.
MPI comes as its development packages, as hpccm's own MPI blocks install a development MPI
(compiler wrappers, headers) for the applications a recipe builds next; hpcenv's stack compiles
nothing, so it installs only the MPI's runtime packages (``Blocks.compiles``), and that is part
of what the comparison measures.

Build-time trust (CA bundle, pip.conf) is bind-mounted at build time at ``/opt/hpcenv-build``
(``podman build -v CONTEXT/hpcenv-build:/opt/hpcenv-build:ro``), never copied into the image.

Run ``python -m hpcenv.bench.hpccm_daal4py`` to print the Dockerfile.
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcenv.knowledge import kb, mpi_soname
from hpcenv.naming import base_tag

# apt packages of hpcenv's daal4py build stage (what its venv and pip need: the stack compiles
# nothing, hpcenv.blocks.Blocks.compiles), then the primary MPI and the MPICH side runtime as
# development packages (see the module's text). The bench passes the list hpcenv's build stage
# installs for the lock it measures.
APT_TOOLS = sorted(kb()["install"]["apt"]["wheels_only"])
APT_MPI = ["libopenmpi-dev", "openmpi-bin", "libmpich-dev", "mpich"]
BASE_IMAGE = base_tag(suite="bookworm")  # the bootstrapped base of the local site
DEFAULT_PIP = ["mpi4py==4.1.2", "scikit-learn-intelex==2026.2.0", "scikit-learn"]


def recipe(
    base_image: str = BASE_IMAGE,
    pip_packages: Sequence[str] = DEFAULT_PIP,
    fmt: str = "docker",
    tools: Sequence[str] = APT_TOOLS,
) -> str:
    """The recipe rendered by hpccm as a Dockerfile (``fmt="docker"``) or Singularity def."""
    import hpccm
    from hpccm.building_blocks import packages, pip
    from hpccm.primitives import baseimage, comment, copy, environment, label, shell, user, workdir

    hpccm.config.set_container_format(fmt)
    stage = hpccm.Stage()
    # Debian 12 is apt-based like Ubuntu; hpccm knows no "debian" distro, ubuntu22 selects apt.
    stage += baseimage(image=base_image, _distro="ubuntu22")
    stage += comment("hpccm recipe: hpcenv/bench/hpccm_daal4py.py (build-cost comparison)")
    stage += environment(
        variables={
            "PIP_CONFIG_FILE": "/opt/hpcenv-build/pip.conf",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    stage += packages(ospackages=list(tools))
    stage += packages(ospackages=APT_MPI)
    stage += shell(
        commands=[
            "mkdir -p /opt/mpich-abi/lib",
            "ln -sf \"$(find /usr/lib -name 'libmpich.so.12' | head -n 1)\" "
            f"/opt/mpich-abi/lib/{mpi_soname('mpich')}",
        ]
    )
    stage += shell(
        commands=[
            "python3 -m venv /opt/venv",
            "/opt/venv/bin/pip install --no-cache-dir --upgrade pip setuptools wheel",
        ]
    )
    stage += environment(
        variables={
            "PATH": "/opt/venv/bin:$PATH",
            "HPCENV_MPICH_ABI_LIB": "/opt/mpich-abi/lib",
            "OMPI_MCA_plm_rsh_agent": "",
        }
    )
    stage += pip(packages=list(pip_packages), pip="/opt/venv/bin/pip", ospackages=[])
    stage += copy(src="stack.lock.json", dest="/opt/hpcenv/stack.lock.json")
    stage += copy(src="checks", dest="/opt/hpcenv/checks")
    stage += shell(
        commands=[
            "useradd --create-home --uid 1000 --shell /bin/bash hpc",
            "/opt/venv/bin/python -c 'import mpi4py; import daal4py'",
        ]
    )
    stage += label(metadata={"io.hpcenv.bench": "hpccm-daal4py"})
    stage += user(user="hpc")
    stage += workdir(directory="/home/hpc")
    return str(stage) + "\n"


if __name__ == "__main__":
    print(recipe(), end="")
