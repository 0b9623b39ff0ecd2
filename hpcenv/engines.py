"""Container engines behind one small interface: podman (default), docker, buildah.

Every engine is a CLI driven through :mod:`subprocess` with :func:`engine_env`, so podman and
buildah get what this host needs from containers.conf (runc, cgroupfs, lower ulimits; see
:mod:`hpcenv.hostconf`) on top of the user's own configuration, and nothing where it needs none.
Builds stream their output into a full log file and report each ``STEP n/m`` as it starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from hpcenv.credentials import redact
from hpcenv.errors import BuildError, ConfigError, EnvironmentProblem, HpcenvError
from hpcenv.paths import file_lock, package_dir

ArchiveFormat = Literal["oci-archive", "docker-archive"]
StepCallback = Callable[[int, int, str, "float | None"], None]
"""Called as ``(index, total, text, seconds_of_previous_step)`` when a build step starts."""

DEFAULT_ENGINE = "podman"
# One build (or base import) at a time in an image storage that builders share through files:
# concurrent builds in one podman/buildah storage race on its layers ("layer not known", buildah
# #5674 and #5615, open when read 2026-11-25), and each wants the machine's cores anyway.
STORAGE_LOCK_NAME = "hpcenv-build.lock"
HOST_SETUP_HINT = "install it with the system package manager, then check with `hpcenv doctor`"


class EngineCommandError(HpcenvError):
    """An engine command other than a build failed; carries its argv and the end of stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
        super().__init__(f"{' '.join(argv[:3])} failed (exit {returncode}): {tail}")


def containers_conf_path() -> Path:
    """The reference containers.conf for hosts like the project's own (every fix; for running
    podman by hand with ``CONTAINERS_CONF``); hpcenv itself applies only what a host needs."""
    return package_dir() / "data" / "containers.conf"


# Every hpcenv Dockerfile sets SHELL ["/bin/bash", "-o", "pipefail", "-c"], so that a failed
# `curl` piped into `tar` or `gpg` fails its step. SHELL is part of the Docker image format only:
# podman and buildah build the OCI format by default, where RUN steps ignore it and run under
# /bin/sh (Debian's dash, no pipefail) with a warning per step. buildah #2741 (nalind: "the part
# of the Docker image format that the SHELL instruction affects isn't in the OCI format. Try
# building with `--format docker`"), podman #8477, podman-build(1) v4.3 --format; read
# 2026-11-27. Measured here, podman 4.3.1: after that SHELL, `RUN false | true` passes with
# --format oci and fails with --format docker. The image still converts to oci-archive and SIF.
# No `--jobs N` (podman-build(1) v4.3: "run up to N concurrent stages"): measured here
# 2026-11-28, the daal4py recipe on `local`, cold, each build in its own throw-away storage
# (hpcenv.bench.buildcost.IsolatedStorage), alternating: without it 94.6 and 97.1 s, with
# `--jobs 2` 104.8 and 123.9 s (the runtime stage's apt step then competes with the build
# stage's pip install for the two cores; `COPY --from=build` took 22-28 s instead of ~5).
LAYERED_BUILD_OPTIONS = ("--layers", "--format", "docker")


def engine_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` (or ``base``) plus what this host needs from containers.conf, if anything
    (``CONTAINERS_CONF_OVERRIDE``, or a merged ``CONTAINERS_CONF`` for podman < 4.5)."""
    from hpcenv.hostconf import podman_conf

    env = dict(os.environ if base is None else base)
    env.update(podman_conf(env).env)
    return env


@dataclass(frozen=True)
class BuildStep:
    """One build step as the engine announced it, with its wall time."""

    index: int
    total: int
    text: str
    seconds: float


@dataclass(frozen=True)
class BuildResult:
    """A finished build: the tag, its full log, total and per-step wall time."""

    tag: str
    log_path: Path
    seconds: float
    steps: tuple[BuildStep, ...] = ()
    reused: bool = False  # nothing built: the image was up to date (hpcenv.build_inputs)


_PODMAN_STEP = re.compile(
    r"^(?:\[(?P<stage>\d+)/(?P<stages>\d+)\] )?STEP (?P<i>\d+)/(?P<n>\d+): (?P<text>.*)$"
)
_DOCKER_STEP = re.compile(r"^Step (?P<i>\d+)/(?P<n>\d+) : (?P<text>.*)$")
# A RUN's mount flags (secrets, build inputs, the compiler cache) say nothing about what the step
# does: a step's text goes without them, so a progress line shows the command.
_RUN_MOUNTS = re.compile(r"^RUN (?:--mount=\S+\s+)+")
_BUILDKIT_STEP = re.compile(
    r"^#(?P<id>\d+) \[(?:[^\]\s]+ )?\s*(?P<i>\d+)/(?P<n>\d+)\] (?P<text>.*)$"
)


@dataclass
class StepTracker:
    """Turns engine output lines into step events with the previous step's duration.

    Multi-stage podman builds number steps per stage (``[2/2] STEP 3/6``); the tracker numbers
    them across stages, so ``index`` only grows and ``total`` is the steps known so far.
    """

    on_step: StepCallback | None = None
    clock: Callable[[], float] = time.monotonic
    steps: list[BuildStep] = field(default_factory=list)
    _current: tuple[int, int, str, float] | None = None
    _offset: int = 0
    _stage_key: tuple[str, str] | None = None
    _stage_total: int = 0
    _seen_ids: set[str] = field(default_factory=set)

    def feed(self, line: str) -> None:
        """Inspect one output line; fires ``on_step`` when it starts a new step."""
        line = line.rstrip("\r\n")
        m = _PODMAN_STEP.match(line)
        if m:
            stage = (m["stage"] or "1", m["stages"] or "1")
            self._start(stage, int(m["i"]), int(m["n"]), m["text"])
            return
        m = _DOCKER_STEP.match(line)
        if m:
            self._start(("1", "1"), int(m["i"]), int(m["n"]), m["text"])
            return
        m = _BUILDKIT_STEP.match(line)
        if m and m["id"] not in self._seen_ids:
            self._seen_ids.add(m["id"])
            self._start(("1", "1"), int(m["i"]), int(m["n"]), m["text"])

    def _start(self, stage: tuple[str, str], i: int, n: int, text: str) -> None:
        text = _RUN_MOUNTS.sub("RUN ", text)
        if stage != self._stage_key:
            if self._stage_key is not None:
                self._offset += self._stage_total
            self._stage_key, self._stage_total = stage, n
        now = self.clock()
        previous = self._close(now)
        index, total = self._offset + i, self._offset + n
        self._current = (index, total, text, now)
        if self.on_step is not None:
            self.on_step(index, total, text, previous)

    def _close(self, now: float) -> float | None:
        if self._current is None:
            return None
        index, total, text, started = self._current
        seconds = now - started
        self.steps.append(BuildStep(index, total, text, seconds))
        self._current = None
        return seconds

    def finish(self) -> None:
        """Close the last step (call once the engine exits)."""
        self._close(self.clock())

    @property
    def current_text(self) -> str | None:
        return self._current[2] if self._current else None


def stream_command(
    argv: Sequence[str],
    log_path: Path,
    *,
    tracker: StepTracker | None = None,
    on_line: Callable[[str], None] | None = None,
    append: bool = False,
    env: Mapping[str, str] | None = None,
) -> tuple[int, list[str]]:
    """Run ``argv`` with :func:`engine_env` (plus ``env``); each output line goes to the log,
    ``tracker`` and ``on_line``. Returns the exit code and the last 40 lines."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=40)
    with log_path.open("a" if append else "w", encoding="utf-8") as log:
        log.write(redact("$ " + " ".join(argv)) + "\n")
        log.flush()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=engine_env() | dict(env or {}),
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
            )
        except FileNotFoundError as err:
            raise EnvironmentProblem(f"{argv[0]} is not installed; {HOST_SETUP_HINT}") from err
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                line = redact(line)  # credentials in a URL never reach a log or a screen
                log.write(line)
                log.flush()
                if tracker is not None:
                    tracker.feed(line)
                tail.append(line.rstrip("\n"))
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if tracker is not None:
            tracker.finish()
    return rc, list(tail)


def _failure_detail(tail: Sequence[str]) -> str:
    """The most telling line of a failed build: a generated step's own ``hpcenv:`` message (the
    site-build MPI check, :func:`hpcenv.blocks.host_mpi_build`), else the engine's ``Error:``,
    else the last line."""
    for line in reversed(tail):
        if line.startswith("hpcenv: "):
            return line
    for line in reversed(tail):
        if line.startswith(("Error:", "error:", "ERROR:", "ERROR ")):
            return line
    return next((ln for ln in reversed(tail) if ln.strip()), "no output")


class Engine(ABC):
    """What hpcenv needs from a container engine."""

    name: ClassVar[str]
    binary: ClassVar[str]

    def __init__(self, binary: str | None = None) -> None:
        self.exe = binary or self.binary

    # -- plumbing ---------------------------------------------------------------------------
    def _cmd(
        self, *args: str, check: bool = True, timeout: float | None = 600
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.exe, *args]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                env=engine_env(),
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as err:
            raise EnvironmentProblem(f"{self.exe} is not installed; {HOST_SETUP_HINT}") from err
        if check and proc.returncode != 0:
            raise EngineCommandError(argv, proc.returncode, proc.stderr or proc.stdout)
        return proc

    def available(self) -> tuple[bool, str]:
        """Whether the engine can be used here, and why (not)."""
        path = shutil.which(self.exe)
        if path is None:
            return False, f"{self.exe} not found on PATH; {HOST_SETUP_HINT}"
        try:
            proc = self._cmd(*self._info_args(), check=False, timeout=60)
        except subprocess.TimeoutExpired:
            return False, f"{self.exe} info timed out after 60 s"
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            return False, f"{self.exe} info failed: {lines[-1] if lines else 'no output'}"
        return True, f"{path}: {proc.stdout.strip() or 'ok'}"

    @abstractmethod
    def _info_args(self) -> list[str]:
        """Arguments of a cheap command that proves the engine works (``info``)."""

    # -- builds -----------------------------------------------------------------------------
    def build(
        self,
        context_dir: Path,
        dockerfile: Path,
        tag: str,
        *,
        log_path: Path,
        build_args: Mapping[str, str] | None = None,
        volumes: Iterable[str] = (),
        on_step: StepCallback | None = None,
        on_line: Callable[[str], None] | None = None,
        secrets: Mapping[str, Path] | None = None,
        flags: Iterable[str] = (),
        platform: str | None = None,
        on_wait: Callable[[Path], None] | None = None,
    ) -> BuildResult:
        """Build ``dockerfile`` in ``context_dir`` as ``tag`` with the layer cache on.

        ``volumes`` are ``HOST:CONTAINER[:OPTS]`` bind mounts for RUN steps; ``secrets`` are
        ``{id: file}`` build secrets (``--secret``) that ``RUN --mount=type=secret,id=ID``
        steps see, never stored in a layer; ``flags``: the site's own build options
        (``--net=host``); ``platform`` (``linux/arm64``) builds for another architecture
        (``--platform``; RUN steps then run under qemu-user-static). Builds in one storage take
        turns (:meth:`storage_lock`; ``on_wait`` is told its file when this one has to wait).
        Raises :class:`BuildError` naming the failing step and ``log_path`` on a non-zero exit.
        """
        argv = self.build_argv(
            context_dir,
            dockerfile,
            tag,
            build_args,
            volumes,
            secrets=secrets,
            flags=flags,
            platform=platform,
        )
        tracker = StepTracker(on_step=on_step)
        with self.storage_lock(on_wait):
            started = time.monotonic()
            rc, tail = stream_command(argv, Path(log_path), tracker=tracker, on_line=on_line)
            seconds = time.monotonic() - started
        if rc != 0:
            failed = tracker.steps[-1].text if tracker.steps else f"{self.name} build"
            raise BuildError(failed, Path(log_path), _failure_detail(tail))
        return BuildResult(tag, Path(log_path), seconds, tuple(tracker.steps))

    def build_argv(
        self,
        context_dir: Path | str,
        dockerfile: Path | str,
        tag: str,
        build_args: Mapping[str, str] | None = None,
        volumes: Iterable[str] = (),
        *,
        secrets: Mapping[str, Path] | None = None,
        flags: Iterable[str] = (),
        platform: str | None = None,
    ) -> list[str]:
        """The build command line (also what ``build --dry-run`` shows)."""
        argv = [self.exe, *self._build_args(Path(context_dir), Path(dockerfile), tag)]
        if platform:
            argv += ["--platform", platform]
        argv += list(flags)
        for key, value in (build_args or {}).items():
            argv += ["--build-arg", f"{key}={value}"]
        for secret_id, path in (secrets or {}).items():
            argv += ["--secret", f"id={secret_id},src={path}"]
        argv += self._volume_args(list(volumes))
        argv.append(str(context_dir))
        return argv

    # The engine's own options on every build (also part of an image's inputs digest).
    build_options: tuple[str, ...] = LAYERED_BUILD_OPTIONS

    def _build_args(self, context_dir: Path, dockerfile: Path, tag: str) -> list[str]:
        return ["build", *self.build_options, "-f", str(dockerfile), "-t", tag]

    def storage_lock(
        self, on_wait: Callable[[Path], None] | None = None
    ) -> AbstractContextManager[None]:
        """Held while this process writes images into the engine's storage (a build, a base
        import): a second hpcenv build into the same storage waits (``on_wait`` is told the lock
        file first). The file lies in the storage's run root, which is per storage and per user
        (rootless: under $XDG_RUNTIME_DIR); an engine that names none locks nothing."""
        path = self.storage_lock_path()
        if path is None:
            return nullcontext()
        return file_lock(path, on_wait=None if on_wait is None else lambda: on_wait(path))

    def storage_lock_path(self) -> Path | None:
        """The lock file in the storage's run root (:meth:`_run_root`), or None: none reported,
        or a folder that is not there or not this user's (a remote podman reports the server's
        run root; a folder of another user's is no place for this user's lock)."""
        if not hasattr(self, "_lock_root"):
            self._lock_root = self._run_root()
        root = self._lock_root
        try:
            if root is None or not root.is_dir() or root.stat().st_uid != os.getuid():
                return None
        except OSError:
            return None
        return root / STORAGE_LOCK_NAME

    def _run_root(self) -> Path | None:
        """The storage's run root, as ``info`` reports it; None when it reports no absolute
        path (Docker: the daemon orders its own builds)."""
        return None

    def _reported_run_root(self, fmt: str) -> Path | None:
        """``info --format FMT`` as one absolute folder, else None (also when it fails or takes
        over a minute: the build itself then says what is wrong with the engine)."""
        try:
            return _reported_dir(self._cmd("info", "--format", fmt, check=False, timeout=60))
        except subprocess.TimeoutExpired:
            return None

    def _volume_args(self, volumes: list[str]) -> list[str]:
        return [arg for v in volumes for arg in ("-v", v)]

    # -- images -----------------------------------------------------------------------------
    def image_exists(self, tag: str) -> bool:
        return self._cmd("image", "exists", tag, check=False).returncode == 0

    def image_id(self, tag: str) -> str:
        """The image's content id (changes whenever the image does)."""
        return self._cmd("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()

    def find_image_id(self, tag: str) -> str | None:
        """The image's content id without ``sha256:``, None when this storage lacks it (or the
        engine is not here)."""
        try:
            proc = self._cmd("image", "inspect", "--format", "{{.Id}}", tag, check=False)
        except EnvironmentProblem:
            return None
        iid = proc.stdout.strip().removeprefix("sha256:")
        return iid if proc.returncode == 0 and iid else None

    def image_size(self, tag: str) -> int:
        """Size of the image in bytes."""
        return int(self._cmd("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())

    def labels(self, tag: str) -> dict[str, str]:
        out = self._cmd("image", "inspect", "--format", "{{json .Config.Labels}}", tag).stdout
        return dict(json.loads(out.strip() or "null") or {})

    def save(self, tag: str, path: Path, fmt: ArchiveFormat = "oci-archive") -> Path:
        """Write ``tag`` to an archive file that Apptainer/Singularity can import."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        self._cmd("save", "--format", fmt, "-o", str(path), tag, timeout=1800)
        return path

    def remove_image(self, tag: str) -> None:
        """Remove ``tag``; a missing image is not an error."""
        if self.image_exists(tag):
            self._cmd("rmi", tag)

    def image_arch(self, tag: str) -> str:
        """The image's architecture as its config records it (``amd64``, ``arm64``)."""
        return self._cmd("image", "inspect", "--format", "{{.Architecture}}", tag).stdout.strip()

    def import_rootfs(
        self,
        tarball: Path,
        tag: str,
        *,
        changes: Sequence[str] = (),
        arch: str | None = None,
        on_wait: Callable[[Path], None] | None = None,
    ) -> str:
        """Make image ``tag`` from a root filesystem tarball (``changes``: Dockerfile lines;
        ``arch``: the OCI architecture to record when it is not this host's; ``on_wait``: told
        the storage lock's file when another build holds it, as for :meth:`build`)."""
        with self.storage_lock(on_wait):
            self._import(tarball, tag, changes, arch)
        return tag

    def _import(self, tarball: Path, tag: str, changes: Sequence[str], arch: str | None) -> None:
        """The engine's own import, run under the storage lock."""
        args = ["import"]
        for change in changes:
            args += ["--change", change]
        if arch:
            args += ["--arch", arch]
        self._cmd(*args, str(tarball), tag, timeout=1800)

    # -- containers -------------------------------------------------------------------------
    def run_detached(
        self,
        image: str,
        name: str,
        *,
        volumes: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        command: Sequence[str] = ("sleep", "infinity"),
    ) -> str:
        """Start a long-running container (``sleep infinity`` by default); returns its name.

        Its stop signal is KILL: ``sleep`` as PID 1 ignores SIGTERM (PID 1 has no default signal
        actions), so a ``podman stop`` would wait 10 s for nothing; it holds no state to save.

        ``--ipc=host``: the ranks see the host's /dev/shm, as they do in a job (the podman
        runtime's ``podman run --ipc=host``, :mod:`hpcenv.jobs.runtimes.podman`), not podman's
        own 64 MB one (podman-run(1) --shm-size "default 64m"), in which libfabric's shm
        provider cannot start: oneCCL then sends between two ranks of one node over TCP on
        loopback (``has_shm 0`` in CCL_LOG_LEVEL=debug; measured here 2026-11-28: Horovod over
        oneCCL 64 MiB 0.89 GB/s with it, 1.42 GB/s with a 1 GiB /dev/shm and CCL_ATL_SHM=1,
        Horovod over MPI 0.90)."""
        args = ["run", "-d", "--name", name, "--stop-signal", "KILL", "--ipc=host"]
        args += self._volume_args(list(volumes))
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        if user is not None:
            args += ["--user", user]
        self._cmd(*args, image, *command)
        return name

    def remove_container(self, name: str) -> None:
        """Force-remove a container; a missing one is not an error."""
        proc = self._cmd("rm", "-f", name, check=False)
        if proc.returncode != 0 and "no such container" not in proc.stderr.lower():
            raise EngineCommandError([self.exe, "rm", "-f", name], proc.returncode, proc.stderr)


class PodmanEngine(Engine):
    """Rootful or rootless podman (the default)."""

    name = "podman"
    binary = "podman"

    def _info_args(self) -> list[str]:
        fmt = "{{.Host.OCIRuntime.Name}} runtime, {{.Store.GraphDriverName}} storage"
        return ["info", "--format", fmt]

    def _run_root(self) -> Path | None:
        return self._reported_run_root("{{.Store.RunRoot}}")

    def remove_container(self, name: str) -> None:
        self._cmd("rm", "-f", "--ignore", "-t", "0", name)


class PodmanHpcEngine(PodmanEngine):
    """NERSC's podman-hpc: podman with its own storage configuration, whose ``build`` leaves
    the image where ``podman-hpc migrate`` reads it (NERSC/podman-hpc ``podman_hpc.py``)."""

    name = "podman-hpc"
    binary = "podman-hpc"


class DockerEngine(Engine):
    """Docker CLI with a daemon; its builder cannot bind-mount volumes into RUN steps."""

    name = "docker"
    binary = "docker"

    def _info_args(self) -> list[str]:
        return ["info", "--format", "server {{.ServerVersion}}"]

    # BuildKit honours SHELL in its default format; its layer cache is always on.
    build_options = ("--progress=plain",)

    def build(
        self,
        context_dir: Path,
        dockerfile: Path,
        tag: str,
        *,
        log_path: Path,
        build_args: Mapping[str, str] | None = None,
        volumes: Iterable[str] = (),
        on_step: StepCallback | None = None,
        on_line: Callable[[str], None] | None = None,
        secrets: Mapping[str, Path] | None = None,
        flags: Iterable[str] = (),
        platform: str | None = None,
        on_wait: Callable[[Path], None] | None = None,
    ) -> BuildResult:
        vols = list(volumes)
        if vols:
            raise ConfigError(
                f"docker build cannot bind-mount {vols}; use podman or buildah, "
                "or COPY the files into the build stage"
            )
        return super().build(
            context_dir,
            dockerfile,
            tag,
            log_path=log_path,
            build_args=build_args,
            on_step=on_step,
            on_line=on_line,
            secrets=secrets,
            flags=flags,
            platform=platform,
            on_wait=on_wait,
        )

    def image_exists(self, tag: str) -> bool:
        return self._cmd("image", "inspect", tag, check=False).returncode == 0

    def save(self, tag: str, path: Path, fmt: ArchiveFormat = "oci-archive") -> Path:
        if fmt != "docker-archive":
            raise ConfigError("docker save writes docker-archive only; use fmt='docker-archive'")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._cmd("save", "-o", str(path), tag, timeout=1800)
        return path


class BuildahEngine(Engine):
    """Buildah: builds, images and archives, but no long-running containers."""

    name = "buildah"
    binary = "buildah"

    def _info_args(self) -> list[str]:
        return ["info", "--format", "{{.store.GraphDriverName}} storage"]

    def _run_root(self) -> Path | None:
        return self._reported_run_root("{{.store.RunRoot}}")

    def image_exists(self, tag: str) -> bool:
        return self._cmd("inspect", "--type", "image", tag, check=False).returncode == 0

    def _inspect(self, tag: str) -> dict[str, object]:
        return dict(json.loads(self._cmd("inspect", "--type", "image", tag).stdout))

    def image_size(self, tag: str) -> int:
        """Bytes of the image's layers and config, as its stored manifest records them."""
        manifest = json.loads(str(self._inspect(tag)["Manifest"]))
        parts = [*manifest.get("layers", []), manifest.get("config", {})]
        return sum(int(p.get("size", 0)) for p in parts)

    def labels(self, tag: str) -> dict[str, str]:
        oci = self._inspect(tag).get("OCIv1") or {}
        config = oci.get("config", {}) if isinstance(oci, dict) else {}
        return dict(config.get("Labels") or {})

    def save(self, tag: str, path: Path, fmt: ArchiveFormat = "oci-archive") -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        dest = f"{fmt}:{path}" + (f":{tag}" if fmt == "docker-archive" else "")
        self._cmd("push", tag, dest, timeout=1800)
        return path

    def image_arch(self, tag: str) -> str:
        oci = self._inspect(tag).get("OCIv1") or {}
        return str(oci.get("architecture", "")) if isinstance(oci, dict) else ""

    def _import(self, tarball: Path, tag: str, changes: Sequence[str], arch: str | None) -> None:
        """buildah has no ``import``: a ``FROM scratch`` build that adds the tarball."""
        with tempfile.TemporaryDirectory(prefix="hpcenv-import-") as tmp:
            ctx = Path(tmp)
            try:
                os.link(tarball, ctx / "rootfs.tar")
            except OSError:
                shutil.copyfile(tarball, ctx / "rootfs.tar")
            (ctx / "Dockerfile").write_text(
                "FROM scratch\nADD rootfs.tar /\n" + "".join(f"{c}\n" for c in changes)
            )
            plat = ["--arch", arch] if arch else []
            self._cmd(
                "build", *plat, "-f", str(ctx / "Dockerfile"), "-t", tag, str(ctx), timeout=1800
            )

    def run_detached(
        self,
        image: str,
        name: str,
        *,
        volumes: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        command: Sequence[str] = ("sleep", "infinity"),
    ) -> str:
        raise EnvironmentProblem(
            "buildah cannot run long-lived containers; use the podman engine (--engine podman)"
        )

    def remove_container(self, name: str) -> None:
        proc = self._cmd("rm", name, check=False)
        missing = "not known" in proc.stderr or "no container" in proc.stderr
        if proc.returncode != 0 and not missing:
            raise EngineCommandError([self.exe, "rm", name], proc.returncode, proc.stderr)


ENGINES: dict[str, type[Engine]] = {
    cls.name: cls for cls in (PodmanEngine, PodmanHpcEngine, DockerEngine, BuildahEngine)
}


def _reported_dir(proc: subprocess.CompletedProcess[str]) -> Path | None:
    """The one absolute folder an ``info --format`` printed, else None (a failed ``info`` or a
    value with a newline or a relative path locks nothing; the build itself then says why)."""
    text = proc.stdout.strip()
    if proc.returncode != 0 or not text.startswith("/") or "\n" in text or "\0" in text:
        return None
    return Path(text)


def engine_names() -> list[str]:
    return sorted(ENGINES)


def get_engine(name: str | None = None) -> Engine:
    """The engine called ``name`` (default: ``$HPCENV_ENGINE``, else podman)."""
    name = name or os.environ.get("HPCENV_ENGINE") or DEFAULT_ENGINE
    try:
        cls = ENGINES[name]
    except KeyError:
        raise ConfigError(
            f"unknown container engine {name!r}; valid engines: {', '.join(engine_names())}"
        ) from None
    return cls()
