"""Rendering: deterministic, matches the reviewed golden files, parses (spython) and lints
(hadolint), multi-stage with build-only credentials."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_hadolint

from hpcenv.golden import golden_files
from hpcenv.recipe import load_recipe
from hpcenv.render import render, write
from hpcenv.resolver import resolve
from hpcenv.site import load_site

GOLDEN = Path(__file__).parent / "golden"
FILES = golden_files()
DOCKERFILES = sorted(k for k in FILES if k.endswith("/Dockerfile"))
DEFS = sorted(k for k in FILES if k.endswith("/Singularity.def"))


def test_golden_files_match() -> None:
    on_disk = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file()}
    assert on_disk == set(FILES), "run `make golden` and review the diff"
    for rel, text in FILES.items():
        assert (GOLDEN / rel).read_text() == text, f"{rel} changed: run `make golden` and review"


def test_every_site_default_recipe_renders() -> None:
    from hpcenv.golden import BUILTIN_SITES

    for site in BUILTIN_SITES:
        for recipe in load_site(site).recipes:
            assert f"{site}__{recipe}/Dockerfile" in FILES, (site, recipe)


def test_deterministic() -> None:
    site = load_site("frontier")
    a = render(resolve(site, load_recipe("torch-gpu")), site)
    b = render(resolve(load_site("frontier"), load_recipe("torch-gpu")), load_site("frontier"))
    assert a == b


def stages(rel: str) -> list[str]:
    """The stages a golden file must have: one for a recipe of the OS's own packages
    (``python_from: os``: nothing is built) and for a stack that compiles nothing (apt
    packages and binary wheels: Blocks.one_stage), else build and runtime."""
    from hpcenv.blocks import Blocks

    site_name, recipe = rel.split("/", 1)[0].split("__", 1)
    if recipe == "mpi4py-os":
        return ["runtime"]
    site = load_site(site_name)
    one = Blocks(resolve(site, load_recipe(recipe)), site).one_stage()
    return ["runtime"] if one else ["build", "runtime"]


def test_stacks_of_wheels_build_in_one_stage() -> None:
    """The recipes that compile nothing on the built-in sites: one stage each."""
    one = {k.split("/", 1)[0] for k in DOCKERFILES if stages(k) == ["runtime"]}
    assert {"local__daal4py", "local__mpi4py-abi", "generic-slurm__daal4py"} <= one
    assert "local__horovod-cpu" not in one and "local__mpi4py-os" in one


@pytest.mark.parametrize("rel", DEFS)
def test_spython_parses_definition(rel: str, tmp_path: Path) -> None:
    from spython.main.parse.parsers import SingularityParser

    text = FILES[rel]
    # spython 0.3 accepts only "Bootstrap: docker"; defs of sites that bootstrap their base
    # locally use oci-archive. Parse the same body with the header spython knows.
    text = re.sub(
        r"^Bootstrap: oci-archive\nFrom: \S+",
        "Bootstrap: docker\nFrom: debian:bookworm",
        text,
        flags=re.M,
    )
    path = tmp_path / "Singularity.def"
    path.write_text(text)
    recipe = SingularityParser(str(path)).recipe
    assert list(recipe) == stages(rel)
    runtime = recipe["runtime"]
    assert any("io.hpcenv.lock" in label for label in runtime.labels)
    assert runtime.install, "runtime %post is empty"


@pytest.mark.parametrize("rel", DOCKERFILES)
def test_hadolint_no_errors(rel: str, tmp_path: Path) -> None:
    hadolint = need_hadolint("every rendered Dockerfile is linted")
    path = tmp_path / "Dockerfile"
    path.write_text(FILES[rel])
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "error", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("rel", DEFS)
def test_definition_structure(rel: str) -> None:
    text = FILES[rel]
    assert re.findall(r"^Stage: (\S+)", text, flags=re.M) == stages(rel)
    assert ("%files from build" in text) == ("build" in stages(rel))
    for section in re.findall(r"^%files[^\n]*\n((?:    .*\n)+)", text, flags=re.M):
        for line in section.splitlines():
            dest = line.split()[-1]
            assert not dest.startswith(("/tmp", "/var/tmp")), f"%files into {dest} (lost on >= 3.6)"
    runtime = text.split("Stage: runtime", 1)[1]
    assert "%environment" in runtime and "%runscript" in runtime and "%test" in runtime
    assert "export PATH=" in runtime.split("%post", 1)[1], "environment must be exported in %post"
    if "build" in stages(rel):
        assert "hpcenv-build" not in runtime, "build-time credentials reach the runtime stage"
    elif "hpcenv-build" in runtime:  # one stage: build inputs come by %files, go after %post
        post = runtime.split("%post", 1)[1].split("\n%", 1)[0].rstrip().splitlines()
        assert post[-1].startswith("    rm -rf /opt/hpcenv-build"), post[-1]
        assert "    hpcenv-build /opt/hpcenv-build" in runtime.split("%post", 1)[0]


@pytest.mark.parametrize("rel", DOCKERFILES)
def test_dockerfile_runtime_is_clean(rel: str) -> None:
    text = FILES[rel]
    build, runtime = text.split(" AS runtime", 1)
    assert re.findall(r"^FROM \S+ AS (\S+)", text, flags=re.M) == stages(rel)
    if "build" in stages(rel):
        assert "COPY hpcenv-build /opt/hpcenv-build" in build
        assert "hpcenv-build" not in runtime and "PIP_CONFIG_FILE" not in runtime
    else:  # one stage: the build inputs only ever mounted for a step, pip's settings per step
        assert "COPY hpcenv-build " not in runtime and "\nENV PIP_CONFIG_FILE" not in runtime
        for line in runtime.splitlines():
            if "hpcenv-build" in line and not line.startswith("COPY hpcenv-build.sha256 "):
                assert line.startswith("RUN --mount=type=bind,source=hpcenv-build,"), line
    assert "USER hpc" in runtime
    assert "io.hpcenv.lock=" in runtime and "/opt/hpcenv/stack.lock.json" in runtime


def test_summit_image_is_built_as_olcf_documents() -> None:
    """containers_on_summit.rst (olcf/olcf-user-docs d900d52^): FROM OLCF's MPI base image,
    rootless dnf under fakeroot, libevent for jsrun, no MPI of the image's own: mpi4py and
    Horovod compiled against the host's Spectrum MPI at $MPI_ROOT (a build argument); torch
    from Open-CE's conda channel (no ppc64le wheels)."""
    text = FILES["summit__horovod-gpu/Dockerfile"]
    lock = json.loads(FILES["summit__horovod-gpu/stack.lock.json"])
    base = "code.ornl.gov:4567/olcfcontainers/olcfbaseimages/mpiimage-centos-cuda:latest"
    assert f"FROM {base} AS build" in text and f"FROM {base} AS runtime" in text
    assert "(linux/ppc64le)" in text and lock["arch"] == "ppc64le"
    build, runtime = text.split(" AS runtime", 1)
    assert "apt-get" not in text and "RUN fakeroot dnf install -y" in build
    assert "libevent" in runtime.split("\n", 5)[4]  # the runtime stage's one dnf transaction
    assert build.count("ARG MPI_ROOT") == 1 and runtime.count("ARG MPI_ROOT") == 1
    assert 'test -x "$MPI_ROOT/bin/mpicc"' in build
    assert 'MPICC="$MPI_ROOT/bin/mpicc" CFLAGS="$(/opt/venv/bin/python3 -c ' in build
    assert ' -g0" /opt/venv/bin/pip install' in build
    assert "--no-binary mpi4py mpi4py==4.1.2" in build
    assert (
        'PATH="$MPI_ROOT/bin:$PATH" HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_HOME=/opt/venv'
        in build
    )
    assert "open-mpi.org" not in text and "mpich.org" not in text  # no MPI of its own
    assert "libnccl2" not in text  # NCCL comes with Open-CE's torch
    assert "https://ftp.osuosl.org/pub/open-ce/1.10.0/" in build
    assert "'pytorch=2.0.1=cuda11.8*'" in build and "python=3.9" in build
    assert lock["mpi_model"] == "site-build"
    assert lock["components"]["mpi"]["source"] == "host (mounted at build time)"
    assert "mpi-site-build" in lock["rules"]


def test_summit_definition_takes_the_mpi_prefix_as_apptainer_build_argument() -> None:
    """In Singularity.def the prefix is Apptainer's {{ MPI_ROOT }} (--build-arg): %post and
    %environment do not see the builder's environment, and quoted $MPI_ROOT stays literal."""
    text = FILES["summit__horovod-gpu/Singularity.def"]
    assert "$MPI_ROOT" not in text
    assert 'test -x "{{ MPI_ROOT }}/bin/mpicc"' in text
    assert "export LD_LIBRARY_PATH='{{ MPI_ROOT }}/lib'" in text
    assert "# build argument MPI_ROOT: apptainer build --build-arg MPI_ROOT=VALUE" in text


def test_other_summit_recipes_conflict_for_their_own_reasons() -> None:
    """site-build lifts only the MPI refusal: daal4py needs an MPICH-ABI MPI, oneCCL x86_64."""
    assert "rule image-mpi-host-only" not in "".join(
        t for k, t in FILES.items() if k.startswith("summit__")
    )
    assert "rule daal4py-mpich-abi" in FILES["summit__daal4py/conflict.txt"]
    assert "site-build model" in FILES["summit__daal4py/conflict.txt"]


def test_frontier_torch_gpu_follows_olcf() -> None:
    """OLCF: MPICH built from source ABI compatible with cray-mpich-abi (ch4:ofi), torch 2.10
    from the rocm7.1 index, the RCCL plugin from the host (no plugin, no Horovod in the image)."""
    text = FILES["frontier__torch-gpu/Dockerfile"]
    lock = json.loads(FILES["frontier__torch-gpu/stack.lock.json"])
    assert "FROM docker.io/rocm/dev-ubuntu-22.04:7.1.1 AS build" in text
    assert "https://www.mpich.org/static/downloads/4.1.3/mpich-4.1.3.tar.gz" in text
    assert "--with-device=ch4:ofi --enable-shared" in text
    assert "test -e /opt/mpi/lib/libmpi.so.12" in text
    assert "torch==2.10.0" in text and "https://download.pytorch.org/whl/rocm7.1" in text
    assert "horovod==" not in text and "/opt/aws-ofi-nccl" not in text
    assert lock["components"]["net-plugin"]["source"] == "host"
    assert lock["components"]["torch"]["options"]["dist_backend"] == "nccl"


def test_perlmutter_follows_nersc() -> None:
    """NERSC: MPICH from source (not apt) with shared libraries; a cuDNN 9 tag that exists."""
    text = FILES["perlmutter__torch-gpu/Dockerfile"]
    assert "FROM docker.io/nvidia/cuda:13.0.1-cudnn-devel-ubuntu22.04 AS build" in text
    assert "-cudnn8-" not in text
    assert "mpich-3.4.3.tar.gz" in text and "libmpich-dev" not in text
    assert "libnccl2=2.30.7-1+cuda13.0" in text and "torch==2.14.0" in text


def test_aurora_torch_gpu_is_upstream_xpu_with_level_zero() -> None:
    """ALCF: upstream torch XPU wheels (xccl), no IPEX/torch-ccl; Level Zero runtime inside."""
    text = FILES["aurora__torch-gpu/Dockerfile"]
    lock = json.loads(FILES["aurora__torch-gpu/stack.lock.json"])
    assert "torch==2.10.0" in text and "https://download.pytorch.org/whl/xpu" in text
    assert "intel_extension_for_pytorch" not in text and "oneccl_bind_pt" not in text
    build, runtime = text.split(" AS runtime", 1)
    for part in (build, runtime):
        assert "intel-level-zero-gpu intel-opencl-icd level-zero" in part
    assert lock["components"]["torch"]["options"]["dist_backend"] == "xccl"


def test_local_has_horovod_patch_and_side_mpich() -> None:
    text = FILES["local__horovod-cpu/Dockerfile"]
    assert "CMAKE_CXX_STANDARD 17" in text and "MAKEFLAGS=-j2" in text
    assert "/opt/mpich-abi/lib/libmpi.so.12" in text
    assert "FROM localhost/hpcenv-base:bookworm AS build" in text


def test_site_mirror_used_and_removed(tmp_path: Path) -> None:
    src = Path(__file__).parent.parent / "site-configs" / "generic-slurm.yaml"
    path = tmp_path / "mirrored.yaml"
    path.write_text(
        src.read_text()
        .replace("name: generic-slurm", "name: mirrored")
        .replace(
            "defaults:",
            "build:\n  apt_mirror: http://mirror.example/debian\n"
            "  pip_index_url: https://user:token@pypi.example/simple\ndefaults:",
        )
    )
    site = load_site(str(path))
    rendered = render(resolve(site, load_recipe("daal4py")), site)
    assert "http://mirror.example/debian" in rendered.dockerfile
    # one stage (daal4py compiles nothing): one apt step, the mirror removed in it
    assert rendered.dockerfile.count("apt-get -o Dir::Etc::SourceList") == 2  # update, install
    assert rendered.dockerfile.count("rm -rf /var/lib/apt/lists/* /opt/hpcenv-build-apt.list") == 1
    assert "token" not in rendered.dockerfile and "token" not in rendered.singularity
    assert "index-url = https://pypi.example/simple" in rendered.pip_conf  # no credentials


def test_write_context(tmp_path: Path, local_site) -> None:
    rendered = render(resolve(local_site, load_recipe("horovod-cpu")), local_site)
    names = {p.relative_to(tmp_path).as_posix() for p in write(rendered, tmp_path)}
    assert {
        "Dockerfile",
        "Singularity.def",
        "stack.lock.json",
        "hpcenv-build/pip.conf",
        "checks",
    } <= names
    assert (
        "find-links = /opt/hpcenv-build/wheels" in (tmp_path / "hpcenv-build/pip.conf").read_text()
    )


def test_network_plugin_built_into_the_image_where_the_site_says_so() -> None:
    """A site whose plugin comes with the image gets the aws-ofi-nccl block in both stages."""
    frontier = load_site("frontier")
    assert frontier.network_plugin is not None
    plugin = frontier.network_plugin.model_copy(update={"source": "image"})
    site = frontier.model_copy(update={"network_plugin": plugin})
    lock = resolve(site, load_recipe("torch-gpu"))
    assert lock.components["net-plugin"].source == "image"
    text = render(lock, site).dockerfile
    build, runtime = text.split(" AS runtime", 1)
    assert "aws-ofi-nccl-1.19.2.tar.gz" in build and "--with-rocm=/opt/rocm" in build
    assert "COPY --from=build /opt/aws-ofi-nccl /opt/aws-ofi-nccl" in runtime
    assert 'NCCL_NET_PLUGIN="/opt/aws-ofi-nccl/lib/librccl-net.so"' in runtime


def test_site_build_over_intel_mpi_fits_a_local_site() -> None:
    """The same model on an apt site whose MPI sits at a fixed prefix (local-bind's Intel MPI
    from impi-devel, scripts/site-mpi-setup.sh): no MPI packages, no build argument, mpi4py and
    Horovod compiled with the site's mpicc/mpicxx, daal4py kept (Intel MPI is MPICH ABI)."""
    bind = load_site("local-bind")
    site = bind.model_copy(
        update={
            "name": "local-sitebuild",
            "mpi": bind.mpi.model_copy(update={"model": "site-build"}),
        }
    )
    lock = resolve(site, load_recipe("horovod-cpu"))
    text = render(lock, site).dockerfile
    assert (
        "ARG MPI_ROOT" not in text
        and "libmpich" not in text
        and "openmpi" not in text.split("LABEL")[0]
    )
    assert 'test -x "/opt/site/intel-mpi/bin/mpicc"' in text
    assert 'MPICC="/opt/site/intel-mpi/bin/mpicc" CFLAGS="$(' in text
    assert 'PATH="/opt/site/intel-mpi/bin:$PATH"' in text
    assert "daal4py" in lock.components


def test_mpi4py_from_source_keeps_the_interpreters_cflags_and_drops_debug_info() -> None:
    """Site-build compiles mpi4py with CFLAGS set to the interpreter's own and then -g0 (rule
    mpi4py-source-no-debug): the rendered line, run by bash with this Python in the image
    Python's place, gives exactly that, and the rule's source is in the lock."""
    import sysconfig

    lock = resolve(load_site("local-sitebuild"), load_recipe("daal4py"))
    text = render(lock, load_site("local-sitebuild")).dockerfile
    (line,) = [ln for ln in text.splitlines() if "--no-binary mpi4py" in ln]
    assignment = re.search(r'CFLAGS="\$\(.*\) -g0"', line)
    assert assignment, line
    script = (
        assignment.group(0).replace("/opt/venv/bin/python3", sys.executable)
        + '; printf %s "$CFLAGS"'
    )
    got = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert got.stdout == f"{sysconfig.get_config_var('CFLAGS') or ''} -g0"
    assert "mpi4py-source-no-debug" in lock.components["mpi4py"].rules
    assert "variable tracking" in lock.rules["mpi4py-source-no-debug"]


def test_env_expands_only_the_build_arguments_its_stage_declared() -> None:
    """ENV keeps values as written (``$HOME`` stays literal) except a build argument the stage
    declared with ARG (site-build: ``ARG MPI_ROOT``, then ``MPICC="$MPI_ROOT/bin/mpicc"``)."""
    from hpcenv.render import _env_pair

    assert _env_pair(("A", "$MPI_ROOT/bin ${MPI_ROOT} $MPI_ROOTS $HOME"), ["MPI_ROOT"]) == (
        'A="$MPI_ROOT/bin ${MPI_ROOT} \\$MPI_ROOTS \\$HOME"'
    )
    assert _env_pair(("A", "$MPI_ROOT"), []) == 'A="\\$MPI_ROOT"'
    site, lock = load_site("summit"), resolve(load_site("summit"), load_recipe("horovod-gpu"))
    dockerfile = render(lock, site).dockerfile
    assert "ARG MPI_ROOT\n" in dockerfile and 'MPICC="$MPI_ROOT/bin/mpicc"' in dockerfile


def test_horovod_compiles_through_the_engine_kept_compiler_cache() -> None:
    """A Dockerfile compiles Horovod with ccache (CMake's launcher variables) in an engine cache
    mount, so local, local-bind and horovod-ccl compile the unchanged sources once; the cache
    is never a layer and the definition (Apptainer has no cache mounts) builds without it."""
    docker = FILES["local__horovod-cpu/Dockerfile"]
    run = next(step for step in docker.split("\nRUN ") if "horovod==" in step)
    assert run.startswith("--mount=type=cache,id=hpcenv-ccache,target=/var/cache/hpcenv-ccache ")
    build = next(line for line in run.splitlines() if "--no-build-isolation" in line)
    for word in (
        "CCACHE_DIR=/var/cache/hpcenv-ccache",
        "CMAKE_C_COMPILER_LAUNCHER=ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER=ccache",
    ):
        assert word in build.split(), word
    assert "ccache --show-stats" in run  # each build's hits in its log
    tools = docker.split("\nRUN ")[1]
    assert " ccache " in tools  # with the build tools, the same for every recipe that compiles
    assert FILES["local__horovod-ccl/Dockerfile"].split("\nRUN ")[1] == tools
    assert " ccache " not in FILES["local__daal4py/Dockerfile"].split("\nRUN ")[1]  # no compile
    assert "/var/cache/hpcenv-ccache" not in docker.split("AS runtime", 1)[1]
    assert docker.count("--no-build-isolation") == 1  # one variant per format, not both
    definition = FILES["local__horovod-cpu/Singularity.def"]
    assert definition.count("--no-build-isolation") == 1 and "CCACHE_DIR" not in definition
    # no Horovod, no cache: nothing else compiles through it
    assert "hpcenv-ccache" not in FILES["local__daal4py/Dockerfile"]


def test_torch_comes_before_the_mpi_so_images_that_differ_in_mpi_share_it() -> None:
    """local and local-bind differ in their MPI (Open MPI, MPICH) only after the torch layer:
    every instruction up to torch's is the same text, so one image's layers serve the other."""
    local = FILES["local__horovod-cpu/Dockerfile"].split("\nFROM ", 1)[1]
    bind = load_site("local-bind")
    other = render(resolve(bind, load_recipe("horovod-cpu")), bind).dockerfile.split("\nFROM ", 1)[
        1
    ]
    upto = local.index("torch==")
    head = local[: local.index("\n", upto)]
    head = re.sub(r"# torch .*\n", "", head)  # the comment names the site
    assert re.sub(r"# torch .*\n", "", other).startswith(head)
    assert local.index("torch==") < local.index("libopenmpi-dev")
