"""The build stage carries the toolchain only where a step compiles (Blocks.compiles).

A CPU stack of apt packages and binary wheels (daal4py on local) builds in one stage
(Blocks.wheels_stage): one apt step with what its venv and pip need and its MPI's runtime
packages (with daal4py's side MPI and a bind model's ABI link), its pip step takes wheels only,
and the build inputs are mounted for the steps that use them. Every
stack that compiles something (Horovod, an MPI from source or the host's, mpi4py against the
MPI-5 ABI) and every GPU stack keeps the whole toolchain, byte for byte as before (so their first
layers stay shared)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hpcenv.bench import hpccm_daal4py
from hpcenv.blocks import STEPS_CONTEXT, Blocks, mpich_abi_soname_wheels
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
def test_a_stack_of_wheels_and_apt_packages_builds_in_one_stage_without_the_toolchain(
    site: str, recipe: str
) -> None:
    blocks = _blocks(site, recipe)
    assert not blocks.compiles() and blocks.one_stage()
    assert blocks.build_tool_packages() == list(APT["wheels_only"])
    dockerfile = render(blocks.lock, blocks.site).dockerfile
    assert dockerfile.count("\nFROM ") == 1 and " AS runtime\n" in dockerfile
    for tool in ("build-essential", "cmake", "ccache", "python3-dev"):
        assert tool not in dockerfile, tool
    # the build inputs are mounted for the steps that use them, never copied into a layer
    assert "COPY --from=" not in dockerfile and "COPY hpcenv-build " not in dockerfile
    assert "\nENV PIP_CONFIG_FILE" not in dockerfile
    pip = "RUN --mount=type=bind,source=hpcenv-build,target=/opt/hpcenv-build export "
    pip += "PIP_CONFIG_FILE=/opt/hpcenv-build/pip.conf PIP_DISABLE_PIP_VERSION_CHECK=1 && \\\n"
    assert f"{pip}    /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: mpi4py==" in (
        dockerfile
    )
    # one apt step: the venv's tools and the MPI's runtime packages, before the venv
    assert dockerfile.count("apt-get update") == 1
    apt = dockerfile.split("python3 -m venv", 1)[0]
    mpi = blocks.lock.components["mpi"].implementation
    for pkg in (*APT[mpi]["runtime"], *APT["wheels_only"]):
        assert f" {pkg}" in apt, pkg
    for pkg in (*APT["openmpi"]["build"], *APT["mpich"]["build"]):
        if pkg not in (*APT[mpi]["runtime"], *APT["mpich"]["runtime"]):
            assert f" {pkg}" not in dockerfile, pkg


def test_the_two_stage_layout_stays_available_for_the_bench() -> None:
    """``hpcenv bench`` measures the one stage against the layout a compiling stack gets."""
    blocks = _blocks("local", "daal4py")
    two = render(blocks.lock, blocks.site, two_stage=True).dockerfile
    build, runtime = two.split(" AS runtime", 1)
    assert "COPY hpcenv-build /opt/hpcenv-build" in build
    assert "COPY --from=build /opt/venv /opt/venv" in runtime


def _wheels_check(tmp_path: Path, venv: Path) -> subprocess.CompletedProcess[str]:
    """The build stage's shipped check (the block's context file), run by sh on ``venv``."""
    parts = mpich_abi_soname_wheels("libmpich.so.12", "libmpi.so.12", "/usr/lib")
    script = tmp_path / "check.sh"
    script.write_text(parts.context[f"{STEPS_CONTEXT}/wheels-load-abi-name.sh"])
    return subprocess.run(
        ["sh", str(script), "libmpich.so.12", "libmpi.so.12", str(venv)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_wheels_check_stops_on_a_venv_it_cannot_read(tmp_path: Path) -> None:
    missing = tmp_path / "no-venv"
    proc = _wheels_check(tmp_path, missing)
    assert proc.returncode == 2
    assert f"hpcenv: no venv at {missing}" in proc.stderr


def test_daal4py_side_mpi_is_linked_in_the_runtime_stage_when_nothing_compiles() -> None:
    """local's daal4py: Open MPI the image's MPI, Debian's MPICH the side runtime whose
    libmpich.so.12 is linked as libmpi.so.12 where the runtime stage installed it."""
    blocks = _blocks("local", "daal4py")
    runtime = render(blocks.lock, blocks.site).dockerfile
    assert "COPY --from=build /opt/mpich-abi" not in runtime
    link = "ln -sf \"$(find /usr/lib -name 'libmpich.so.12' | head -n 1)\" /opt/mpich-abi/lib/"
    assert link in runtime
    assert runtime.index("libmpich12") < runtime.index(link)
    assert "update-alternatives --set mpi " not in runtime  # no mpicc to choose: no -dev package


def test_a_bind_model_of_wheels_checks_that_no_wheel_loads_the_os_name() -> None:
    """local-bind's daal4py: nothing was linked against Debian's libmpich.so.12, so there is no
    relink (no patchelf, no binutils); the build stage fails if a wheel names it all the same,
    and the runtime stage adds libmpi.so.12 as before."""
    blocks = _blocks("local-bind", "daal4py")
    assert not blocks.compiles()
    image = render(blocks.lock, blocks.site).dockerfile
    assert "patchelf" not in image and "relink-mpich-abi.sh" not in image
    check = "sh /opt/hpcenv-steps/wheels-load-abi-name.sh libmpich.so.12 libmpi.so.12 /opt/venv"
    # the shipped step is mounted for its own step only, never copied into the image
    mount = "--mount=type=bind,source=hpcenv-steps,target=/opt/hpcenv-steps"
    step = next(i for i in image.split("\nRUN ") if check in i)
    assert mount in step and "COPY hpcenv-steps" not in image
    assert image.count(mount) == 1
    link = "ln -s libmpich.so.12 /usr/lib/x86_64-linux-gnu/libmpi.so.12"
    assert image.index(check) < image.index(link)
    assert 'HPCENV_MPICH_ABI_LIB="/usr/lib/x86_64-linux-gnu"' in image


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


@pytest.mark.parametrize(("names_os_library", "code"), [(False, 0), (True, 1)])
def test_the_wheels_check_runs_and_fails_on_a_wheel_that_loads_the_os_name(
    tmp_path: Path, names_os_library: bool, code: int
) -> None:
    """The build stage's shipped check, run by sh on a venv of two extensions."""
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "ok.so").write_bytes(b"\x7fELF libmpi.so.12\x00")
    if names_os_library:
        (venv / "lib" / "bad.so").write_bytes(b"\x7fELF libmpich.so.12\x00")
        libs = venv / "lib" / "pkg.libs"  # a library a wheel carries, versioned (auditwheel)
        libs.mkdir()
        (libs / "libdep-1a2b.so.3").write_bytes(b"\x7fELF libmpich.so.12\x00")
    proc = _wheels_check(tmp_path, venv)
    assert proc.returncode == code, proc.stderr
    if names_os_library:
        assert "bad.so" in proc.stderr and "libdep-1a2b.so.3" in proc.stderr
        assert "ok.so" not in proc.stderr
        assert "these binary wheels load libmpich.so.12, not libmpi.so.12" in proc.stderr


def test_one_stage_copies_the_build_inputs_digest_before_the_steps_that_mount_them(
    tmp_path: Path,
) -> None:
    """A mount's content is not in podman's layer-cache key (buildah #5400): the image copies
    the inputs' digest first, so a changed pip.conf builds the venv and pip steps again."""
    from hpcenv.blocks import INPUTS_DIGEST, INPUTS_DIGEST_IMAGE
    from hpcenv.render import write, write_inputs_digest

    blocks = _blocks("local", "daal4py")
    rendered = render(blocks.lock, blocks.site)
    docker = rendered.dockerfile
    copy_line = f"COPY {INPUTS_DIGEST} {INPUTS_DIGEST_IMAGE}"
    assert docker.index(copy_line) < docker.index("--mount=type=bind,source=hpcenv-build")
    assert f"    {INPUTS_DIGEST} {INPUTS_DIGEST_IMAGE}" in rendered.singularity
    write(rendered, tmp_path)
    first = (tmp_path / INPUTS_DIGEST).read_text()
    (tmp_path / "hpcenv-build" / "pip.conf").write_text("[global]\nindex-url = https://x/\n")
    assert write_inputs_digest(tmp_path).read_text() != first
    (tmp_path / "hpcenv-build" / "pip.conf").write_text(rendered.pip_conf)
    assert write_inputs_digest(tmp_path).read_text() == first


@contextmanager
def _removed(folder: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.podman
def test_a_changed_build_input_builds_the_mounted_steps_again_for_real(tmp_path: Path) -> None:
    """Real podman, in a throw-away storage: daal4py on local built once, then built again after
    a change to pip.conf only. The apt step before the inputs' digest comes from the cache; the
    digest's copy and the venv and pip steps that mount the inputs run again (podman 4.3 leaves
    a mount's content out of its cache key: without the digest they would all be reused)."""
    from requirements import need_tool

    from hpcenv.bench.buildcost import IsolatedStorage, podman_build
    from hpcenv.build import ensure_base, make_plans, write_context
    from hpcenv.render import write_inputs_digest
    from hpcenv.shells import podman

    need_tool("podman", why="a one-stage build is rebuilt after its inputs change")
    plan = make_plans(load_site("local"), ["daal4py"], {}, tmp_path / "ctx", owned=True)[0]
    context = write_context(plan)
    ensure_base(plan)
    archive = tmp_path / "base.tar"
    base = plan.lock.build["base_image"]
    podman("save", "--format", "docker-archive", "-o", str(archive), base, timeout=300)
    logs = {name: tmp_path / f"{name}.log" for name in ("first", "second")}
    short = Path(tempfile.mkdtemp(prefix="hpcenv-in-"))  # podman: a runroot of <= 50 chars
    with _removed(short), IsolatedStorage(short / "s", archive) as store:
        for name, log in logs.items():
            if name == "second":
                conf = context / "hpcenv-build" / "pip.conf"
                conf.write_text(conf.read_text() + "timeout = 61\n")
                write_inputs_digest(context)
            timing = podman_build(
                name,
                context,
                context / "Dockerfile",
                "localhost/hpcenv-test/inputs:1",
                log,
                cold=False,
                storage=store.args,
                env=store.env,
            )
            assert timing.ok, timing.error

    def from_cache(log: str, step: str) -> bool:
        lines = log.splitlines()
        at = next(i for i, ln in enumerate(lines) if " STEP " in f" {ln}" and step in ln)
        outcome = next(ln for ln in lines[at + 1 :] if ln.startswith("--> "))
        return outcome.startswith("--> Using cache")

    second = logs["second"].read_text()
    assert from_cache(second, "apt-get update")
    assert not from_cache(second, "--only-binary=:all: mpi4py==")
    assert not from_cache(second, "COPY hpcenv-build.sha256")
