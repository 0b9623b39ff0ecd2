"""Building blocks: the lock turned into primitives for a build stage and a slim runtime stage.

Only the primitives know nothing of recipe syntax; the two emitters (``render.py`` with the
Jinja2 templates) turn the same stages into a Dockerfile and a Singularity definition.
A block returns what the build stage runs and what the runtime stage needs (hpccm's
``runtime()`` idea), so the multi-stage split falls out of the blocks.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from hpcenv.credentials import (
    APT_AUTH,
    PIP_CONF,
    SECRETS_DIR,
    clean_url,
    has_credentials,
    pip_credentials,
)
from hpcenv.errors import ConfigError
from hpcenv.knowledge import kb, mpi_soname, rule
from hpcenv.lock import Lock
from hpcenv.matched import USER_CONTEXT, USER_DIR, companion_checks
from hpcenv.paths import templates_dir
from hpcenv.safe import one_line
from hpcenv.site import Site
from hpcenv.versions import major_minor

VENV = "/opt/venv"
CACHE_WORD = re.compile(r"[A-Za-z0-9._/-]+")  # a build cache mount's id or target
BUILD_DIR = "/opt/hpcenv-build"  # build stage only: CA bundle, pip.conf, wheelhouse
BUILD_CONTEXT = "hpcenv-build"  # the build inputs' folder in the build context
# The build inputs' digest, beside them in the context (hpcenv.render.write_inputs_digest): a
# one-stage image copies it before its first step that mounts them, since a mount's content is
# not in the engine's layer-cache key (buildah #5400, podman 4.3 here) and a changed pip.conf,
# CA bundle or wheelhouse must build those steps again
INPUTS_DIGEST = "hpcenv-build.sha256"
INPUTS_DIGEST_IMAGE = "/opt/hpcenv/build-inputs.sha256"
PIP = f"{VENV}/bin/pip"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VENV_PATH = f"{VENV}/bin:{SYSTEM_PATH}"
PY_CFLAGS = 'import sysconfig; print(sysconfig.get_config_var("CFLAGS") or "")'
# On a framework base: the torch the image itself reports, as a pip constraint (hpcenv.prebuilt)
BASE_PINS = "/opt/hpcenv/base-constraints.txt"
BASE_PIN_CODE = "import torch; print('torch==' + torch.__version__)"


@dataclass(frozen=True)
class Primitive:
    """One recipe instruction, independent of the output format."""

    kind: Literal["comment", "shell", "env", "copy", "label", "user", "workdir", "arg"]
    commands: tuple[str, ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()
    src: str = ""
    dst: str = ""
    from_stage: str | None = None
    text: str = ""
    secrets: tuple[str, ...] = ()  # build secrets mounted for this step (shell only)
    # build-context folders (source, target) there for this step only (shell only): a bind
    # mount in a Dockerfile; in a definition copied by %files and removed after the step
    mounts: tuple[tuple[str, str], ...] = ()
    # build caches (id, target) the engine keeps between builds, there for this step only (shell
    # only): ``RUN --mount=type=cache`` in a Dockerfile; a definition has none (see ``only``)
    caches: tuple[tuple[str, str], ...] = ()
    only: Literal["docker", "singularity"] | None = None  # one format's way to do a step
    # env only: names whose ``$NAME`` in a value the image's environment expands (a prebuilt
    # base's own PATH); every other ``$`` stays literal
    expands: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """One line per value: a newline would start a new instruction in either format."""
        for value in (
            *self.commands,
            *(x for pair in self.mounts for x in pair),
            *(x for pair in self.caches for x in pair),
            *(x for pair in self.pairs for x in pair),
            self.src,
            self.dst,
            self.from_stage or "",
            self.text,
        ):
            one_line(value, f"{self.kind} instruction")
        for cache_id, target in self.caches:  # the Dockerfile's mount flag takes them as they are
            if not (self.kind == "shell" and self.only == "docker"):
                raise ConfigError(
                    f"{self.kind} instruction: a build cache mount is a Dockerfile's own "
                    "(a shell step with only='docker'); a definition has none"
                )
            for word in (cache_id, target):
                if not CACHE_WORD.fullmatch(word):
                    raise ConfigError(f"build cache mount {word!r}: letters, digits, '._/-' only")


def comment(text: str) -> Primitive:
    return Primitive("comment", text=text)


def shell(*commands: str) -> Primitive:
    return Primitive("shell", commands=tuple(commands))


def env(**pairs: str) -> Primitive:
    return Primitive("env", pairs=tuple(pairs.items()))


def env_on_base(**pairs: str) -> Primitive:
    """``env`` whose values may name the base image's own ``$PATH`` (prepended to, not lost)."""
    return Primitive("env", pairs=tuple(pairs.items()), expands=("PATH",))


def copy(src: str, dst: str, from_stage: str | None = None) -> Primitive:
    return Primitive("copy", src=src, dst=dst, from_stage=from_stage)


def arg(name: str) -> Primitive:
    """A build argument the build command passes (``--build-arg NAME=...``); later steps of the
    stage read it as ``$NAME`` (Dockerfile ``ARG``; Apptainer ``{{ NAME }}``, see render.py)."""
    return Primitive("arg", text=name)


def variables_in(text: str) -> list[str]:
    """``$NAME``/``${NAME}`` names in ``text`` (``"$MPI_ROOT/lib"`` -> ``["MPI_ROOT"]``)."""
    return list(dict.fromkeys(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text)))


@dataclass
class Parts:
    """What one block contributes to each stage, and the files it adds to the build context
    (relative path -> text; its ``copy`` primitives put them into the image)."""

    build: list[Primitive] = field(default_factory=list)
    runtime: list[Primitive] = field(default_factory=list)
    runtime_apt: list[str] = field(default_factory=list)
    context: dict[str, str] = field(default_factory=dict)


@dataclass
class Stage:
    name: str
    base: str
    primitives: list[Primitive]


def apt_install(packages: list[str], mirror: str | None, suite: str | None) -> Primitive:
    """One apt transaction; a site mirror is used for it and removed in the same step.

    The mirror's URL is written without its credentials; those come from the build secret
    ``hpcenv-apt-auth`` (apt's auth.conf format), mounted for this step only."""
    pkgs = " ".join(sorted(set(packages)))
    if mirror:
        sources = f"{BUILD_DIR}-apt.list"
        line = shlex.quote(f"deb {clean_url(mirror)} {suite or 'stable'} main")
        opts = f"-o Dir::Etc::SourceList={sources} -o Dir::Etc::SourceParts=-"
        secrets: tuple[str, ...] = ()
        if has_credentials(mirror):
            # apt's download methods run as _apt, which cannot read a root-only secret.
            opts += f" -o Dir::Etc::netrc={SECRETS_DIR}/{APT_AUTH} -o APT::Sandbox::User=root"
            secrets = (APT_AUTH,)
        cmds = (
            f"printf '%s\\n' {line} > {sources}",
            f"apt-get {opts} update",
            f"DEBIAN_FRONTEND=noninteractive apt-get {opts} install -y --no-install-recommends {pkgs}",
            f"rm -rf /var/lib/apt/lists/* {sources}",
        )
        return Primitive("shell", commands=cmds, secrets=secrets)
    return shell(
        "apt-get update",
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {pkgs}",
        "rm -rf /var/lib/apt/lists/*",
    )


# Build steps that are shell programs are shipped files (templates/image/), never strings: a
# block puts one into the build context under STEPS_CONTEXT, copies it to STEPS_DIR in the build
# stage and runs it with quoted arguments (see :func:`build_step`).
STEPS_CONTEXT = "hpcenv-steps"
STEPS_DIR = "/opt/hpcenv-steps"


def step_text(name: str) -> str:
    """A shipped image build step (``templates/image/<name>``) as text."""
    return templates_dir().joinpath("image", name).read_text(encoding="utf-8")


def build_step(name: str, *args: str) -> tuple[Primitive, Primitive, dict[str, str]]:
    """Copy the shipped step ``name`` into the build stage and run it with ``args``, each one
    word (shlex-quoted): (copy, run, the context file)."""
    rel = f"{STEPS_CONTEXT}/{name}"
    run = shell(shlex.join(["sh", f"{STEPS_DIR}/{name}", *args]))
    return copy(rel, f"{STEPS_DIR}/{name}"), run, {rel: step_text(name)}


def build_inputs_mounted(steps: list[Primitive], pip_conf: str) -> list[Primitive]:
    """The stack's build-stage steps (without the trust block's copy and ENV) made fit for a
    runtime stage (:meth:`Blocks.wheels_stage`): each shell step gets the build inputs
    (``hpcenv-build``, and the shipped steps where it runs one) mounted for itself only, and
    pip's settings exported for its commands; the shipped steps' copies are dropped. An
    example: ``shell("pip install x")`` becomes ``RUN --mount=type=bind,source=hpcenv-build,
    target=/opt/hpcenv-build export PIP_CONFIG_FILE=/opt/hpcenv-build/pip.conf
    PIP_DISABLE_PIP_VERSION_CHECK=1 && pip install x``. Any other step stays as it is."""
    pip_env = f"export PIP_CONFIG_FILE={shlex.quote(pip_conf)} PIP_DISABLE_PIP_VERSION_CHECK=1"
    out: list[Primitive] = []
    for p in steps:
        if p.kind == "copy" and p.from_stage is None and p.src.startswith(f"{STEPS_CONTEXT}/"):
            continue
        if p.kind == "shell":
            inputs = [(BUILD_CONTEXT, BUILD_DIR)]
            if any(f"{STEPS_DIR}/" in c for c in p.commands):
                inputs.append((STEPS_CONTEXT, STEPS_DIR))
            p = replace(p, commands=(pip_env, *p.commands), mounts=(*inputs, *p.mounts))
        out.append(p)
    return out


def dnf_install(packages: list[str], install: str) -> Primitive:
    """One dnf transaction (``install``: the site's command, ``fakeroot dnf install -y`` where
    the builder is rootless), its caches removed in the same step."""
    pkgs = " ".join(sorted(set(packages)))
    return shell(f"{install} {pkgs}", "dnf clean all", "rm -rf /var/cache/dnf")


def pip_install(*requirements: str, extra: str = "") -> str:
    reqs = " ".join(shlex.quote(r) for r in requirements)
    return f"{PIP} install --no-cache-dir {extra}{reqs}".replace("  ", " ")


# -- registered building blocks ---------------------------------------------------------------
# Small functions from plain parameters to Parts; each has an exact-text test
# (tests/test_blocks.py). ``Blocks`` below picks them from the lock; ``BLOCKS`` lists them so a
# new image part (a network plugin, a GPU runtime, a site MPI build) is one function here.

BLOCKS: dict[str, Callable[..., Parts]] = {}


def register(name: str) -> Callable[[Callable[..., Parts]], Callable[..., Parts]]:
    def add(fn: Callable[..., Parts]) -> Callable[..., Parts]:
        BLOCKS[name] = fn
        return fn

    return add


MPI_PREFIX = "/opt/mpi"


@register("mpich-source")
def mpich_source(version: str, configure: str, jobs: int, reason: str = "") -> Parts:
    """MPICH built from source with shared libraries, for a host MPICH-ABI MPI to replace.

    NERSC asks for MPICH from source (not apt) with shared libraries so Cray MPICH can be
    injected; OLCF asks for the MPICH version ABI compatible with ``cray-mpich-abi``
    (``--with-device=ch4:ofi``). Example: ``mpich_source("4.1.3", "--with-device=ch4:ofi", 2)``.
    """
    url = kb()["install"]["mpi_source_url"]["mpich"].format(version=version)
    return Parts(
        build=[
            comment(f"MPI: mpich {version} from source (shared libraries) - {reason}".rstrip(" -")),
            shell(
                "mkdir -p /tmp/mpich-src",
                f"curl -fsSL {shlex.quote(url)} | tar -xz --strip-components=1 -C /tmp/mpich-src -f -",
                f"cd /tmp/mpich-src && ./configure --prefix={MPI_PREFIX} {configure}",
                f"make -C /tmp/mpich-src -j{jobs} install",
                "rm -rf /tmp/mpich-src",
                f"test -e {MPI_PREFIX}/lib/{mpi_soname('mpich')}",
            ),
            env(PATH=f"{MPI_PREFIX}/bin:{VENV_PATH}", LD_LIBRARY_PATH=f"{MPI_PREFIX}/lib"),
        ],
        runtime=[
            copy(MPI_PREFIX, MPI_PREFIX, from_stage="build"),
            env(LD_LIBRARY_PATH=f"{MPI_PREFIX}/lib"),
        ],
    )


# A build argument the site-build MPI check sees: podman's layer cache ignores ``-v`` mounts.
HOST_MPI_ARG = "HPCENV_HOST_MPI"


@register("host-mpi-build")
def host_mpi_build(spec: str, root: str) -> Parts:
    """site-build: no MPI of the image's own; the host's, mounted at its own path while the
    image builds (``podman build -v ROOT:ROOT``, OLCF's Summit recipe), is what MPI programs
    compile against (``MPICC``/``MPICXX`` and ``ROOT/bin`` first on the PATH), and the job binds
    the same path. A ``$VARIABLE`` in ``root`` is a build argument (``--build-arg``). The step
    fails with one line when the mount is missing. Example: ``host_mpi_build("spectrum-mpi@10.4",
    "$MPI_ROOT")``; ``host_mpi_build("intel-mpi@2021.18.1", "/opt/site/intel-mpi")``.
    """
    args = [arg(name) for name in variables_in(root)]
    # HOST_MPI_ARG is unset in a normal build; set (``build --no-site-mpi``), it changes the
    # check's cache key, so the check runs again instead of passing from the layer cache.
    check = shell(
        f'test -x "{root}/bin/mpicc" || {{ echo "hpcenv: site-build: the host MPI {spec} is '
        f"not mounted at '{root}' (build with -v ROOT:ROOT"
        + "".join(f" --build-arg {n}=ROOT" for n in variables_in(root))
        + ')" >&2; exit 1; }'
    )
    return Parts(
        build=[
            comment(f"MPI: none in the image; the host's {spec} at {root}, mounted for the build"),
            *args,
            arg(HOST_MPI_ARG),
            check,
            env(
                MPICC=f"{root}/bin/mpicc",
                MPICXX=f"{root}/bin/mpicxx",
                LD_LIBRARY_PATH=f"{root}/lib",
            ),
        ],
        runtime=[
            comment(f"MPI: the host's {spec}, bound at {root} by the job (site-build model)"),
            *args,
            env(LD_LIBRARY_PATH=f"{root}/lib"),
        ],
    )


@register("xpu-runtime")
def xpu_runtime(key_url: str, repo: str, packages: list[str]) -> Parts:
    """Intel GPU user-space runtime (Level Zero loader + compute runtime) for torch XPU.

    Apptainer injects no Intel GPU libraries, so the image carries them; the same apt source
    is set up in both stages. Example: ``xpu_runtime(KEY, "https://.../ubuntu jammy unified",
    ["level-zero", "intel-level-zero-gpu"])``.
    """
    keyring = "/usr/share/keyrings/intel-graphics.gpg"
    line = shlex.quote(f"deb [arch=amd64 signed-by={keyring}] {repo}")
    pkgs = " ".join(sorted(packages))
    setup = shell(
        "apt-get update",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "ca-certificates curl gnupg",
        f"curl -fsSL {shlex.quote(key_url)} | gpg --yes --dearmor --output {keyring}",
        f"printf '%s\\n' {line} > /etc/apt/sources.list.d/intel-gpu.list",
        "apt-get update",
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {pkgs}",
        "rm -rf /var/lib/apt/lists/*",
    )
    return Parts(
        build=[comment("Intel GPU runtime (Level Zero) for torch XPU"), setup],
        runtime=[comment("Intel GPU runtime (Level Zero) for torch XPU"), setup],
    )


@register("aws-ofi-nccl")
def aws_ofi_nccl(version: str, accelerator: str, jobs: int) -> Parts:
    """The libfabric network plugin for NCCL/RCCL built into the image (``/opt/aws-ofi-nccl``).

    For sites whose documentation puts the plugin in the image; Frontier (``rccl-net-plugin``
    module) and Perlmutter (``podman-hpc --nccl``) inject the host's build instead. On ROCm the
    plugin is ``librccl-net.so`` (``--with-rocm``), with the ``libnccl-net.so`` link some RCCL
    versions look for. Example: ``aws_ofi_nccl("1.19.2", "rocm", 2)``.
    """
    url = kb()["install"]["aws_ofi_nccl_url"].format(version=version)
    prefix = "/opt/aws-ofi-nccl"
    gpu = "--with-rocm=/opt/rocm" if accelerator == "rocm" else "--with-cuda=/usr/local/cuda"
    cmds = [
        "mkdir -p /tmp/aws-ofi-nccl",
        f"curl -fsSL {shlex.quote(url)} | tar -xz --strip-components=1 -C /tmp/aws-ofi-nccl -f -",
        f"cd /tmp/aws-ofi-nccl && ./configure --prefix={prefix} --with-libfabric=/usr {gpu}",
        f"make -C /tmp/aws-ofi-nccl -j{jobs} install",
        "rm -rf /tmp/aws-ofi-nccl",
    ]
    plugin = "librccl-net.so" if accelerator == "rocm" else "libnccl-net.so"
    if accelerator == "rocm":
        cmds.append(f"ln -sf {prefix}/lib/librccl-net.so {prefix}/lib/libnccl-net.so")
    return Parts(
        build=[comment(f"aws-ofi-nccl {version}: NCCL/RCCL over libfabric"), shell(*cmds)],
        runtime=[
            copy(prefix, prefix, from_stage="build"),
            env(NCCL_NET_PLUGIN=f"{prefix}/lib/{plugin}"),
        ],
    )


def links_only(library: str, abi: str) -> list[str]:
    """Build commands that fail unless the compiled ``library`` (a path or shell word) needs the
    MPI-5 ABI library ``abi`` and no family ``libmpi.so.*`` (rule ``mpi-abi-image``)."""
    return [
        f'readelf -d {library} | grep -F "[{abi}]"',
        f'! readelf -d {library} | grep -F "[libmpi.so"',
    ]


@register("mpich-abi-soname")
def mpich_abi_soname(
    library: str, abi_soname: str, lib_dir: str, unused: list[str], apt: Primitive
) -> Parts:
    """An apt MPICH under the MPICH ABI's library name, for a bind-model site to replace.

    Debian names MPICH's library ``libmpich.so.12``; a site's MPI (Cray MPICH, Intel MPI)
    replaces ``libmpi.so.12``, so a program linked to Debian's name would keep loading the image's
    MPICH beside the site's. The image adds the ABI name as a link in ``lib_dir`` (as Debian
    sid's libmpich12 does) and relinks the venv's extensions (Horovod's MPI ops) from Debian's
    name to it, dropping ``unused`` libraries (the MPI C++ bindings, which must then be
    uncalled); the build fails if any extension still needs them (the shipped step
    ``templates/image/relink-mpich-abi.sh``). ``apt`` installs patchelf.
    ``HPCENV_MPICH_ABI_LIB`` names the folder for the job's preflight check (the loader cache
    lists libraries by their own name only). Example: ``mpich_abi_soname("libmpich.so.12",
    "libmpi.so.12", "/usr/lib/x86_64-linux-gnu", ["libmpichcxx.so.12"], apt)``.
    """
    link = abi_link(library, abi_soname, lib_dir)
    copy_step, relink, files = build_step("relink-mpich-abi.sh", library, abi_soname, VENV, *unused)
    return Parts(
        build=[
            comment(f"MPI under its ABI name: {abi_soname} -> {library}, extensions relinked"),
            apt,
            link,
            copy_step,
            relink,
        ],
        runtime=[link, env(HPCENV_MPICH_ABI_LIB=lib_dir)],
        context=files,
    )


def abi_link(library: str, abi_soname: str, lib_dir: str) -> Primitive:
    """The MPICH ABI's library name as a link to the OS's name (see :func:`mpich_abi_soname`)."""
    return shell(f"ln -s {library} {lib_dir}/{abi_soname}", f"test -e {lib_dir}/{abi_soname}")


@register("mpich-abi-soname-wheels")
def mpich_abi_soname_wheels(library: str, abi_soname: str, lib_dir: str) -> Parts:
    """:func:`mpich_abi_soname` for a venv of binary wheels only (a stack that compiles
    nothing, whose build stage has no MPI): nothing was linked against the OS's name, so there
    is nothing to relink; the build fails if a wheel's extension names ``library`` all the same
    (the shipped step ``templates/image/wheels-load-abi-name.sh``). Example:
    ``mpich_abi_soname_wheels("libmpich.so.12", "libmpi.so.12", "/usr/lib/x86_64-linux-gnu")``.
    The runtime stage gets the same link and ``HPCENV_MPICH_ABI_LIB``."""
    copy_step, check, files = build_step("wheels-load-abi-name.sh", library, abi_soname, VENV)
    return Parts(
        build=[
            comment(f"binary wheels only: none may load {library} (nothing is relinked)"),
            copy_step,
            check,
        ],
        runtime=[
            comment(f"MPI under its ABI name: {abi_soname} -> {library}"),
            abi_link(library, abi_soname, lib_dir),
            env(HPCENV_MPICH_ABI_LIB=lib_dir),
        ],
        context=files,
    )


@register("oneccl-pypi")
def oneccl_pypi(
    version: str, package: str, impi_rt: str, prefix: str, runtime_env: dict[str, str]
) -> Parts:
    """oneCCL from PyPI under its own prefix, for Horovod's CCL operations (``CCL_ROOT``).

    Not in the venv: impi-rt (which carries the libfabric oneCCL's OFI transport loads, next
    to ``libccl.so.1``) also installs Intel MPI's ``mpirun`` and ``libmpi.so.12``, which would
    shadow the image MPI on the PATH. The step keeps the headers and ``libccl`` for the build
    and drops the static libraries, Intel MPI's binaries and libraries, and the duplicate
    ``libccl`` copies (wheels cannot hold links); the runtime stage takes ``lib`` only.
    Example: ``oneccl_pypi("2021.16.2", "oneccl-cpu-devel==2021.16.2", "impi-rt==2021.16.*",
    "/opt/oneccl", {"CCL_ATL_TRANSPORT": "ofi"})``.
    """
    lib = f"{prefix}/lib"
    return Parts(
        build=[
            comment(f"oneCCL {version} from PyPI under {prefix} (CCL_ROOT for Horovod)"),
            shell(
                pip_install(package, *([impi_rt] if impi_rt else []), extra=f"--prefix {prefix} "),
                f"rm -rf {prefix}/bin {prefix}/etc {prefix}/opt {prefix}/share {lib}/ccl "
                f"{lib}/pkgconfig {lib}/mpi {lib}/libccl.a {lib}/libmpi*",
                f"ln -sf libccl.so.1.0 {lib}/libccl.so.1",
                f"ln -sf libccl.so.1 {lib}/libccl.so",
                f"test -e {prefix}/include/oneapi/ccl.hpp",
                f"test -e {lib}/libfabric.so.1",
            ),
        ],
        runtime=[copy(lib, lib, from_stage="build"), env(**runtime_env)],
    )


# The components whose default install compiles nothing (apt packages, binary wheels, the base
# image's own), see Blocks.compiles: a stack of these alone builds without the toolchain.
WHEEL_ONLY_COMPONENTS = frozenset(
    {
        "arch",
        "os",
        "python",
        "mpi",
        "pmix",
        "ucx",
        "libfabric",
        "mpi4py",
        "numpy",
        "daal4py",
    }
)


class Blocks:
    """Build the two stages for one lock on one site."""

    def __init__(self, lock: Lock, site: Site) -> None:
        self.lock = lock
        self.site = site
        self.apt = kb()["install"]["apt"]
        self.suite = lock.build.get("debootstrap_suite")
        self.package_manager = kb()["os"][site.os].get("package_manager", "apt")
        self.os_packages = kb()["install"][self.package_manager]

    def install(self, packages: list[str]) -> Primitive:
        """One transaction of the base OS's package manager (apt, or dnf for an EL8 base)."""
        if self.package_manager == "dnf":
            if self.site.build.apt_mirror:
                raise ConfigError(
                    f"site {self.site.name}: build.apt_mirror is for apt; os {self.site.os} "
                    "installs with dnf"
                )
            return dnf_install(packages, self.os_packages["install"])
        return apt_install(packages, self.site.build.apt_mirror, self.suite)

    def parts(self) -> list[Parts]:
        """Every block's parts, in build order."""
        return [self.trust(), self.build_tools(), *self.stack_parts()]

    def stack_parts(self) -> list[Parts]:
        """The stack's blocks, in build order (after the build stage's trust and tools)."""
        return [
            # the venv and torch first: the largest install, the same for every MPI, so the
            # images of one site (and of sites that differ only in their MPI) share its layer
            self.python(),
            self.torch(),
            self.fabric(),
            self.mpi(),
            self.daal4py_mpi(),
            self.gpu_runtime(),
            self.nccl(),
            self.network_plugin(),
            self.oneccl(),
            self.horovod(),
            self.pip_packages(),
            self.standard_abi_check(),
            self.mpi_abi_soname(),
        ]

    def context(self) -> dict[str, str]:
        """The files the blocks add to the build context (relative path -> text)."""
        if self.lock.build.get("base_from"):
            return {}  # nothing of the stack is built on a prebuilt base
        return {rel: text for part in self.parts() for rel, text in part.context.items()}

    def stages(self, lock_json: str, checks: bool, two_stage: bool = False) -> list[Stage]:
        """The image's stages; ``two_stage``: a build stage and a runtime stage even where the
        stack builds in one (:meth:`one_stage`), the layout ``hpcenv bench`` measures against."""
        base = self.lock.build["base_image"]
        if self.lock.build.get("base_from"):  # first: nothing of the stack is built on it
            return [self.prebuilt_stage(base, lock_json, checks)]
        if self.lock.build.get("python_from") == "os":
            return [self.os_stage(base, lock_json, checks)]
        if self.one_stage() and not two_stage:
            return [self.wheels_stage(base, lock_json, checks)]
        parts = self.parts()
        build = self.with_pip_secret([generated_note(), *[p for part in parts for p in part.build]])
        runtime = [
            generated_note(),
            comment("runtime libraries only: no compilers, headers or build credentials"),
            self.install(self.runtime_packages(parts)),
            *[p for part in parts for p in part.runtime],
            *self.payload(lock_json, checks),
        ]
        return [Stage("build", base, build), Stage("runtime", base, runtime)]

    def runtime_packages(self, parts: list[Parts]) -> list[str]:
        """The runtime stage's OS packages: the blocks' runtime packages and the base's own."""
        return sorted(
            {pkg for part in parts for pkg in part.runtime_apt}
            | set(self.os_packages["runtime_base"])
        )

    def with_pip_secret(self, steps: list[Primitive]) -> list[Primitive]:
        """``steps`` with the build secret of a credentialed index on every shell step (each
        may run pip); as they are without one."""
        if not pip_credentials(self.site.build):
            return steps
        return [
            replace(p, secrets=(*p.secrets, PIP_CONF)) if p.kind == "shell" else p for p in steps
        ]

    def one_stage(self) -> bool:
        """Whether the stack builds in one stage (:meth:`wheels_stage`): it compiles nothing and
        its package manager has a ``wheels_only`` list (apt)."""
        return not self.compiles() and "wheels_only" in self.os_packages

    def wheels_stage(self, base: str, lock_json: str, checks: bool) -> Stage:
        """One stage for a stack that compiles nothing (apt packages and binary wheels): a
        build stage would hold no toolchain, only the venv, and copying that venv into the
        runtime stage (``COPY --from=build``, ~470 MB of small files for daal4py) was the
        slowest step of its cold build; with the build stage's apt step merged into the runtime
        stage's, the build fetches the package index once. The build inputs (CA bundle,
        pip.conf, shipped steps) are mounted for the steps that use them, never copied
        (:func:`build_inputs_mounted`); credentials stay build secrets. No compiler, header or
        ``-dev`` package is installed, as in the runtime stage of a two-stage build."""
        parts = self.stack_parts()
        apt = sorted({*self.runtime_packages(parts), *self.build_tool_packages()})
        steps = build_inputs_mounted([p for part in parts for p in part.build], self.pip_conf())
        steps = self.with_pip_secret(steps)
        runtime = [p for part in parts for p in part.runtime]
        copied = [p for p in runtime if p.from_stage is not None]
        if any(p.src != VENV for p in copied):  # only the venv is made where it is used
            raise ConfigError(
                f"{self.lock.recipe}: one stage, but the runtime copies "
                f"{', '.join(p.src for p in copied)} from a build stage"
            )
        runtime = [p for p in runtime if p.from_stage is None]
        return Stage(
            "runtime",
            base,
            [
                generated_note(),
                comment(
                    "one stage: nothing compiles (apt packages and binary wheels); build inputs "
                    "are mounted for the steps that need them, never copied"
                ),
                self.install(apt),
                comment("the build inputs' digest: a change to them builds the next steps again"),
                copy(INPUTS_DIGEST, INPUTS_DIGEST_IMAGE),
                *steps,
                *runtime,
                *self.payload(lock_json, checks),
            ],
        )

    def os_stage(self, base: str, lock_json: str, checks: bool) -> Stage:
        """One stage of the OS's own packages (recipe ``python_from: os``): nothing to build,
        so no build stage, toolchain or PyPI; a venv that sees the OS's python3-* modules."""
        comps = self.lock.components
        mpi = self.apt[comps["mpi"].implementation or "openmpi"]["runtime"]
        pkgs = [comps[n].options["package"] for n in ("mpi4py", "numpy") if n in comps]
        apt = sorted({*self.apt["runtime_base"], *mpi, *pkgs})
        return Stage(
            "runtime",
            base,
            [
                generated_note(),
                comment("python packages from the OS (python_from: os): nothing compiled"),
                apt_install(apt, self.site.build.apt_mirror, self.suite),
                shell(f"python3 -m venv --system-site-packages --without-pip {VENV}"),
                *self.payload(lock_json, checks),
            ],
        )

    def prebuilt_stage(self, base: str, lock_json: str, checks: bool) -> Stage:
        """One stage on a prebuilt base (a recipe's ``user.base``, :mod:`hpcenv.prebuilt`):
        nothing of the stack is installed again. A framework image gets the venv the user's
        packages go into, seeing its own python packages (torch among them) and the user
        ``hpc``; an image hpcenv built has both already."""
        framework = self.lock.build["base_from"] == "framework"
        first: list[Primitive] = [
            generated_note(),
            comment(f"on the prebuilt {base}: its stack as it is, the recipe's content on top"),
            Primitive("user", text="root"),
        ]
        if framework:
            first.append(shell(f"python3 -m venv --system-site-packages --without-pip {VENV}"))
            # the torch the image reports (its own local version, e.g. 2.10.0a0+b4e4ee81d3):
            # the user's pip step is held to it, whatever the release notes call it
            pin = f"{VENV}/bin/python -c {shlex.quote(BASE_PIN_CODE)} > {BASE_PINS}"
            first.append(shell("mkdir -p /opt/hpcenv", pin))
            # the base's own pip (seen through the system site) installs into the venv
            first.append(
                shell(
                    f"printf '#!/bin/sh\\nexec {VENV}/bin/python -m pip \"$@\"\\n' > {PIP}",
                    f"chmod 755 {PIP}",
                    f"{PIP} --version",
                )
            )
        return Stage("runtime", base, [*first, *self.payload(lock_json, checks, user=framework)])

    def trust(self) -> Parts:
        """Build-time CA bundle, pip configuration and wheelhouse: build stage only.

        With a credentialed index, pip reads its whole configuration from the build secret
        ``hpcenv-pip.conf`` instead (mounted for each build step, see :meth:`stages`)."""
        return Parts(
            build=[
                comment("build-time trust and package sources; never copied to the runtime stage"),
                copy(BUILD_CONTEXT, BUILD_DIR),
                env(PIP_CONFIG_FILE=self.pip_conf(), PIP_DISABLE_PIP_VERSION_CHECK="1"),
            ]
        )

    def pip_conf(self) -> str:
        """Where pip's configuration is during the build: the build inputs' ``pip.conf``, or
        the build secret of a credentialed index."""
        if pip_credentials(self.site.build):
            return f"{SECRETS_DIR}/{PIP_CONF}"
        return f"{BUILD_DIR}/pip.conf"

    def build_tools(self) -> Parts:
        return Parts(build=[self.install(self.build_tool_packages())])

    def build_tool_packages(self) -> list[str]:
        """The build stage's first OS packages: the toolchain where a step compiles, else only
        what the venv and pip need (knowledge ``install.<package manager>.wheels_only``, where
        the package manager has such a list)."""
        key = "build_tools"
        if "wheels_only" in self.os_packages and not self.compiles():
            key = "wheels_only"
        return list(self.os_packages[key])

    def compiles(self) -> bool:
        """Whether a build step compiles anything. Conservative: only a CPU stack of the
        components in :data:`WHEEL_ONLY_COMPONENTS` installed from apt or as binary wheels
        compiles nothing; any other component (torch included: its own pip step is not
        limited to wheels), an MPI not from apt (source, the host's, the standard ABI's) or
        mpi4py built against an MPI (``MPICC``) compile."""
        comps = self.lock.components
        if self.lock.build.get("accelerator", "none") != "none":
            return True
        if set(comps) - WHEEL_ONLY_COMPONENTS:
            return True
        mpi = comps.get("mpi")
        if mpi is not None and (mpi.source != "apt" or "standard_abi" in mpi.options):
            return True
        mpi4py = comps.get("mpi4py")
        return mpi4py is not None and ("MPICC" in mpi4py.options or mpi4py.source != "pip")

    def compiler_cache(self) -> dict[str, str] | None:
        """The compiler cache a compiling step uses (knowledge ``install.compiler_cache``; its
        launcher is one of the build tools): for a stack that compiles Horovod, on a base whose
        package manager has one."""
        if "horovod" not in self.lock.components:
            return None
        caches: dict[str, dict[str, str]] = kb()["install"]["compiler_cache"]["by_package_manager"]
        return caches.get(self.package_manager)

    def mpi(self) -> Parts:
        mpi = self.lock.components["mpi"]
        name = mpi.implementation or "openmpi"
        if mpi.source.startswith("host"):
            return host_mpi_build(f"{name}@{mpi.version}", mpi.options["root"])
        if "standard_abi" in mpi.options:
            return self.standard_abi_mpi()
        if mpi.source == "apt":
            pkgs = self.apt[name]
            about = comment(
                f"MPI: {name} {mpi.version} ({mpi.options.get('abi')} ABI) - {mpi.reason}"
            )
            if not self.compiles():  # nothing builds against it: its runtime packages only
                installed = comment("its runtime packages come with this stage's apt step above")
                return Parts(runtime=[about, installed], runtime_apt=list(pkgs["runtime"]))
            return Parts(
                build=[about, apt_install(pkgs["build"], self.site.build.apt_mirror, self.suite)],
                runtime_apt=list(pkgs["runtime"]),
            )
        if name == "mpich":
            return mpich_source(
                mpi.version, mpi.options["configure"], self.lock.build["jobs"], mpi.reason
            )
        url = kb()["install"]["mpi_source_url"][name].format(
            version=mpi.version, mm=major_minor(mpi.version)
        )
        pmix = self.lock.components["pmix"].version
        flags = "--with-pmix=internal" if name == "openmpi" else "--with-pm=hydra"
        return Parts(
            build=[
                comment(f"MPI: {name} {mpi.version} from source (PMIx {pmix}) - {mpi.reason}"),
                shell(
                    "mkdir -p /tmp/mpi-src",
                    f"curl -fsSL {shlex.quote(url)} | tar -x --strip-components=1 -C /tmp/mpi-src -f - "
                    + ("-j" if url.endswith("bz2") else "-z"),
                    f"cd /tmp/mpi-src && ./configure --prefix=/opt/mpi {flags} --disable-static",
                    f"make -C /tmp/mpi-src -j{self.lock.build['jobs']} install",
                    "rm -rf /tmp/mpi-src",
                ),
                env(PATH=f"/opt/mpi/bin:{VENV_PATH}"),
            ],
            runtime=[copy("/opt/mpi", "/opt/mpi", from_stage="build")],
        )

    def standard_abi_mpi(self) -> Parts:
        """The image's own MPI-5 standard ABI library (lock ``mpi.options.standard_abi``, rule
        ``mpi-abi-image``): PyPI's mpich wheel into the venv, whose data files (``mpicc_abi``,
        ``mpi_abi.h``, ``libmpi_abi.so.1``) come to the runtime stage with the venv. mpi4py is
        then built with its ``mpicc_abi`` (:meth:`pip_packages`, :meth:`standard_abi_check`)."""
        mpi = self.lock.components["mpi"]
        return Parts(
            build=[
                comment(f"MPI: MPI-5 standard ABI, {mpi.options['package']} - {mpi.reason}"),
                shell(
                    pip_install(mpi.options["package"]),
                    f"test -x {mpi.options['mpicc']}",
                    f"test -e {mpi.options['lib_dir']}/{mpi.options['standard_abi']}",
                ),
            ]
        )

    def standard_abi_check(self) -> Parts:
        """An ABI image's mpi4py links the ABI library only (no family ``libmpi.so.*``), and
        reports the image's own library before MPI_Init (rule ``mpi-abi-image``)."""
        mpi = self.lock.components["mpi"]
        if "standard_abi" not in mpi.options or "mpi4py" not in self.lock.components:
            return Parts()
        lib = mpi.options["standard_abi"]
        report = (
            "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.__file__); print(MPI.Get_library_version().splitlines()[0])"
        )
        probe = f"{VENV}/bin/python -c {shlex.quote(report)}"
        return Parts(
            build=[
                comment(f"mpi4py links {lib} only (MPI-5 standard ABI)"),
                shell(
                    f"so=$({probe} | head -1)",
                    *links_only('"$so"', lib),
                    probe,
                ),
            ]
        )

    def mpi_abi_soname(self) -> Parts:
        """Bind model over an apt MPICH that the OS names otherwise (the lock's
        ``mpi.options.abi_soname``, rule debian-mpich-soname): after every extension is built."""
        mpi = self.lock.components["mpi"]
        if "abi_soname" not in mpi.options:
            return Parts()
        data = rule("debian-mpich-soname").data
        if not self.compiles():
            return mpich_abi_soname_wheels(
                data["library"], data["abi_soname"], mpi.options["lib_dir"]
            )
        apt = apt_install(["patchelf"], self.site.build.apt_mirror, self.suite)
        return mpich_abi_soname(
            data["library"], data["abi_soname"], mpi.options["lib_dir"], list(data["unused"]), apt
        )

    def fabric(self) -> Parts:
        for fab in ("ucx", "libfabric"):
            if fab in self.lock.components:
                pkgs = self.apt[fab]
                if not self.compiles():
                    return Parts(runtime_apt=list(pkgs["runtime"]))
                return Parts(
                    build=[apt_install(pkgs["build"], self.site.build.apt_mirror, self.suite)],
                    runtime_apt=list(pkgs["runtime"]),
                )
        return Parts()

    def daal4py_mpi(self) -> Parts:
        """An MPICH-ABI side runtime for daal4py when the main MPI is Open MPI (hybrid).

        Both register the ``mpirun``/``mpi`` alternatives; Open MPI is pinned so the result
        does not depend on package priorities.
        """
        d4p = self.lock.components.get("daal4py")
        if not d4p or "side_mpi" not in d4p.options:
            return Parts()
        lib_dir = d4p.options["lib_dir"]
        soname = mpi_soname("mpich")
        pkgs = self.apt["mpich"]
        about = comment(f"daal4py side MPI: {d4p.options['side_mpi']} as {soname} in {lib_dir}")
        pin = "update-alternatives --set mpirun /usr/bin/mpirun.openmpi"
        link = (
            f"mkdir -p {lib_dir}",
            f"ln -sf \"$(find /usr/lib -name 'libmpich.so.12' | head -n 1)\" {lib_dir}/{soname}",
        )
        if not self.compiles():  # made where its runtime library is: the runtime stage
            return Parts(
                runtime=[
                    about,
                    shell(pin, *link),
                ],
                runtime_apt=list(pkgs["runtime"]),
            )
        return Parts(
            build=[
                about,
                apt_install(pkgs["build"], self.site.build.apt_mirror, self.suite),
                shell(
                    pin,
                    "update-alternatives --set mpi /usr/bin/mpicc.openmpi",
                    *link,
                ),
            ],
            runtime=[
                shell(pin),
                copy(lib_dir, lib_dir, from_stage="build"),
            ],
            runtime_apt=list(pkgs["runtime"]),
        )

    def gpu_runtime(self) -> Parts:
        """The GPU user-space runtime the base image lacks (Intel Level Zero for XPU)."""
        if self.lock.build.get("accelerator") != "xpu":
            return Parts()
        xpu = kb()["install"]["xpu_runtime"]
        return xpu_runtime(xpu["key_url"], xpu["repo"], list(xpu["packages"]))

    def network_plugin(self) -> Parts:
        plugin = self.lock.components.get("net-plugin")
        if not plugin or plugin.source != "image":
            return Parts()  # from the host at run time (see the lock's reason), or none
        return aws_ofi_nccl(plugin.version, self.lock.build["accelerator"], self.lock.build["jobs"])

    def nccl(self) -> Parts:
        nccl = self.lock.components.get("nccl")
        if not nccl or nccl.source.startswith("conda"):
            return Parts()  # none, or with torch's conda packages
        cuda = self.lock.components["cuda"].version
        ver = f"{nccl.version}-1+cuda{cuda}"
        return Parts(
            build=[apt_install([f"libnccl2={ver}", f"libnccl-dev={ver}"], None, None)],
            runtime_apt=[f"libnccl2={ver}"],
        )

    def python(self) -> Parts:
        torch = self.lock.components.get("torch")
        if torch and torch.source.startswith("conda"):
            return Parts()  # the conda environment is the venv
        return Parts(
            build=[
                comment(f"python {self.lock.components['python'].version} venv at {VENV}"),
                shell(
                    f"python3 -m venv {VENV}",
                    pip_install("--upgrade", "pip", "setuptools", "wheel"),
                ),
                env(PATH=VENV_PATH),
            ],
            runtime=[copy(VENV, VENV, from_stage="build")],
        )

    def torch(self) -> Parts:
        torch = self.lock.components.get("torch")
        if not torch:
            return Parts()
        variant = torch.options["variant"]
        if torch.source.startswith("conda"):
            conda = kb()["install"]["conda"][self.lock.arch]
            cuda = self.lock.components.get("cuda")
            build = f"cuda{cuda.version}*" if cuda else "cpu*"
            python = self.lock.components["python"].version
            return Parts(
                build=[
                    comment(f"torch {torch.version} for {self.lock.arch} from Open-CE (conda)"),
                    shell(
                        f"curl -fsSL -o /tmp/miniforge.sh {shlex.quote(conda['installer'])}",
                        "bash /tmp/miniforge.sh -b -p /opt/conda",
                        "rm /tmp/miniforge.sh",
                        f"/opt/conda/bin/conda create -y -p {VENV} -c {shlex.quote(conda['channel'])} "
                        f"-c conda-forge python={python} "
                        + shlex.quote(f"pytorch={torch.version}={build}"),
                        "/opt/conda/bin/conda clean -afy",
                    ),
                    env(PATH=VENV_PATH),
                ],
                runtime=[copy(VENV, VENV, from_stage="build")],
            )
        index = ""
        cuda = self.lock.components.get("cuda")
        cuda_nodot = cuda.version.replace(".", "") if cuda else ""
        if "index" in torch.options:
            index = f"--extra-index-url {shlex.quote(torch.options['index'])} "
        elif not self.site.build.pip_find_links:
            tmpl = kb()["install"]["torch_index"][variant]
            rocm = self.lock.components.get("rocm")
            url = tmpl.format(cuda_nodot=cuda_nodot, rocm=major_minor(rocm.version) if rocm else "")
            index = f"--extra-index-url {shlex.quote(url)} "
        labels = kb()["install"]["torch_local_label"].get(self.site.arch, {})
        label = labels.get(variant, "").format(cuda_nodot=cuda_nodot)
        return Parts(
            build=[
                comment(f"torch {torch.version} ({variant}): {torch.reason}"),
                shell(pip_install(f"torch=={torch.version}{label}", extra=index)),
            ]
        )

    def oneccl(self) -> Parts:
        """oneCCL from PyPI (a recipe's ``oneccl``); torch-ccl's bundled one needs no step."""
        ccl = self.lock.components.get("oneccl")
        if not ccl or "prefix" not in ccl.options:
            return Parts()
        runtime_env = {k: v for k, v in ccl.options.items() if k.startswith("CCL_")}
        return oneccl_pypi(
            ccl.version,
            ccl.options["package"],
            ccl.options.get("impi_rt", ""),
            ccl.options["prefix"],
            runtime_env,
        )

    def horovod(self) -> Parts:
        hvd = self.lock.components.get("horovod")
        if not hvd:
            return Parts()
        flags = {k: v for k, v in sorted(hvd.options.items()) if k.startswith(("HOROVOD_", "CCL_"))}
        env_words = " ".join(f"{k}={v}" for k, v in flags.items())
        mpi = self.lock.components["mpi"]
        if mpi.source.startswith("host"):  # site-build: CMake finds the host's mpicxx first
            env_words = f'PATH="{mpi.options["root"]}/bin:$PATH" {env_words}'
        if "CXX" in hvd.options:  # the MPI-5 ABI: compiled and linked by the ABI wrappers
            env_words = f"CC={hvd.options['CC']} CXX={hvd.options['CXX']} {env_words}"

        src = f"/tmp/horovod-{hvd.version}"
        cmds = [
            pip_install(*kb()["install"]["horovod_build_deps"]),
            f"{PIP} download --no-cache-dir --no-deps --no-binary :all: -d /tmp horovod=={hvd.version}",
            f"tar -xzf /tmp/horovod-{hvd.version}.tar.gz -C /tmp",
        ]
        if "cxx17_patch" in hvd.options:
            cmds.append(
                "sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "
                f"{src}/CMakeLists.txt {src}/horovod/torch/CMakeLists.txt"
            )
            cmds.append(f"grep -q 'CMAKE_CXX_STANDARD 17' {src}/horovod/torch/CMakeLists.txt")
        if "release_build" in hvd.options:  # same -O3, no -g: a fifth of the compile, 60 MB
            cmds.append(f"sed -i \"s/else 'RelWithDebInfo'/else 'Release'/\" {src}/setup.py")
            cmds.append(f"grep -q \"else 'Release'\" {src}/setup.py")
        build = f"{PIP} install --no-cache-dir --no-build-isolation {src}"
        make = f"MAKEFLAGS=-j{self.lock.build['jobs']} {env_words}"
        after = [
            f"rm -rf {src} /tmp/horovod-{hvd.version}.tar.gz",
            f"{VENV}/bin/horovodrun --check-build",
        ]
        if "standard_abi" in mpi.options:  # its MPI operations link the ABI library only
            lib = mpi.options["standard_abi"]
            ops = f"{VENV}/lib/python3*/site-packages/horovod/torch/mpi_lib_v2.*.so"
            after += links_only(ops, lib)
        if flags.get("HOROVOD_CPU_OPERATIONS") == "CCL":
            after.append(
                f"{VENV}/bin/python -c "
                + shlex.quote("import horovod.torch as h; assert h.ccl_built(), 'no CCL'")
            )
        steps = [comment(f"Horovod {hvd.version}: {hvd.reason}")]
        cache = self.compiler_cache()
        if not cache:
            return Parts(build=[*steps, shell(*cmds, f"{make} {build}", *after)])
        # A Dockerfile keeps the compiler cache between builds (an engine cache mount, never in
        # a layer): the images that differ only in their MPI or CPU operations compile most of
        # Horovod (gloo, the torch adapter) once. A definition builds without it.
        cache_env = f"CCACHE_DIR={cache['dir']}"
        launchers = " ".join(f"{name}={cache['launcher']}" for name in cache["cmake_env"].split())
        cached = Primitive(
            "shell",
            commands=(
                *cmds,
                f"{cache_env} {cache['launcher']} --zero-stats",
                f"{make} {cache_env} {launchers} {build}",
                f"{cache_env} {cache['launcher']} --show-stats",
                *after,
            ),
            caches=((cache["id"], cache["dir"]),),
            only="docker",
        )
        plain = replace(shell(*cmds, f"{make} {build}", *after), only="singularity")
        return Parts(build=[*steps, cached, plain])

    def pip_packages(self) -> Parts:
        reqs: list[str] = []
        index = ""
        comps = self.lock.components
        steps: list[Primitive] = []
        if "mpi4py" in comps and "MPICC" in comps["mpi4py"].options:
            mpicc = comps["mpi4py"].options["MPICC"]
            # the interpreter's flags, then -g0: setuptools takes CFLAGS in their place
            cflags = ""
            if "CFLAGS" in comps["mpi4py"].options:
                cflags = f'CFLAGS="$({VENV}/bin/python3 -c {shlex.quote(PY_CFLAGS)}) -g0" '
            steps.append(
                shell(
                    f'MPICC="{mpicc}" {cflags}'
                    + pip_install(f"mpi4py=={comps['mpi4py'].version}", extra="--no-binary mpi4py ")
                )
            )
        elif "mpi4py" in comps:
            reqs.append(f"mpi4py=={comps['mpi4py'].version}")
        if "daal4py" in comps:
            reqs += [comps["daal4py"].options["package"], "scikit-learn"]
        for name, dist in (
            ("torch-ccl", "oneccl_bind_pt"),
            ("ipex", "intel_extension_for_pytorch"),
        ):
            if name in comps:
                reqs.append(f"{dist}=={comps[name].version}")
                index = f"--extra-index-url {shlex.quote(comps[name].options['index'])} "
        if reqs:
            # a stack built without the toolchain takes wheels only: a pin without one stops
            # pip at resolution, not in a compiler that is not there
            wheels = "" if self.compiles() else "--only-binary=:all: "
            steps.append(shell(pip_install(*reqs, extra=wheels + index)))
        if not steps:
            return Parts()
        return Parts(build=[comment("python packages"), *steps])

    def payload(self, lock_json: str, checks: bool, user: bool = True) -> list[Primitive]:
        """Lock, labels, checks, environment and the non-root user of the runtime stage."""
        lock = self.lock
        labels = [
            ("org.opencontainers.image.title", f"hpcenv {lock.recipe} for {lock.site}"),
            (
                "org.opencontainers.image.description",
                f"hpcenv recipe {lock.recipe}, site {lock.site}",
            ),
            ("io.hpcenv.site", lock.site),
            ("io.hpcenv.recipe", lock.recipe),
            ("io.hpcenv.platform", lock.build["platform"]),
            (
                "io.hpcenv.lock",
                json.dumps(json.loads(lock_json), sort_keys=True, separators=(",", ":")),
            ),
        ]
        for name in sorted(lock.components):
            c = lock.components[name]
            labels.append(
                (
                    f"io.hpcenv.component.{name}",
                    f"{c.implementation}@{c.version}" if c.implementation else c.version,
                )
            )
        framework = lock.build.get("base_from") == "framework"
        out: list[Primitive] = [
            (env_on_base if framework else env)(
                PATH=f"{VENV}/bin:$PATH" if framework else VENV_PATH,
                HPCENV_LOCK="/opt/hpcenv/stack.lock.json",
                HPCENV_SITE=lock.site,
                HPCENV_RECIPE=lock.recipe,
                OMPI_MCA_plm_rsh_agent="",
            ),
            copy("stack.lock.json", "/opt/hpcenv/stack.lock.json"),
        ]
        d4p = lock.components.get("daal4py")
        if d4p and "lib_dir" in d4p.options:
            out.append(env(HPCENV_MPICH_ABI_LIB=d4p.options["lib_dir"]))
        mpi = lock.components.get("mpi")
        if mpi and "standard_abi" in mpi.options:  # the bind preflight looks for it there
            out.append(env(HPCENV_MPI_ABI_LIB=mpi.options["lib_dir"]))
        if checks:
            out.append(copy("checks", "/opt/hpcenv/checks"))
        # hpcenv's own bases get uid 1000; a framework image's next free uid, because Ubuntu
        # 24.04-based images already hold uid 1000 (user ``ubuntu``: jupyterhub/repo2docker#1346,
        # read 2026-11-24), and a clash fails the build
        uid = "--uid 1000 " if lock.build.get("base_from") != "framework" else ""
        useradd = f"useradd --create-home {uid}--shell /bin/bash {lock.build['user']}"
        out += [
            shell(
                *([useradd] if user else []),
                f"{VENV}/bin/python -c {shlex.quote(self.import_check())}",
            ),
            *self.user_layers(),
            Primitive("label", pairs=(*labels, *lock.user_content.get("labels", {}).items())),
            Primitive("user", text=lock.build["user"]),
            Primitive(
                "workdir", text=lock.user_content.get("workdir") or f"/home/{lock.build['user']}"
            ),
        ]
        return out

    def user_layers(self) -> list[Primitive]:
        """A recipe's user content (the lock's ``user_content``), after the matched stack so
        that its layers stay cached: apt packages, pip packages under the matched stack's
        constraints (then the stack's imports, torch's version and each installed torch
        companion's compiled operator are checked), files, environment.

        The pip step sees the build inputs (pip.conf, CA bundle, wheelhouse) and the
        constraints only while it runs, so the runtime image keeps none of them."""
        user = self.lock.user_content
        if not user:
            return []
        out = [comment("the recipe's user content: late layers, after the matched stack")]
        if user.get("apt"):
            out.append(apt_install(list(user["apt"]), self.site.build.apt_mirror, self.suite))
        if user.get("pip"):
            index = user.get("extra_index_url")
            extra = f"-c {USER_DIR}/constraints.txt "
            framework = self.lock.build.get("base_from") == "framework"
            if framework:
                extra += f"-c {BASE_PINS} "
            if index:
                extra += f"--extra-index-url {shlex.quote(index)} "
            pip_conf = f"{BUILD_DIR}/pip.conf"
            secrets: tuple[str, ...] = ()
            if pip_credentials(self.site.build):
                pip_conf, secrets = f"{SECRETS_DIR}/{PIP_CONF}", (PIP_CONF,)
            torch = self.lock.components.get("torch")
            check = self.import_check()
            if torch and framework:
                check += (
                    f"; assert 'torch==' + torch.__version__ == open({BASE_PINS!r}).read().strip(), "
                    "'torch changed: ' + torch.__version__"
                )
            elif torch:
                check += (
                    f"; assert torch.__version__.split('+')[0] == {torch.version.split('+')[0]!r}, "
                    "'torch changed: ' + torch.__version__"
                )
            check += (
                "; import importlib.util as u"
                f"; [exec(c, {{}}) for m, c in {companion_checks()!r}.items() if u.find_spec(m)]"
            )
            out.append(
                Primitive(
                    "shell",
                    commands=(
                        f"PIP_CONFIG_FILE={pip_conf} PIP_DISABLE_PIP_VERSION_CHECK=1 "
                        + pip_install(*user["pip"], extra=extra),
                        f"{VENV}/bin/python -c {shlex.quote(check)}",
                    ),
                    secrets=secrets,
                    mounts=((BUILD_CONTEXT, BUILD_DIR), (USER_CONTEXT, USER_DIR)),
                )
            )
        files = user.get("files", [])
        for f in files:
            out.append(Primitive("copy", src=f["src"], dst=f["dest"], only="docker"))
        if files:
            cmds = []
            for f in files:
                src = f"{USER_DIR}/{f['src'].removeprefix(USER_CONTEXT + '/')}"
                dest = shlex.quote(f["dest"])
                if f["kind"] == "folder":
                    cmds += [f"mkdir -p {dest}", f"cp -a {shlex.quote(src)}/. {dest}/"]
                else:
                    cmds += [
                        f'mkdir -p "$(dirname {dest})"',
                        f"cp -a {shlex.quote(src)} {dest}",
                    ]
            out.append(
                Primitive(
                    "shell",
                    commands=tuple(cmds),
                    mounts=((USER_CONTEXT, USER_DIR),),
                    only="singularity",
                )
            )
        if user.get("env"):
            out.append(env(**user["env"]))
        return out

    def import_check(self) -> str:
        mods = [
            m
            for n, m in (
                ("torch", "torch"),
                ("horovod", "horovod.torch"),
                ("mpi4py", "mpi4py"),
                ("numpy", "numpy"),
                ("daal4py", "daal4py"),
            )
            if n in self.lock.components
        ]
        lines = [f"import {m}" for m in mods] or ["import sys"]
        hvd = self.lock.components.get("horovod")
        if hvd and hvd.options.get("HOROVOD_CPU_OPERATIONS") == "CCL":
            # the runtime stage resolves libccl.so.1 (Horovod's RUNPATH) and finds CCL built
            lines.append("assert horovod.torch.ccl_built()")
        return "; ".join(lines)

    def test_commands(self) -> list[str]:
        return [
            f"{VENV}/bin/python -c {shlex.quote(self.import_check() + '; print(' + repr('hpcenv: imports ok') + ')')}"
        ]


def generated_note() -> Primitive:
    return comment("hpcenv: generated; edit the recipe or site, then re-render")
