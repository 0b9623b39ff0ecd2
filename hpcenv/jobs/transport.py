"""Transports: where scheduler commands run. Local subprocess, or SSH to a login node (Fabric).

Both take one shell command line (built with :func:`hpcenv.jobs.shell.join`) and optional stdin
(the job script: ``sbatch``, ``bsub`` and ``qsub`` all read it from stdin, so nothing is copied).
SSH uses key authentication and checks the host key against a known_hosts file with paramiko's
RejectPolicy: an unknown or changed host key fails; it is never added silently.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hpcenv.errors import ConfigError, JobError
from hpcenv.site import Site


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


def client_env(site: Site) -> dict[str, str]:
    """Variables the scheduler's client commands need for ``site`` (SLURM_CONF for a second
    cluster served from the same login host, e.g. the ``local-2node`` rehearsal)."""
    if site.scheduler.conf and site.scheduler.kind == "slurm":
        return {"SLURM_CONF": site.scheduler.conf}
    return {}


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
                timeout=timeout,
                env={**os.environ, **self.spec.env},
            )
        except subprocess.TimeoutExpired as err:
            raise JobError(f"command timed out after {timeout:.0f} s: {command}") from err
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

            kwargs: dict[str, Any] = {"allow_agent": False, "look_for_keys": False}
            if self.spec.key_file:
                kwargs["key_filename"] = os.path.expanduser(self.spec.key_file)
            else:
                kwargs["look_for_keys"] = True
            conn = Connection(
                self.spec.host,
                user=self.spec.user,
                port=self.spec.port,
                connect_kwargs=kwargs,
                connect_timeout=15,
            )
            # Fabric installs AutoAddPolicy; replace it: unknown keys are refused.
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
            conn.client.load_host_keys(str(self._known))
            self._conn = conn
        return self._conn

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        """Run over the Fabric connection's paramiko client (Fabric's own ``run`` feeds stdin
        one byte per 10 ms, which makes piping a job script take a minute)."""

        import paramiko

        try:
            conn = self._connection()
            conn.open()
            command = _exports(self.spec.env) + command
            chan_in, chan_out, chan_err = conn.client.exec_command(command, timeout=timeout)
            if stdin is not None:
                chan_in.write(stdin)
                chan_in.flush()
            chan_in.channel.shutdown_write()
            out = chan_out.read().decode(errors="replace")
            err = chan_err.read().decode(errors="replace")
            code = chan_out.channel.recv_exit_status()
        except TimeoutError as exc:
            raise JobError(f"ssh command timed out after {timeout:.0f} s: {command}") from exc
        except (paramiko.SSHException, OSError) as exc:
            raise JobError(f"ssh to {self.describe()} failed: {exc}") from exc
        return Completed(code, out, err)

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
) -> TransportSpec:
    """An SSH transport from the site's ``ssh`` section, overridden by explicit values."""
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
        env=client_env(site),
    )
