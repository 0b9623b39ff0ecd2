"""Apptainer behind one API: the host's ``apptainer``/``singularity``, else a helper container.

Debian bookworm has no Apptainer package and sid's needs a newer glibc, so on such hosts hpcenv
builds ``localhost/hpcenv-apptainer:1`` (sid's apptainer on the bookworm base, see
``data/apptainer-helper/Containerfile``) and runs every apptainer command in it with
``podman run --rm --privileged``. Host paths are mounted at the same path inside, so SIF, archive
and def paths mean the same thing in both modes. Plain root ``%post`` builds fail in the helper
(a capability it cannot have), so def files are built there with ``--fakeroot``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from hpcenv.credentials import SECRETS_DIR
from hpcenv.engines import engine_env, get_engine, stream_command
from hpcenv.errors import BuildError, ConfigError, EnvironmentProblem
from hpcenv.naming import HELPER_TAG, SquashfsCompressor
from hpcenv.paths import cache_dir, file_lock, package_dir

HELPER_SCRATCH = "/hpcenv-scratch"
HASH_LABEL = "org.hpcenv.containerfile"
IMAGES_ENV = "HPCENV_APPTAINER_IMAGES"
BINDS_ENV = "HPCENV_APPTAINER_BINDS"
ArchiveFormat = Literal["oci-archive", "docker-archive"]
_LOCAL_BOOTSTRAPS = {"localimage", "oci-archive", "docker-archive", "oci", "docker-daemon"}


@dataclass(frozen=True)
class Bind:
    """A host path made visible inside the container (``apptainer --bind SRC:DST[:ro]``)."""

    source: Path
    target: str
    read_only: bool = False

    @classmethod
    def parse(cls, text: str) -> Bind:
        """``SRC[:DST[:ro|rw]]``; DST defaults to SRC."""
        parts = text.strip().split(":")
        if not parts[0] or len(parts) > 3 or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ConfigError(f"bad bind {text!r}: expected SRC[:DST[:ro|rw]]")
        source = Path(parts[0]).expanduser().resolve()
        target = parts[1] if len(parts) > 1 and parts[1] else str(source)
        return cls(source, target, len(parts) == 3 and parts[2] == "ro")

    def spec(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


def helper_containerfile() -> Path:
    return package_dir() / "data" / "apptainer-helper" / "Containerfile"


def helper_hash() -> str:
    """Short digest of the helper's Containerfile; a changed file means a rebuilt helper."""
    return hashlib.sha256(helper_containerfile().read_bytes()).hexdigest()[:16]


def scratch_dir() -> Path:
    """Apptainer's temporary and cache space (big: whole root filesystems are unpacked here)."""
    path = cache_dir() / "apptainer"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _covering_mounts(paths: Iterable[Path]) -> list[Path]:
    """The directories to mount so every path is visible, without nested duplicates."""
    mounts: list[Path] = []
    for path in sorted({p.resolve() for p in paths}):
        if not any(path == m or m in path.parents for m in mounts):
            mounts.append(path)
    return mounts


def def_host_paths(text: str, workdir: Path) -> list[Path]:
    """Host paths a def file reads: local bootstrap sources and ``%files`` sources."""
    found: list[Path] = []
    bootstrap = ""
    section = ""
    from_stage = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.lower().startswith("bootstrap:"):  # a new stage's header
            section = ""
        if line.startswith("%"):
            section = line.split()[0]
            from_stage = len(line.split()) > 1  # "%files from build"
            continue
        if not section:
            key, _, value = line.partition(":")
            key, value = key.strip().lower(), value.strip()
            if key == "bootstrap":
                bootstrap = value.lower()
            elif key == "from" and bootstrap in _LOCAL_BOOTSTRAPS and value:
                candidate = Path(value)
                if not candidate.exists() and ":" in value:  # oci-archive PATH:TAG
                    candidate = Path(value.rsplit(":", 1)[0])
                found.append(candidate if candidate.is_absolute() else workdir / candidate)
        elif section == "%files" and not from_stage:
            source = Path(line.split()[0])
            found.append(source if source.is_absolute() else workdir / source)
    return [p.parent if p.is_file() or not p.exists() else p for p in found]


def _failure_line(tail: Sequence[str]) -> str:
    for line in reversed(tail):
        if line.startswith(("FATAL", "ERROR", "Error:")):
            return line.strip()
    return next((ln.strip() for ln in reversed(tail) if ln.strip()), "no output")


class Apptainer:
    """An Apptainer (or SingularityCE) command line: on the host, or in the helper container.

    ``executable=None`` picks ``apptainer`` or ``singularity`` from ``PATH``, else the helper.
    """

    def __init__(
        self,
        executable: str | None = None,
        *,
        helper_image: str = HELPER_TAG,
        podman: str = "podman",
    ) -> None:
        self.executable = executable or shutil.which("apptainer") or shutil.which("singularity")
        self.helper_image = helper_image
        self.podman = podman
        self._helper_ready = False

    @property
    def in_helper(self) -> bool:
        return self.executable is None

    def __repr__(self) -> str:
        where = f"helper {self.helper_image}" if self.in_helper else self.executable
        return f"Apptainer({where})"

    # -- command construction (pure) --------------------------------------------------------
    def command(
        self,
        args: Sequence[str],
        *,
        paths: Iterable[Path] = (),
        workdir: Path | None = None,
        extra: Sequence[str] = (),
    ) -> list[str]:
        """The argv that runs ``apptainer ARGS``; in the helper, ``paths`` are mounted 1:1."""
        if not self.in_helper:
            assert self.executable is not None
            return [self.executable, *args]
        return self.helper_command(["apptainer", *args], paths=paths, workdir=workdir, extra=extra)

    def helper_command(
        self,
        argv: Sequence[str],
        *,
        paths: Iterable[Path] = (),
        workdir: Path | None = None,
        extra: Sequence[str] = (),
    ) -> list[str]:
        """``podman run --rm --privileged`` of the helper with ``paths`` mounted at themselves."""
        cmd = [self.podman, "run", "--rm", "--privileged", "--network", "host"]
        for mount in _covering_mounts(paths):
            cmd += ["-v", f"{mount}:{mount}"]
        if workdir is not None:
            cmd += ["-w", str(workdir)]
        return [*cmd, *extra, self.helper_image, *argv]

    def exec_argv(
        self,
        sif: Path,
        argv: Sequence[str],
        binds: Sequence[Bind] = (),
        env: Mapping[str, str] | None = None,
    ) -> list[str]:
        """``apptainer exec [--bind S:D] [--env K=V] SIF ARGV`` (wrapped for the helper)."""
        sif = Path(sif).resolve()
        args = ["exec"]
        for bind in binds:
            args += ["--bind", bind.spec()]
        for key, value in (env or {}).items():
            args += ["--env", f"{key}={value}"]
        paths = [sif.parent, *(b.source for b in binds)]
        return self.command([*args, str(sif), *argv], paths=paths)

    # -- running ----------------------------------------------------------------------------
    def ensure_helper(self, log_path: Path | None = None) -> str:
        """Build the helper image unless it exists from the current Containerfile (its hash is
        a label); a no-op with a host apptainer."""
        if not self.in_helper:
            return ""
        if self._helper_ready:
            return self.helper_image
        engine = get_engine("podman")
        digest = helper_hash()

        def current() -> bool:
            if not engine.image_exists(self.helper_image):
                return False
            return engine.labels(self.helper_image).get(HASH_LABEL) == digest

        if not current():
            from hpcenv.baseimage import default_mirror, ensure_base_image

            log_path = log_path or cache_dir() / "logs" / "apptainer-helper.log"
            with file_lock(scratch_dir() / "helper.lock"):
                if not current():
                    containerfile = helper_containerfile()
                    args = {"BASE": ensure_base_image(), "APT_MIRROR": default_mirror("sid")}
                    engine.build(
                        containerfile.parent,
                        containerfile,
                        self.helper_image,
                        log_path=log_path,
                        build_args={**args, "HELPER_HASH": digest},
                    )
        self._helper_ready = True
        return self.helper_image

    def _run(
        self, argv: Sequence[str], timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        self.ensure_helper()
        try:
            return subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                errors="replace",
                env=engine_env(),
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as err:
            raise EnvironmentProblem(
                f"{argv[0]} is not installed: install apptainer, or podman for hpcenv's helper"
            ) from err

    def exec(
        self,
        sif: Path,
        argv: Sequence[str],
        binds: Sequence[Bind] = (),
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``sif``; returns the finished process (stdout/stderr as text)."""
        return self._run(self.exec_argv(sif, argv, binds, env), timeout=timeout)

    def version(self) -> str:
        proc = self._run(self.command(["version"]), timeout=120)
        if proc.returncode != 0:
            raise EnvironmentProblem(f"apptainer version failed: {proc.stderr.strip()}")
        return proc.stdout.strip()

    def _build(self, step: str, argv: Sequence[str], sif: Path, log_path: Path) -> Path:
        self.ensure_helper()
        partial = sif.with_name(sif.name + ".partial")
        rc, tail = stream_command(argv, log_path)
        if rc != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise BuildError(step, log_path, _failure_line(tail))
        os.replace(partial, sif)
        return sif

    def _scratch_args(self) -> list[str]:
        """Helper options that put Apptainer's temporary and cache space on the host's disk."""
        scratch = scratch_dir()
        for sub in ("tmp", "cache"):
            (scratch / sub).mkdir(exist_ok=True)
        return [
            "-v",
            f"{scratch}:{HELPER_SCRATCH}",
            "-e",
            f"APPTAINER_TMPDIR={HELPER_SCRATCH}/tmp",
            "-e",
            f"APPTAINER_CACHEDIR={HELPER_SCRATCH}/cache",
        ]

    def build_from_oci_archive(
        self,
        archive: Path,
        sif: Path,
        *,
        fmt: ArchiveFormat | None = None,
        log_path: Path | None = None,
        compression: SquashfsCompressor | None = None,
    ) -> Path:
        """Convert a saved image (``podman save --format oci-archive|docker-archive``) to SIF.

        ``fmt`` defaults to what the archive holds (an ``oci-layout`` entry means OCI);
        ``compression``: the squashfs compressor (:func:`squashfs_args`), else Apptainer's.
        """
        archive, sif = Path(archive).resolve(), Path(sif).resolve()
        if not archive.is_file():
            raise ConfigError(f"no image archive at {archive}")
        fmt = fmt or _archive_format(archive)
        sif.parent.mkdir(parents=True, exist_ok=True)
        log_path = log_path or cache_dir() / "logs" / f"apptainer-{sif.stem}.log"
        partial = sif.with_name(sif.name + ".partial")
        args = ["build", "--force", *squashfs_args(compression), str(partial), f"{fmt}:{archive}"]
        if self.in_helper:
            paths = [archive.parent, sif.parent]
            argv = self.command(args, paths=paths, extra=self._scratch_args())
        else:
            argv = self.command(args)
        return self._build(f"apptainer build {sif.name} from {fmt}", argv, sif, log_path)

    def build_from_def(
        self,
        def_path: Path,
        sif: Path,
        workdir: Path,
        *,
        log_path: Path | None = None,
        secrets_dir: Path | None = None,
        compression: SquashfsCompressor | None = None,
    ) -> Path:
        """Build ``def_path`` natively into ``sif``; relative ``%files`` sources are taken from
        ``workdir``. Runs with ``--fakeroot`` in the helper and for non-root host users.

        ``secrets_dir`` (build secrets, see :mod:`hpcenv.credentials`) is bound at
        /run/secrets for ``%post`` only (``apptainer build --bind``): never in the def text
        or the image."""
        def_path, sif, workdir = (Path(p).resolve() for p in (def_path, sif, workdir))
        if not def_path.is_file():
            raise ConfigError(f"no definition file at {def_path}")
        sif.parent.mkdir(parents=True, exist_ok=True)
        log_path = log_path or cache_dir() / "logs" / f"apptainer-{sif.stem}.log"
        partial = sif.with_name(sif.name + ".partial")
        fakeroot = self.in_helper or os.geteuid() != 0
        args = [
            "build",
            "--force",
            *(["--fakeroot"] if fakeroot else []),
            *squashfs_args(compression),
        ]
        if secrets_dir is not None:
            secrets_dir = secrets_dir.resolve()
            args += ["--bind", f"{secrets_dir}:{SECRETS_DIR}:ro"]
        args += [str(partial), str(def_path)]
        if self.in_helper:
            paths = [workdir, def_path.parent, sif.parent, *([secrets_dir] if secrets_dir else [])]
            paths += def_host_paths(def_path.read_text(encoding="utf-8"), workdir)
            argv = self.command(args, paths=paths, workdir=workdir, extra=self._scratch_args())
        else:
            argv = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "build-def", str(workdir)]
            argv += self.command(args)
        return self._build(f"apptainer build {sif.name} from {def_path.name}", argv, sif, log_path)


def squashfs_args(compression: SquashfsCompressor | None) -> list[str]:
    """``apptainer build`` options for a SIF's squashfs compressor (``--mksquashfs-args``, in
    ``apptainer build --help`` of 1.4.5, read 2026-11-24); none: Apptainer's default, gzip."""
    if compression is None:
        return []
    if compression not in get_args(SquashfsCompressor):
        raise ConfigError(f"unknown squashfs compressor {compression!r}")
    return ["--mksquashfs-args", f"-comp {compression}"]


def _archive_format(archive: Path) -> ArchiveFormat:
    import tarfile

    try:
        with tarfile.open(archive) as tar:
            names = set(tar.getnames())
    except tarfile.TarError as err:
        raise ConfigError(f"{archive} is not an image archive: {err}") from err
    if "oci-layout" in names or "./oci-layout" in names:
        return "oci-archive"
    if "manifest.json" in names:
        return "docker-archive"
    raise ConfigError(f"{archive} is neither an oci-archive nor a docker-archive")


# -- named images for apptainer:// hosts ---------------------------------------------------
def registry_path() -> Path:
    return scratch_dir() / "images.json"


def _parse_pairs(text: str, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ConfigError(f"bad {what} entry {item!r}: expected NAME=VALUE")
        pairs[name.strip()] = value.strip()
    return pairs


def registered_images() -> dict[str, Path]:
    """Image names -> SIF paths: the registry file, overridden by ``$HPCENV_APPTAINER_IMAGES``."""
    images: dict[str, str] = {}
    path = registry_path()
    if path.is_file():
        images.update(json.loads(path.read_text(encoding="utf-8")))
    images.update(_parse_pairs(os.environ.get(IMAGES_ENV, ""), IMAGES_ENV))
    return {name: Path(sif) for name, sif in images.items()}


def register_image(name: str, sif: Path) -> None:
    """Record ``name`` -> ``sif`` so ``apptainer://NAME`` finds it."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"bad image name {name!r}: letters, digits, '.', '_', '-' only")
    with file_lock(scratch_dir() / "images.lock"):
        path = registry_path()
        images = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        images[name] = str(Path(sif).resolve())
        path.write_text(json.dumps(images, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def resolve_image(name: str) -> Path:
    """The SIF registered as ``name``; a clean error names the known ones."""
    images = registered_images()
    if name not in images:
        known = ", ".join(sorted(images)) or "none"
        raise ConfigError(
            f"no Apptainer image named {name!r} (known: {known}); "
            f"set {IMAGES_ENV}=NAME=/path.sif or register it"
        )
    if not images[name].is_file():
        raise ConfigError(f"Apptainer image {name!r} points to a missing file {images[name]}")
    return images[name]


def default_binds() -> list[Bind]:
    """``$HPCENV_APPTAINER_BINDS`` (``SRC:DST[:ro]``, comma-separated), plus the MNIST data
    directory at /data/mnist when it exists in the cache and no bind targets /data/mnist."""
    binds = [Bind.parse(s) for s in os.environ.get(BINDS_ENV, "").split(",") if s.strip()]
    mnist = cache_dir() / "data" / "mnist"
    if mnist.is_dir() and not any(b.target == "/data/mnist" for b in binds):
        binds.append(Bind(mnist.resolve(), "/data/mnist", read_only=True))
    return binds
