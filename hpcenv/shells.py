"""Where measured commands run: the bare host, or one long-running container of the image.

Used by ``tune --measure``, ``bench`` and the in-image checks' readers (a layer under all of
them: nothing here imports the tuning, the bench or the smoke suite).

Both run a ``bash -c`` line with extra environment and return a :class:`Result` with the wall
time and the last JSON document the command printed (the check scripts print one on rank 0).
The container is started once (``podman run -d IMAGE sleep infinity``) and every command is an
``exec`` into it, so container start-up is measured separately and not inside each number: the
OCI runtime's own ``exec`` where it can be called directly (:func:`runtime_exec`), else
``podman exec``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hpcenv.errors import HpcenvError

# Open MPI refuses root without these; they change nothing for the image's non-root user.
OMPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

_RANK_PREFIX = re.compile(r"^\[\d+\]<stdout>:")  # horovodrun's per-rank line prefix


def last_json(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that is a JSON object (launchers may print around it)."""
    for line in reversed(stdout.splitlines()):
        line = _RANK_PREFIX.sub("", line.strip()).strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


class BenchCommandError(HpcenvError):
    """A benchmark command failed or printed no JSON."""


@dataclass
class Result:
    where: str
    command: str
    env: dict[str, str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    doc: dict[str, Any] | None = field(default=None)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def require_doc(self) -> dict[str, Any]:
        """The JSON document, or a BenchCommandError naming the command and its stderr tail."""
        if self.returncode != 0 or self.doc is None:
            tail = (self.stderr or self.stdout).strip().splitlines()[-3:]
            why = f"exit {self.returncode}" if self.returncode else "no JSON on stdout"
            raise BenchCommandError(
                f"{self.where}: `{self.command}` failed ({why}): {' / '.join(tail) or 'no output'}"
            )
        return self.doc

    def require_ok(self) -> Result:
        """This result, or a BenchCommandError when the command failed."""
        if self.returncode != 0:
            tail = (self.stderr or self.stdout).strip().splitlines()[-3:]
            raise BenchCommandError(
                f"{self.where}: `{self.command}` failed (exit {self.returncode}): "
                + (" / ".join(tail) or "no output")
            )
        return self

    def summary(self) -> dict[str, Any]:
        """What report.json keeps of a run (command, env, time, exit code; not the output)."""
        return {
            "where": self.where,
            "command": self.command,
            "env": self.env,
            "seconds": round(self.seconds, 3),
            "returncode": self.returncode,
            "stderr_tail": self.stderr.strip().splitlines()[-5:],
        }


def _env_prefix(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


class Host:
    """The bare host: commands run under ``bash -c`` with this process's environment + ``env``."""

    where = "host"

    def run(
        self, command: str, env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> Result:
        full_env = dict(os.environ) | OMPI_ROOT_ENV | dict(env or {})
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                capture_output=True,
                text=True,
                errors="replace",
                env=full_env,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = (
                124,
                _text(exc.stdout),
                _text(exc.stderr) + f"\ntimed out after {timeout} s",
            )
        seconds = time.perf_counter() - t0
        return Result(self.where, command, dict(env or {}), rc, out, err, seconds, last_json(out))


def _text(data: Any) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


class Container:
    """One ``sleep infinity`` container of an image; commands are execs into it (the
    runtime's own where :func:`runtime_exec` finds it, else ``podman exec``)."""

    def __init__(self, image: str, volumes: Iterable[str] = (), name: str | None = None) -> None:
        self.image = image
        self.volumes = list(volumes)
        self.name = name or f"hpcenv-bench-{secrets.token_hex(4)}"
        self.where = f"image {image}"
        self.started = False
        self.direct: tuple[str, str] | None = None  # (runtime, container id): its own exec

    def start(self) -> float:
        """Start the container and find whether its runtime's ``exec`` can be called directly;
        returns the seconds ``podman run -d`` took."""
        from hpcenv.engines import get_engine

        engine = get_engine("podman")
        t0 = time.perf_counter()
        # marked first: a signal that ends ``podman run -d`` midway leaves a container that
        # stop() must remove (removing one that was never made is not an error)
        self.started = True
        engine.run_detached(self.image, self.name, volumes=self.volumes)
        took = time.perf_counter() - t0
        self.direct = runtime_exec(self.name)
        return took

    def stop(self) -> None:
        if self.started:
            from hpcenv.engines import get_engine

            get_engine("podman").remove_container(self.name)
            self.started = False

    def __enter__(self) -> Container:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(
        self,
        command: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 600,
        *,
        via_podman: bool = False,
    ) -> Result:
        """``command`` in the container: through the runtime's own ``exec`` when :meth:`start`
        found it (and not ``via_podman``), else ``podman exec``."""
        from hpcenv.engines import engine_env

        env = dict(env or {})
        # ``timeout`` inside too: killing the exec client does not stop the command.
        inner = f"cd /tmp && timeout -k 5 {int(timeout)} bash -c {shlex.quote(command)}"
        if self.direct and not via_podman:
            runtime, target = self.direct
            argv, flag = [runtime, "exec"], "--env"
        else:
            argv, flag, target = ["podman", "exec"], "-e", self.name
        for key, value in env.items():
            argv += [flag, f"{key}={value}"]
        argv += [target, "bash", "-c", inner]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                env=engine_env(),
                timeout=timeout + 30,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = (
                124,
                _text(exc.stdout),
                _text(exc.stderr) + f"\ntimed out after {timeout} s",
            )
        seconds = time.perf_counter() - t0
        shown = f"{_env_prefix(env)} {command}".strip()
        return Result(self.where, shown, env, rc, out, err, seconds, last_json(out))


# OCI runtimes whose command line has ``state`` and ``exec`` (runc(8): runc-state, runc-exec;
# crun(1)), the two Debian packages for podman.
DIRECT_RUNTIMES = ("runc", "crun")


def runtime_exec(name: str) -> tuple[str, str] | None:
    """(runtime, container id) when the OCI runtime's own ``exec`` can reach the running
    container ``name``, else None (then ``podman exec``).

    ``podman exec`` is podman's client asking conmon to run the runtime's ``exec``
    (podman-exec(1)). Calling ``runc exec ID`` directly runs the same process spec, taken from
    the container's config.json: its user, working directory, environment, capabilities,
    seccomp filter and cgroup (the same ``id``, capability sets and ``Seccomp`` line either way,
    checked 2026-11-25). It skips podman's client and conmon: about 0.1 s less per launch, which
    the bench's startup section measures against ``podman exec``. Used only when the runtime,
    under its default state root (rootful podman's), reports this container running."""
    proc = podman("inspect", "--format", "{{.Id}} {{.OCIRuntime}}", name, check=False)
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) != 2 or words[1] not in DIRECT_RUNTIMES:
        return None
    cid, runtime_name = words
    runtime = shutil.which(runtime_name)
    if not runtime or not re.fullmatch(r"[0-9a-f]{64}", cid):
        return None
    try:
        state = subprocess.run(
            [runtime, "state", cid],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        status = json.loads(state.stdout).get("status") if state.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError):
        return None
    return (runtime, cid) if status == "running" else None


def podman(
    *args: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` with hpcenv's containers.conf; raises BenchCommandError on failure."""
    from hpcenv.engines import engine_env

    proc = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=engine_env(),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BenchCommandError(f"podman {' '.join(args[:3])} failed: {tail[0]}")
    return proc
