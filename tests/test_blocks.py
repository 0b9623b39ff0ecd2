"""Registered building blocks: the exact text each renders to (hpccm's one-test-per-block), and
that the text passes hadolint."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from requirements import need_hadolint, need_tool, needs_tool

from hpcenv.blocks import BLOCKS, STEPS_CONTEXT, Parts, Stage, apt_install, build_step, step_text
from hpcenv.paths import templates_dir
from hpcenv.render import _environment


def dockerfile(parts: Parts) -> str:
    """The block alone, in a two-stage Dockerfile (build, runtime) as render() writes it."""
    stages = [Stage("build", "base", parts.build), Stage("runtime", "base", parts.runtime)]
    text = (
        _environment()
        .get_template("Dockerfile.j2")
        .render(
            version="T",
            lock={"site": "s", "recipe": "r", "build": {"platform": "p"}},
            stages=stages,
        )
    )
    return text.split("\n\n", 1)[1].rstrip("\n")  # drop the generated header


def test_every_block_is_registered_and_documented() -> None:
    assert set(BLOCKS) == {
        "mpich-source",
        "xpu-runtime",
        "aws-ofi-nccl",
        "mpich-abi-soname",
        "mpich-abi-soname-wheels",
        "oneccl-pypi",
        "host-mpi-build",
    }
    for name, fn in BLOCKS.items():
        assert fn.__doc__ and "Example:" in fn.__doc__, name


def test_mpich_source_exact_text() -> None:
    text = dockerfile(
        BLOCKS["mpich-source"]("3.4.3", "--with-device=ch4:ofi --enable-shared", 4, "why")
    )
    assert (
        text
        == """\
FROM base AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# MPI: mpich 3.4.3 from source (shared libraries) - why
RUN mkdir -p /tmp/mpich-src && \\
    curl -fsSL https://www.mpich.org/static/downloads/3.4.3/mpich-3.4.3.tar.gz | tar -xz --strip-components=1 -C /tmp/mpich-src -f - && \\
    cd /tmp/mpich-src && ./configure --prefix=/opt/mpi --with-device=ch4:ofi --enable-shared && \\
    make -C /tmp/mpich-src -j4 install && \\
    rm -rf /tmp/mpich-src && \\
    test -e /opt/mpi/lib/libmpi.so.12
ENV PATH="/opt/mpi/bin:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \\
    LD_LIBRARY_PATH="/opt/mpi/lib"

FROM base AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /opt/mpi /opt/mpi
ENV LD_LIBRARY_PATH="/opt/mpi/lib"
CMD ["/bin/bash"]"""
    )


def test_xpu_runtime_exact_text() -> None:
    parts = BLOCKS["xpu-runtime"](
        "https://k/key", "https://r/ubuntu jammy unified", ["level-zero", "intel-level-zero-gpu"]
    )
    setup = """\
# Intel GPU runtime (Level Zero) for torch XPU
RUN apt-get update && \\
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates curl gnupg && \\
    curl -fsSL https://k/key | gpg --yes --dearmor --output /usr/share/keyrings/intel-graphics.gpg && \\
    printf '%s\\n' 'deb [arch=amd64 signed-by=/usr/share/keyrings/intel-graphics.gpg] https://r/ubuntu jammy unified' > /etc/apt/sources.list.d/intel-gpu.list && \\
    apt-get update && \\
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends intel-level-zero-gpu level-zero && \\
    rm -rf /var/lib/apt/lists/*"""
    head = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
    assert dockerfile(parts) == (
        f"FROM base AS build\n{head}{setup}\n\nFROM base AS runtime\n{head}{setup}\n"
        'CMD ["/bin/bash"]'
    )


def test_aws_ofi_nccl_exact_text_rocm_and_cuda() -> None:
    rocm = dockerfile(BLOCKS["aws-ofi-nccl"]("1.19.2", "rocm", 2))
    assert (
        rocm
        == """\
FROM base AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# aws-ofi-nccl 1.19.2: NCCL/RCCL over libfabric
RUN mkdir -p /tmp/aws-ofi-nccl && \\
    curl -fsSL https://github.com/aws/aws-ofi-nccl/releases/download/v1.19.2/aws-ofi-nccl-1.19.2.tar.gz | tar -xz --strip-components=1 -C /tmp/aws-ofi-nccl -f - && \\
    cd /tmp/aws-ofi-nccl && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/usr --with-rocm=/opt/rocm && \\
    make -C /tmp/aws-ofi-nccl -j2 install && \\
    rm -rf /tmp/aws-ofi-nccl && \\
    ln -sf /opt/aws-ofi-nccl/lib/librccl-net.so /opt/aws-ofi-nccl/lib/libnccl-net.so

FROM base AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /opt/aws-ofi-nccl /opt/aws-ofi-nccl
ENV NCCL_NET_PLUGIN="/opt/aws-ofi-nccl/lib/librccl-net.so"
CMD ["/bin/bash"]"""
    )
    cuda = dockerfile(BLOCKS["aws-ofi-nccl"]("1.19.2", "cuda", 2))
    assert "--with-cuda=/usr/local/cuda" in cuda and "ln -sf" not in cuda
    assert 'ENV NCCL_NET_PLUGIN="/opt/aws-ofi-nccl/lib/libnccl-net.so"' in cuda


_ABI_SONAME_ARGS = (
    "libmpich.so.12",
    "libmpi.so.12",
    "/usr/lib/x86_64-linux-gnu",
    ["libmpichcxx.so.12"],
    apt_install(["patchelf"], None, None),
)


def test_mpich_abi_soname_exact_text() -> None:
    assert (
        dockerfile(BLOCKS["mpich-abi-soname"](*_ABI_SONAME_ARGS))
        == """\
FROM base AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# MPI under its ABI name: libmpi.so.12 -> libmpich.so.12, extensions relinked
RUN apt-get update && \\
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends patchelf && \\
    rm -rf /var/lib/apt/lists/*
RUN ln -s libmpich.so.12 /usr/lib/x86_64-linux-gnu/libmpi.so.12 && \\
    test -e /usr/lib/x86_64-linux-gnu/libmpi.so.12
COPY hpcenv-steps/relink-mpich-abi.sh /opt/hpcenv-steps/relink-mpich-abi.sh
RUN sh /opt/hpcenv-steps/relink-mpich-abi.sh libmpich.so.12 libmpi.so.12 /opt/venv libmpichcxx.so.12

FROM base AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN ln -s libmpich.so.12 /usr/lib/x86_64-linux-gnu/libmpi.so.12 && \\
    test -e /usr/lib/x86_64-linux-gnu/libmpi.so.12
ENV HPCENV_MPICH_ABI_LIB="/usr/lib/x86_64-linux-gnu"
CMD ["/bin/bash"]"""
    )


ONECCL_ARGS = (
    "2021.16.2",
    "oneccl-cpu-devel==2021.16.2",
    "impi-rt==2021.16.*",
    "/opt/oneccl",
    {"CCL_ATL_TRANSPORT": "ofi"},
)


def test_oneccl_pypi_exact_text() -> None:
    """Own prefix (impi-rt's mpirun off the PATH), devel-only and Intel MPI parts dropped in
    the same layer, libccl copies turned into links, runtime gets lib/ and the OFI transport."""
    assert (
        dockerfile(BLOCKS["oneccl-pypi"](*ONECCL_ARGS))
        == """\
FROM base AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# oneCCL 2021.16.2 from PyPI under /opt/oneccl (CCL_ROOT for Horovod)
RUN /opt/venv/bin/pip install --no-cache-dir --prefix /opt/oneccl oneccl-cpu-devel==2021.16.2 'impi-rt==2021.16.*' && \\
    rm -rf /opt/oneccl/bin /opt/oneccl/etc /opt/oneccl/opt /opt/oneccl/share /opt/oneccl/lib/ccl /opt/oneccl/lib/pkgconfig /opt/oneccl/lib/mpi /opt/oneccl/lib/libccl.a /opt/oneccl/lib/libmpi* && \\
    ln -sf libccl.so.1.0 /opt/oneccl/lib/libccl.so.1 && \\
    ln -sf libccl.so.1 /opt/oneccl/lib/libccl.so && \\
    test -e /opt/oneccl/include/oneapi/ccl.hpp && \\
    test -e /opt/oneccl/lib/libfabric.so.1

FROM base AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /opt/oneccl/lib /opt/oneccl/lib
ENV CCL_ATL_TRANSPORT="ofi"
CMD ["/bin/bash"]"""
    )


@pytest.mark.parametrize(
    "name,args",
    [
        ("oneccl-pypi", ONECCL_ARGS),
        ("mpich-source", ("4.1.3", "--with-device=ch4:ofi", 2)),
        ("xpu-runtime", ("https://k/key", "https://r/ubuntu jammy unified", ["level-zero"])),
        ("aws-ofi-nccl", ("1.19.2", "rocm", 2)),
        ("mpich-abi-soname", _ABI_SONAME_ARGS),
        ("host-mpi-build", ("spectrum-mpi@10.4", "$MPI_ROOT")),
    ],
)
def test_block_passes_hadolint(name: str, args: tuple[object, ...], tmp_path: Path) -> None:
    hadolint = need_hadolint("every block's Dockerfile is linted")
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile(BLOCKS[name](*args)) + "\n")
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "error", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- shipped image build steps (templates/image/) ------------------------------------------------
IMAGE_STEPS = sorted(p.name for p in templates_dir().joinpath("image").glob("*.sh"))


def test_image_steps_are_the_shipped_files() -> None:
    """Every shipped step is used by a block, and a block's context file is the shipped text."""
    parts = BLOCKS["mpich-abi-soname"](*_ABI_SONAME_ARGS)
    assert IMAGE_STEPS == ["relink-mpich-abi.sh", "wheels-load-abi-name.sh"]
    assert parts.context == {
        f"{STEPS_CONTEXT}/relink-mpich-abi.sh": step_text("relink-mpich-abi.sh")
    }
    wheels = BLOCKS["mpich-abi-soname-wheels"](*_ABI_SONAME_ARGS[:3])
    assert wheels.context == {
        f"{STEPS_CONTEXT}/wheels-load-abi-name.sh": step_text("wheels-load-abi-name.sh")
    }


@needs_tool("shellcheck", why="the image build steps are shellchecked as files")
@pytest.mark.parametrize("name", IMAGE_STEPS)
def test_image_step_passes_shellcheck(name: str) -> None:
    path = templates_dir() / "image" / name
    proc = subprocess.run(["shellcheck", "-S", "style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_build_step_quotes_every_argument() -> None:
    """A value with a space or a ``;`` stays one word of the step's command line."""
    _, run, _ = build_step("relink-mpich-abi.sh", "a b", "x;touch /tmp/p", "/v")
    assert run.commands == ("sh /opt/hpcenv-steps/relink-mpich-abi.sh 'a b' 'x;touch /tmp/p' /v",)


def _cc(tmp: Path, name: str, source: str, *link: str, soname: str = "") -> Path:
    (tmp / f"{name}.c").write_text(source)
    out = tmp / name
    flags = [f"-Wl,-soname,{soname}"] if soname else []
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(out),
            str(tmp / f"{name}.c"),
            *flags,
            f"-L{tmp}",
            "-Wl,--no-as-needed",
            *link,
        ],
        check=True,
    )
    return out


def _relink(venv: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """The shipped step as the image runs it, on ``venv`` (``path``: the PATH it sees)."""
    return subprocess.run(
        [
            "sh",
            str(templates_dir() / "image" / "relink-mpich-abi.sh"),
            "libmpich.so.12",
            "libmpi.so.12",
            str(venv),
            "libmpichcxx.so.12",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path or os.environ["PATH"]},
    )


@pytest.fixture
def fake_mpich(tmp_path: Path) -> Path:
    """Debian-named MPICH stand-ins (``libmpich.so.12``, ``libmpichcxx.so.12``) built with gcc."""
    need_tool("gcc", why="the relink step is run on real ELF files")
    libs = tmp_path / "libs"
    libs.mkdir()
    _cc(libs, "libmpich.so.12", "int MPI_Init(void) { return 0; }\n", soname="libmpich.so.12")
    _cc(libs, "libmpichcxx.so.12", "void _ZN3MPI4Comm3DupEv(void) {}\n", soname="libmpichcxx.so.12")
    return libs


@needs_tool("patchelf", why="the relink step runs patchelf")
def test_relink_step_moves_an_extension_to_the_abi_name(fake_mpich: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv" / "lib"
    venv.mkdir(parents=True)
    ext = _cc(
        venv,
        "ops.so",
        "int MPI_Init(void);\nint f(void) { return MPI_Init(); }\n",
        f"-L{fake_mpich}",
        "-l:libmpich.so.12",
        "-l:libmpichcxx.so.12",
    )
    (venv / "other.so").write_bytes(b"not an extension that names MPI")
    proc = _relink(tmp_path / "venv")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"hpcenv: {ext} now loads libmpi.so.12\n"
    needed = subprocess.run(["readelf", "-d", str(ext)], capture_output=True, text=True).stdout
    assert "[libmpi.so.12]" in needed
    assert "[libmpich.so.12]" not in needed and "[libmpichcxx.so.12]" not in needed


@needs_tool("patchelf", why="the relink step runs patchelf")
def test_relink_step_fails_on_the_cxx_bindings(fake_mpich: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    ext = _cc(
        venv,
        "cxx.so",
        "void _ZN3MPI4Comm3DupEv(void);\nvoid g(void) { _ZN3MPI4Comm3DupEv(); }\n",
        f"-L{fake_mpich}",
        "-l:libmpich.so.12",
        "-l:libmpichcxx.so.12",
    )
    proc = _relink(venv)
    assert (proc.returncode, proc.stderr) == (1, f"hpcenv: {ext} calls the MPI C++ bindings\n")


def test_relink_step_fails_when_an_extension_still_needs_the_library(
    fake_mpich: Path, tmp_path: Path
) -> None:
    """patchelf failing on a file (here a patchelf that always fails, first on the PATH) leaves
    it needing Debian's name: the build stops with that name, as the in-line loop did."""
    venv = tmp_path / "venv"
    venv.mkdir()
    ext = _cc(
        venv,
        "ops.so",
        "int MPI_Init(void);\nint f(void) { return MPI_Init(); }\n",
        f"-L{fake_mpich}",
        "-l:libmpich.so.12",
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "patchelf").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "patchelf").chmod(0o755)
    proc = _relink(venv, f"{bin_dir}:{os.environ['PATH']}")
    assert (proc.returncode, proc.stderr) == (1, f"hpcenv: {ext} still needs libmpich.so.12\n")
    assert proc.stdout == ""


def test_relink_step_without_arguments_says_its_usage(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["sh", str(templates_dir() / "image" / "relink-mpich-abi.sh"), "libmpich.so.12"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: relink-mpich-abi.sh LIBRARY ABI_SONAME VENV")


def test_write_puts_the_step_files_into_the_context(tmp_path: Path) -> None:
    """Every local COPY source of a rendered Dockerfile exists in the written build context."""
    from hpcenv.recipe import load_recipe
    from hpcenv.render import render, write
    from hpcenv.resolver import resolve
    from hpcenv.site import load_site

    site = load_site("local-bind")
    rendered = render(resolve(site, load_recipe("horovod-cpu")), site)
    write(rendered, tmp_path)
    sources = [
        line.split()[1]
        for line in rendered.dockerfile.splitlines()
        if line.startswith("COPY ") and "--from=" not in line
    ]
    assert "hpcenv-steps/relink-mpich-abi.sh" in sources
    for src in sources:
        assert (tmp_path / src).exists(), src
    step = tmp_path / "hpcenv-steps" / "relink-mpich-abi.sh"
    assert step.read_text() == step_text("relink-mpich-abi.sh")
    assert "    hpcenv-steps/relink-mpich-abi.sh /opt/hpcenv-steps/relink-mpich-abi.sh" in (
        rendered.singularity
    )


def test_host_mpi_build_exact_text() -> None:
    """site-build (OLCF containers_on_summit.rst: podman build -v $MPI_ROOT:$MPI_ROOT,
    --build-arg mpi_root=$MPI_ROOT): the prefix is a build argument, no MPI is installed, and
    mpicc/mpicxx are the host's."""
    text = dockerfile(BLOCKS["host-mpi-build"]("spectrum-mpi@10.4", "$MPI_ROOT"))
    assert (
        text
        == """\
FROM base AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# MPI: none in the image; the host's spectrum-mpi@10.4 at $MPI_ROOT, mounted for the build
ARG MPI_ROOT
ARG HPCENV_HOST_MPI
RUN test -x "$MPI_ROOT/bin/mpicc" || { echo "hpcenv: site-build: the host MPI spectrum-mpi@10.4 \
is not mounted at '$MPI_ROOT' (build with -v ROOT:ROOT --build-arg MPI_ROOT=ROOT)" >&2; exit 1; }
ENV MPICC="$MPI_ROOT/bin/mpicc" \\
    MPICXX="$MPI_ROOT/bin/mpicxx" \\
    LD_LIBRARY_PATH="$MPI_ROOT/lib"

FROM base AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# MPI: the host's spectrum-mpi@10.4, bound at $MPI_ROOT by the job (site-build model)
ARG MPI_ROOT
ENV LD_LIBRARY_PATH="$MPI_ROOT/lib"
CMD ["/bin/bash"]"""
    )


def test_host_mpi_build_literal_prefix_needs_no_build_arg() -> None:
    """A site whose MPI lives at a fixed prefix (the Intel MPI of local-bind) has no ARG but
    the check's cache key (HPCENV_HOST_MPI, set only by ``build --no-site-mpi``)."""
    parts = BLOCKS["host-mpi-build"]("intel-mpi@2021.18.1", "/opt/site/intel-mpi")
    args = [p for p in parts.build + parts.runtime if p.kind == "arg"]
    assert [a.text for a in args] == ["HPCENV_HOST_MPI"]
    assert ("MPICC", "/opt/site/intel-mpi/bin/mpicc") in next(
        p for p in parts.build if p.kind == "env"
    ).pairs


@pytest.mark.parametrize("mounted", [True, False])
def test_host_mpi_build_check_without_the_mount(mounted: bool, tmp_path: Path) -> None:
    """The build step's own check, run by bash as the build would: without the mount the build
    stops with one line that says how to mount it."""
    check = next(
        p
        for p in BLOCKS["host-mpi-build"]("spectrum-mpi@10.4", "$MPI_ROOT").build
        if p.kind == "shell"
    )
    root = tmp_path / "spectrum"
    if mounted:
        (root / "bin").mkdir(parents=True)
        (root / "bin" / "mpicc").write_text("#!/bin/sh\n")
        (root / "bin" / "mpicc").chmod(0o755)
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", " && ".join(check.commands)],
        env={"MPI_ROOT": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    if mounted:
        assert proc.returncode == 0 and proc.stderr == ""
    else:
        assert proc.returncode == 1
        assert proc.stderr == (
            f"hpcenv: site-build: the host MPI spectrum-mpi@10.4 is not mounted at '{root}' "
            "(build with -v ROOT:ROOT --build-arg MPI_ROOT=ROOT)\n"
        )


def test_a_build_cache_mount_is_a_dockerfile_shell_steps_only() -> None:
    """The definition template has no cache mounts: a step with one must be Dockerfile-only, and
    its id and target go into the mount flag as they are (no comma, no second option)."""
    from hpcenv.blocks import Primitive
    from hpcenv.errors import ConfigError

    ok = Primitive("shell", commands=("true",), caches=(("c", "/var/cache/c"),), only="docker")
    assert "--mount=type=cache,id=c,target=/var/cache/c true" in dockerfile(Parts(build=[ok]))
    with pytest.raises(ConfigError, match="Dockerfile's own"):
        Primitive("shell", commands=("true",), caches=(("c", "/var/cache/c"),))
    with pytest.raises(ConfigError, match="letters, digits"):
        Primitive("shell", commands=("true",), caches=(("c,uid=0", "/x"),), only="docker")
