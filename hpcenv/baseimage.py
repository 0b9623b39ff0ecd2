"""A Debian base image made without a registry: debootstrap -> cached rootfs tarball -> import.

Hosts that cannot pull ``debian:bookworm`` still reach a Debian mirror through apt, so hpcenv
bootstraps a minbase root filesystem itself, keeps it as a tarball in its cache and imports it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from hpcenv import naming, platforms
from hpcenv.credentials import (
    clean_url,
    has_credentials,
    netrc_entry,
    redact,
    secret_files,
    strip_userinfo,
)
from hpcenv.engines import HOST_SETUP_HINT, Engine, StepCallback, get_engine, stream_command
from hpcenv.errors import BuildError, ConfigError, EnvironmentProblem
from hpcenv.paths import cache_dir, file_lock

DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_CHANGES = ('CMD ["/bin/bash"]',)


def default_tag(suite: str = DEFAULT_SUITE, arch: str = "amd64") -> str:
    return naming.base_tag(suite=suite, arch=arch)


def base_cache_dir() -> Path:
    path = cache_dir() / "base"
    path.mkdir(parents=True, exist_ok=True)
    return path


def rootfs_tarball(suite: str = DEFAULT_SUITE, arch: str = "amd64") -> Path:
    """Where the cleaned minbase rootfs of ``suite`` is cached (``arch``: Debian's name;
    amd64 keeps the name every existing cache has)."""
    return base_cache_dir() / (
        f"{suite}-minbase.tar" if arch == "amd64" else f"{suite}-{arch}-minbase.tar"
    )


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
        if fields:
            yield fields


def _apt_sources(apt_dir: Path) -> list[tuple[str, list[str]]]:
    """(uri, suites) of every ``deb`` source, deb822 files first, then one-line lists."""
    found: list[tuple[str, list[str]]] = []
    parts = apt_dir / "sources.list.d"
    deb822 = sorted(parts.glob("*.sources")) if parts.is_dir() else []
    deb822.sort(key=lambda p: p.name != "debian.sources")
    for path in deb822:
        for st in _deb822_stanzas(path.read_text(errors="replace")):
            if "deb" not in st.get("types", "deb").split() or st.get("enabled", "yes") == "no":
                continue
            for uri in st.get("uris", "").split():
                found.append((uri, st.get("suites", "").split()))
    lists = [apt_dir / "sources.list"]
    lists += sorted(parts.glob("*.list")) if parts.is_dir() else []
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                found.append((words[1], [words[2]]))
    return found


def default_mirror(suite: str = DEFAULT_SUITE, apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's Debian mirror for ``suite`` (else any Debian archive URI, else deb.debian.org)."""
    sources = [(u, s) for u, s in _apt_sources(apt_dir) if u.startswith(("http://", "https://"))]
    for uri, suites in sources:
        if suite in suites:
            return clean_url(uri.rstrip("/"))
    for uri, _ in sources:
        if uri.rstrip("/").endswith("/debian"):
            return clean_url(uri.rstrip("/"))
    return DEFAULT_MIRROR


def forget_credentials(rootfs: Path) -> None:
    """debootstrap writes the mirror it used, credentials included, into the new system's
    sources.list: keep the mirror, drop the ``user:password@``."""
    for path in [rootfs / "etc/apt/sources.list", *rootfs.glob("etc/apt/sources.list.d/*")]:
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            path.write_text(strip_userinfo(text), encoding="utf-8", errors="surrogateescape")


def _unmount_under(root: Path) -> None:
    """Lazily unmount anything a failed debootstrap left mounted inside ``root``."""
    prefix = str(root.resolve()) + "/"
    mounts = Path("/proc/mounts").read_text().splitlines() if Path("/proc/mounts").exists() else []
    targets = [m.split()[1] for m in mounts if len(m.split()) > 1]
    for target in sorted((t for t in targets if t.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)


class _Phases:
    """Reports the phases of making a base image like build steps."""

    def __init__(self, total: int, on_step: StepCallback | None) -> None:
        self.total, self.on_step = total, on_step
        self.index = 0
        self.started: float | None = None

    def start(self, text: str) -> None:
        now = time.monotonic()
        previous = None if self.started is None else now - self.started
        self.index += 1
        self.started = now
        if self.on_step is not None:
            self.on_step(self.index, self.total, text, previous)


def bootstrap_rootfs(
    suite: str,
    mirror: str,
    tarball: Path,
    *,
    log_path: Path,
    arch: str | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Path:
    """``debootstrap --variant=minbase`` into a temp dir, drop apt caches, tar it to ``tarball``.

    ``arch`` (any spelling, default this host's): another architecture than the host's is
    bootstrapped in two stages, ``--arch=X --foreign`` (downloads and unpacks, nothing of the
    target runs) then ``/debootstrap/debootstrap --second-stage`` in a chroot, where the target's
    binaries run under qemu-user-static through binfmt_misc (debootstrap(8): --foreign,
    --second-stage). ``on_phase`` hears each phase as it starts (three, four when foreign);
    output is appended to ``log_path``.
    """
    target = platforms.arch(arch) if arch else platforms.host_arch()
    foreign = target != platforms.host_arch()
    if foreign:
        platforms.require_runnable(target, f"the {suite} base image for {target.debian}")
    if shutil.which("debootstrap") is None:
        raise EnvironmentProblem(f"debootstrap is not installed; {HOST_SETUP_HINT}")
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "debootstrap needs root to make the base image; run once as root, or put a rootfs "
            f"tarball at {tarball}"
        )
    phase = on_phase or (lambda _text: None)
    work = Path(tempfile.mkdtemp(prefix=f"rootfs-{suite}-", dir=tarball.parent))
    rootfs = work / "rootfs"
    try:
        extra = [f"--arch={target.debian}", "--foreign"] if foreign else []
        phase(redact(" ".join(["debootstrap", *extra, "--variant=minbase", suite, mirror])))
        argv = ["debootstrap", *extra, "--variant=minbase", suite, str(rootfs), clean_url(mirror)]
        # The mirror's credentials reach wget (debootstrap's downloader) as $HOME/.netrc in a
        # private folder, never on a command line (``ps`` shows every user's arguments).
        netrc = {".netrc": netrc_entry(mirror)} if has_credentials(mirror) else {}
        with secret_files(netrc, cache_dir() / "secrets") as secrets:
            env = {"HOME": str(secrets[".netrc"].parent)} if secrets else None
            rc, tail = stream_command(argv, log_path, on_line=on_line, append=True, env=env)
        if rc != 0:
            errors = [ln for ln in tail if ln.startswith("E:")] or tail[-1:]
            detail = errors[-1] if errors else ""
            raise BuildError(redact(" ".join(argv)), log_path, detail)
        if foreign:
            phase(f"debootstrap --second-stage for {target.debian} under qemu-user-static")
            argv = ["chroot", str(rootfs), "/debootstrap/debootstrap", "--second-stage"]
            rc, tail = stream_command(argv, log_path, on_line=on_line, append=True)
            if rc != 0:
                detail = ([ln for ln in tail if ln.startswith("E:")] or tail[-1:] or [""])[-1]
                raise BuildError(" ".join(argv), log_path, detail)
        phase("remove apt archives and lists, and mirror credentials")
        forget_credentials(rootfs)
        for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
            for item in rootfs.glob(pattern):
                if item.is_dir() and not item.is_symlink():
                    shutil.rmtree(item)
                else:
                    item.unlink()
        phase(f"tar rootfs to {tarball}")
        partial = tarball.with_name(tarball.name + ".partial")
        argv = ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."]
        rc, tail = stream_command(argv, log_path, on_line=on_line, append=True)
        if rc != 0:
            partial.unlink(missing_ok=True)
            raise BuildError("tar rootfs", log_path, tail[-1] if tail else "")
        partial.replace(tarball)
    finally:
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def ensure_base_image(
    suite: str = DEFAULT_SUITE,
    mirror: str | None = None,
    tag: str | None = None,
    engine: Engine | None = None,
    *,
    arch: str | None = None,
    log_path: Path | None = None,
    on_step: StepCallback | None = None,
    on_line: Callable[[str], None] | None = None,
    on_wait: Callable[[Path], None] | None = None,
) -> str:
    """Make sure the base image ``tag`` exists and return it.

    Order: reuse the image; else import the cached rootfs tarball; else debootstrap one
    (mirror: argument, else the host's apt sources, else deb.debian.org). A file lock keeps
    two callers from bootstrapping at once. ``arch`` (any spelling, default this host's): the
    base's architecture; the rootfs and the default tag carry it when it is not amd64, and an
    existing ``tag`` of another architecture is refused rather than built upon. ``on_wait`` is
    told the engine storage's lock file when the import has to wait for another build.
    """
    engine = engine or get_engine()
    target = platforms.arch(arch) if arch else platforms.host_arch()
    tag = tag or default_tag(suite, target.debian)
    if engine.image_exists(tag):
        return _same_arch(engine, tag, target)
    tarball = rootfs_tarball(suite, target.debian)
    log_path = log_path or cache_dir() / "logs" / f"base-{tarball.stem}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(tarball.with_name(tarball.name + ".lock")):
        if engine.image_exists(tag):
            return _same_arch(engine, tag, target)
        log_path.write_text(f"# hpcenv base image {tag} ({suite}, {target.debian})\n")
        need_rootfs = not tarball.is_file()
        foreign = target != platforms.host_arch()
        phases = _Phases((5 if foreign else 4) if need_rootfs else 1, on_step)
        if need_rootfs:
            mirror = mirror or default_mirror(suite)
            bootstrap_rootfs(
                suite,
                mirror,
                tarball,
                log_path=log_path,
                arch=target.name,
                on_phase=phases.start,
                on_line=on_line,
            )
        phases.start(f"{engine.exe} import {tarball.name} {tag}")
        with log_path.open("a") as log:
            log.write(f"$ {engine.exe} import {tarball} {tag}\n")
        engine.import_rootfs(
            tarball,
            tag,
            changes=BASE_CHANGES,
            arch=target.oci if foreign else None,
            on_wait=on_wait,
        )
    return tag


def _same_arch(engine: Engine, tag: str, target: platforms.Arch) -> str:
    have = engine.image_arch(tag)
    if have and platforms.arch(have) != target:
        raise ConfigError(
            f"base image {tag} is {have}, the site builds for {target.oci}; "
            f"set build.base_image to {naming.base_tag(suite=DEFAULT_SUITE, arch=target.debian)} "
            "(hpcenv bootstraps it) or to a base of that architecture"
        )
    return tag
