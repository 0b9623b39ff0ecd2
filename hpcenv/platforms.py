"""CPU architectures: a site's name for one, Debian's, the OCI platform, and how this host runs it.

Why: a site file says ``arch: aarch64`` (``uname -m``), debootstrap wants ``--arch=arm64``
(Debian's port names: wiki.debian.org/SupportedArchitectures, read 2026-11-24), podman wants
``--platform linux/arm64`` and records ``Architecture: arm64`` (OCI image-spec config.md,
``architecture`` uses GOARCH values; image-index.md ``platform``). The three spellings were
to be kept apart in one table, and the answer to "can this host run that image?" in one function.

An image of another architecture runs here only through the kernel's binfmt_misc with a
``qemu-<arch>`` handler; Debian's ``qemu-user-static`` (with binfmt-support) registers them with
the ``F`` flag so they work inside containers and chroots (kernel
Documentation/admin-guide/binfmt-misc.rst; measured here: /work/shared/notes/platform.md,
"Foreign architectures under emulation"). ``scripts/emulation-setup.sh`` sets that up.
``HPCENV_BINFMT_DIR`` points elsewhere than ``/proc/sys/fs/binfmt_misc`` (tests).

This module imports nothing from hpcenv but its errors, so any module may use it.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from hpcenv.errors import EnvironmentProblem

BINFMT_ENV = "HPCENV_BINFMT_DIR"
BINFMT_DIR = "/proc/sys/fs/binfmt_misc"
SETUP_HINT = "run scripts/emulation-setup.sh (make host) to register qemu-user-static"


@dataclass(frozen=True)
class Arch:
    """One architecture under its three names, and the binfmt handler that emulates it."""

    name: str  # uname -m, the site file's ``arch``
    debian: str  # dpkg / debootstrap --arch
    oci: str  # podman --arch, image config ``Architecture``

    @property
    def platform(self) -> str:
        return f"linux/{self.oci}"

    @property
    def handler(self) -> str:
        return f"qemu-{self.name}"


ARCHES = {
    a.name: a
    for a in (
        Arch("x86_64", "amd64", "amd64"),
        Arch("aarch64", "arm64", "arm64"),
        Arch("ppc64le", "ppc64el", "ppc64le"),
    )
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le"}


def arch(name: str) -> Arch:
    """The architecture called ``name`` in any of its spellings (``aarch64``, ``arm64``)."""
    key = _ALIASES.get(name, name)
    if key not in ARCHES:
        known = ", ".join(ARCHES)
        raise EnvironmentProblem(f"unknown architecture {name!r}; hpcenv knows {known}")
    return ARCHES[key]


def host_arch() -> Arch:
    """This machine's architecture."""
    return arch(platform.machine())


def binfmt_dir() -> Path:
    return Path(os.environ.get(BINFMT_ENV) or BINFMT_DIR)


def emulator(target: Arch) -> Path | None:
    """The enabled binfmt_misc handler that runs ``target`` binaries here, else None."""
    path = binfmt_dir() / target.handler
    try:
        text = path.read_text()
    except OSError:
        return None
    return path if text.splitlines()[:1] == ["enabled"] else None


def runs_here(target: Arch) -> str | None:
    """``native``, ``emulated`` (qemu-user-static) or None (this host cannot run it)."""
    if target == host_arch():
        return "native"
    return "emulated" if emulator(target) is not None else None


def require_runnable(target: Arch, what: str) -> str:
    """``native`` or ``emulated``; else EnvironmentProblem in one line naming ``what``."""
    how = runs_here(target)
    if how is None:
        here = host_arch().name
        raise EnvironmentProblem(
            f"{what} is {target.name} and this host is {here}, with no {target.handler} "
            f"binfmt handler in {binfmt_dir()}; {SETUP_HINT}"
        )
    return how


def how_built(target: Arch) -> str:
    """How a build for ``target`` runs here, in words (``build --dry-run``)."""
    if target == host_arch():
        return "natively on this host"
    state = "handler present" if emulator(target) else f"handler missing: {SETUP_HINT}"
    return f"on this host under emulation (qemu-user-static, {target.handler}; {state})"
