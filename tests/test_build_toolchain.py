"""The build stage carries the toolchain only where a step compiles (Blocks.compiles).

A CPU stack of apt packages and binary wheels (daal4py on local) installs only what its venv and
pip need, and its pip step takes wheels only; every stack that compiles something (Horovod, an
MPI from source or the host's, mpi4py against the MPI-5 ABI) and every GPU stack keeps the whole
toolchain, byte for byte as before (so their first layers stay shared)."""

from __future__ import annotations

import pytest

from hpcenv.bench import hpccm_daal4py
from hpcenv.blocks import Blocks
from hpcenv.knowledge import kb
from hpcenv.recipe import load_recipe
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.site import load_site

APT = kb()["install"]["apt"]


def _blocks(site_name: str, recipe: str) -> Blocks:
    site = load_site(site_name)
    return Blocks(resolve(site, load_recipe(recipe)), site)


@pytest.mark.parametrize(
    ("site", "recipe"),
    [("local", "daal4py"), ("local", "mpi4py-abi"), ("generic-slurm", "daal4py")],
)
def test_a_stack_of_wheels_and_apt_packages_builds_without_the_toolchain(
    site: str, recipe: str
) -> None:
    blocks = _blocks(site, recipe)
    assert not blocks.compiles()
    assert blocks.build_tool_packages() == list(APT["wheels_only"])
    dockerfile = render(blocks.lock, blocks.site).dockerfile
    build_stage = dockerfile.split(" AS runtime", 1)[0]
    for tool in ("build-essential", "cmake", "ccache", "python3-dev"):
        assert tool not in build_stage, tool
    assert "pip install --no-cache-dir --only-binary=:all: mpi4py==" in build_stage


@pytest.mark.parametrize(
    ("site", "recipe", "why"),
    [
        ("local", "horovod-cpu", "Horovod compiles"),
        ("local-bind", "mpi4py-abi", "mpi4py compiled against mpi_abi.h"),
        ("summit", "mpi4py-abi", "mpi4py compiled against the host MPI"),
        ("frontier", "daal4py", "an MPI from source"),
        ("aurora", "torch-gpu", "a GPU stack"),
    ],
)
def test_a_stack_that_compiles_keeps_the_whole_toolchain(site: str, recipe: str, why: str) -> None:
    blocks = _blocks(site, recipe)
    assert blocks.compiles(), why
    manager = kb()["os"][blocks.site.os].get("package_manager", "apt")
    assert blocks.build_tool_packages() == list(kb()["install"][manager]["build_tools"])
    assert "--only-binary" not in render(blocks.lock, blocks.site).dockerfile


def test_the_hpccm_comparison_installs_what_hpcenvs_build_stage_installs() -> None:
    """The bench's hpccm recipe takes the same first packages hpcenv's build stage takes
    (hpcenv.bench.buildcost passes them); its default is the wheels-only list."""
    blocks = _blocks("local", "daal4py")
    text = hpccm_daal4py.recipe(tools=blocks.build_tool_packages())
    first_run = text.split("RUN ", 2)[1]
    installed = first_run.split("--no-install-recommends", 1)[1].split("&&")[0]
    assert installed.replace("\\", " ").split() == sorted(APT["wheels_only"])
    assert sorted(APT["wheels_only"]) == hpccm_daal4py.APT_TOOLS
