"""Transports: where scheduler commands run. Local subprocess, or SSH to a login node (Fabric).

Both take one shell command line (built with :func:`hpcenv.jobs.shell.join`) and optional stdin
(the job script: ``sbatch``, ``bsub`` and ``qsub`` all read it from stdin, so nothing is copied).
SSH uses key authentication and checks the host key against a known_hosts file with paramiko's
RejectPolicy: an unknown or changed host key fails; it is never added silently.

Time limits: connecting (TCP, SSH banner, authentication) has ``connect_timeout`` seconds in
all; a command has ``timeout`` seconds from start to exit status, however its output trickles.
A lost or timed-out connection is a :class:`TransportError`: the command may or may not have
run, which :func:`hpcenv.jobs.submit.submit` handles without submitting twice.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hpcenv.errors import ConfigError, JobError
from hpcenv.site import Site

CONNECT_TIMEOUT = 15.0  # TCP + banner + auth: a login node that answers at all does so in this


class TransportError(JobError):
    """The connection failed or timed out: a command sent may or may not have run."""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str

    def message(self) -> str:
        """The command's own words: last non-empty stderr lines, else stdout."""
        text = self.stderr.strip() or self.stdout.strip()
        return " | ".join(text.splitlines()[-3:]) or f"exit status {self.returncode}"


class TransportSpec(BaseModel):
    """Serializable description of a transport (kept in job records)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local", "ssh"] = "local"
    host: str | None = None
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None
    env: dict[str, str] = {}
    connect_timeout: float = CONNECT_TIMEOUT


def _exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())


class Transport(ABC):
    spec: TransportSpec

    @abstractmethod
    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        """Run one shell command line; never raises on a non-zero exit."""

    def describe(self) -> str:
        s = self.spec
        return "local" if s.kind == "local" else f"ssh://{s.user or ''}@{s.host}:{s.port}"

    @abstractmethod
    def close(self) -> None:
        """Release connections."""


class LocalTransport(Transport):
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.spec = TransportSpec(kind="local", env=env or {})

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                input=stdin,
                capture_output=True,
                text=True,
                errors="replace",  # a scheduler's non-UTF-8 output: U+FFFD, not a traceback
                timeout=timeout,
                env={**os.environ, **self.spec.env},
            )
        except subprocess.TimeoutExpired as err:
            raise TransportError(f"command timed out after {timeout:.0f} s: {command}") from err
        return Completed(proc.returncode, proc.stdout, proc.stderr)

    def close(self) -> None:
        """Nothing to release."""
        return None


class SshTransport(Transport):
    """Fabric connection with key auth and strict host-key checking."""

    def __init__(self, spec: TransportSpec) -> None:
        from hpcenv.extras import require_extra

        require_extra("ssh", "the ssh transport")
        if not spec.host:
            raise ConfigError("ssh transport needs a host (site ssh.host or --ssh-host)")
        known = Path(os.path.expanduser(spec.known_hosts or "~/.ssh/known_hosts"))
        if not known.is_file():
            raise ConfigError(f"known_hosts file not found: {known} (host keys are never added)")
        self.spec = spec
        self._known = known
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None:
            import paramiko
            from fabric import Connection

            limit = self.spec.connect_timeout
            kwargs: dict[str, Any] = {
                "allow_agent": False,
                "look_for_keys": False,
                "banner_timeout": limit,
                "auth_timeout": limit,
            }
            if self.spec.key_file:
                kwargs["key_filename"] = os.path.expanduser(self.spec.key_file)
            else:
                kwargs["look_for_keys"] = True
            conn = Connection(
                self.spec.host,
                user=self.spec.user,
                port=self.spec.port,
                connect_kwargs=kwargs,
                connect_timeout=limit,
            )
            # Fabric installs AutoAddPolicy; replace it: unknown keys are refused.
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
            conn.client.load_host_keys(str(self._known))
            self._conn = conn
        return self._conn

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        """Run over the Fabric connection's paramiko client (Fabric's own ``run`` feeds stdin
        one byte per 10 ms, which makes piping a job script take a minute). The whole command,
        output included, must finish within ``timeout`` seconds."""
        import paramiko

        command = _exports(self.spec.env) + command
        try:
            conn = self._connection()
            conn.open()
            conn.client.get_transport().set_keepalive(15)
            chan = conn.client.get_transport().open_session(timeout=self.spec.connect_timeout)
        except paramiko.BadHostKeyException as exc:
            raise JobError(f"ssh to {self.describe()} failed: {exc}") from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise TransportError(f"ssh to {self.describe()} failed: {exc}") from exc
        try:
            return self._exchange(chan, command, stdin, timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            if isinstance(exc, TimeoutError):
                raise TransportError(
                    f"ssh command timed out after {timeout:.0f} s: {command}"
                ) from exc
            raise TransportError(f"ssh to {self.describe()} failed: {exc}") from exc
        finally:
            chan.close()

    @staticmethod
    def _exchange(chan: Any, command: str, stdin: str | None, timeout: float) -> Completed:
        """Send ``command`` and ``stdin``, collect stdout/stderr until exit, within a deadline."""
        deadline = time.monotonic() + timeout
        chan.settimeout(max(0.1, timeout))
        chan.exec_command(command)
        if stdin is not None:
            chan.sendall(stdin.encode())
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        chan.settimeout(0.2)
        while True:
            got = False
            for ready, recv, buf in (
                (chan.recv_ready, chan.recv, out),
                (chan.recv_stderr_ready, chan.recv_stderr, err),
            ):
                while ready():
                    buf += recv(65536)
                    got = True
            pending = chan.recv_ready() or chan.recv_stderr_ready()
            if chan.exit_status_ready() and (chan.eof_received or chan.closed) and not pending:
                break
            if chan.closed and not pending:
                raise EOFError("the connection closed before the command finished")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no exit status within {timeout:.0f} s")
            if not got:
                time.sleep(0.02)
        code = chan.recv_exit_status()
        return Completed(code, out.decode(errors="replace"), err.decode(errors="replace"))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def make_transport(spec: TransportSpec) -> Transport:
    return LocalTransport(spec.env) if spec.kind == "local" else SshTransport(spec)


def ssh_spec(
    site: Site,
    host: str | None = None,
    port: int | None = None,
    user: str | None = None,
    key_file: str | None = None,
    known_hosts: str | None = None,
    *,
    env: dict[str, str],
) -> TransportSpec:
    """An SSH transport from the site's ``ssh`` section, overridden by explicit values; ``env``:
    what the scheduler's client commands need there (:func:`hpcenv.jobs.schedulers.client_env`)."""
    base = site.ssh
    host = host or (base.host if base else None) or site.scheduler.login_host
    if not host:
        raise ConfigError(f"site {site.name!r} has no ssh.host or login_host; pass --ssh-host")
    return TransportSpec(
        kind="ssh",
        host=host,
        port=port or (base.port if base else 22),
        user=user or (base.user if base else None),
        key_file=key_file or (base.key_file if base else None),
        known_hosts=known_hosts or (base.known_hosts if base else None),
        env=env,
    )
