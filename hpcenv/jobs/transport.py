"""Transports: where scheduler commands run. Local subprocess, or SSH to a login node.

All take one shell command line (built with :func:`hpcenv.jobs.shell.join`) and optional stdin
(the job script: ``sbatch``, ``bsub`` and ``qsub`` all read it from stdin, so nothing is copied).

SSH has two clients, chosen by :attr:`TransportSpec.client`:

- ``openssh`` (the default): the system ``ssh`` client, one process per command
  (:class:`OpenSshTransport`). It is what reads the user's whole ``~/.ssh/config`` (or
  ``--ssh-config FILE``): Host aliases, HostName, User, Port, IdentityFile, ProxyJump chains,
  ControlMaster/ControlPath/ControlPersist, certificates, GSSAPI, and ssh-agent. Login nodes
  behind MFA need exactly that: the user logs in once (``ssh -MNf HOST``, or ``ControlMaster
  auto`` in the config) and every later command goes through the master's socket without
  authenticating again (ssh_config(5), ControlMaster). paramiko (under Fabric) reads only parts
  of ssh_config and cannot use a ControlMaster socket at all: multiplexing is an open request
  (paramiko issue #852, its mux pull requests #1341/#1931 unmerged) and Fabric passes its
  connection options to paramiko (fabric issue #2103, closed for that reason), read 2026-11-24.
- ``paramiko``: the Fabric/paramiko connection kept for hosts without an OpenSSH client
  (:class:`SshTransport`, the ``[ssh]`` extra): key authentication only.

Either way host keys are checked against known_hosts and an unknown or changed key fails; a
key is never added silently (``StrictHostKeyChecking=yes``, paramiko's RejectPolicy). hpcenv
never answers a prompt (``BatchMode=yes``): a login that needs a password or an MFA code fails
with one line that says to log in once with a ControlMaster socket.

Time limits: connecting (TCP, SSH banner, authentication) has ``connect_timeout`` seconds in
all; a command has ``timeout`` seconds from start to exit status, however its output trickles.
A lost or timed-out connection is a :class:`TransportError`: the command may or may not have
run, which :func:`hpcenv.jobs.submit.submit` handles without submitting twice.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from hpcenv.errors import ConfigError, EnvironmentProblem, JobError
from hpcenv.signals import child_setup
from hpcenv.site import Site

CONNECT_TIMEOUT = 15.0  # TCP + banner + auth: a login node that answers at all does so in this


class TransportError(JobError):
    """The connection failed or timed out: a command sent may or may not have run."""


class NotConnected(TransportError):
    """No connection was made (refused, unknown host, no route): nothing was sent, so nothing
    ran; retrying at once would meet the same answer."""


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
    port: int | None = None  # None: the ssh config's Port for the host, else 22
    user: str | None = None  # None: the ssh config's User, else the local user
    key_file: str | None = None
    known_hosts: str | None = None
    env: dict[str, str] = {}
    connect_timeout: float = CONNECT_TIMEOUT
    client: Literal["openssh", "paramiko"] = "openssh"
    ssh_config: str | None = None  # openssh: ``ssh -F FILE`` instead of ~/.ssh/config

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        """A host name or ssh_config alias; never one that ``ssh`` could read as an option."""
        if value is not None and not HOST.fullmatch(value):
            why = "it starts with '-'" if value.startswith("-") else "letters, digits, . _ : -"
            raise ValueError(f"ssh host {value!r} is not a host name or alias ({why})")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        if value is not None and not USER.fullmatch(value):
            raise ValueError(f"ssh user {value!r} is not a user name")
        return value

    def describe(self) -> str:
        """``local``, or ``ssh://[user@]host[:port]`` (user and port only where given: the
        ssh config supplies the rest)."""
        if self.kind == "local":
            return "local"
        user = f"{self.user}@" if self.user else ""
        return f"ssh://{user}{self.host}" + (f":{self.port}" if self.port else "")


HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}")
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())


class Transport(ABC):
    spec: TransportSpec

    @abstractmethod
    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        """Run one shell command line; never raises on a non-zero exit."""

    def describe(self) -> str:
        return self.spec.describe()

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
                preexec_fn=child_setup(),  # submit's Ctrl-C window (hpcenv.signals)
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
                port=self.spec.port or 22,
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
        from paramiko.ssh_exception import NoValidConnectionsError

        command = _exports(self.spec.env) + command
        try:
            conn = self._connection()
            conn.open()
            conn.client.get_transport().set_keepalive(15)
            chan = conn.client.get_transport().open_session(timeout=self.spec.connect_timeout)
        except paramiko.BadHostKeyException as exc:
            raise JobError(f"ssh to {self.describe()} failed: {exc}") from exc
        except (socket.gaierror, ConnectionRefusedError, NoValidConnectionsError) as exc:
            self.close()  # DNS or a refused port: nothing was sent
            raise NotConnected(f"ssh to {self.describe()} failed: {exc}") from exc
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


# OpenSSH's own words when it, not the remote command, ended with 255 (ssh(1): "ssh exits with
# the exit status of the remote command or with 255 if an error occurred"). Matched on stderr.
_SSH_HOSTKEY = re.compile(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED")
_SSH_AUTH = re.compile(r"Permission denied \(|Too many authentication failures")
_SSH_CONFIG = re.compile(r"Bad configuration option|bad configuration options|Bad owner or perm")
# ssh(1) never reached the host: the command was never sent (ssh's own words, OpenSSH 9.2:
# "ssh: connect to host H port 22: Connection refused", "ssh: Could not resolve hostname H").
_SSH_NOT_CONNECTED = re.compile(
    r"^ssh: (connect to host \S+ port \d+: (Connection refused|No route to host|"
    r"Network is unreachable|Connection timed out)|Could not resolve hostname)",
    re.MULTILINE,
)
_SSH_FAILED = re.compile(
    r"^ssh: |Connection (closed|reset|timed out|refused)|kex_exchange_identification|"
    r"banner exchange|Received disconnect|Timeout, server|client_loop|Broken pipe|"
    r"stdio forwarding failed|open failed|mux_client|Control socket|ControlSocket|"
    r"Could not resolve|No route to host|UNPROTECTED PRIVATE KEY",
    re.MULTILINE,
)


class OpenSshTransport(Transport):
    """The system OpenSSH client: ``ssh [-F CONFIG] -o BatchMode=yes ... -- HOST COMMAND``.

    Nothing the user's ssh config says is overridden except what hpcenv must hold: no prompts
    (``BatchMode=yes``), host keys checked (``StrictHostKeyChecking=yes``), a connect timeout,
    and keepalives. ``port``, ``user``, ``key_file`` and ``known_hosts`` are passed only when
    given, so a Host alias keeps its own HostName, User, Port, IdentityFile, ProxyJump and
    ControlPath. ``ssh`` reads an option that appears before the host only; the host is
    checked not to start with ``-`` (:class:`TransportSpec`) and follows ``--``, after which
    OpenSSH parses no options. Output goes to unnamed files, not pipes, so a ControlPersist
    master that ``ssh`` leaves behind cannot hold the command open. No key, passphrase or
    agent socket is logged: messages carry the host and ssh's own last lines.

    A ProxyJump hop is an ``ssh -W`` that OpenSSH starts with the same ``-F`` file but without
    the ``-o`` options above (ssh(1), ``-J``), so the jump host's key checking and prompts are
    what the config says for that host; ``StrictHostKeyChecking yes`` there keeps it strict.
    """

    def __init__(self, spec: TransportSpec) -> None:
        if not spec.host:
            raise ConfigError("ssh transport needs a host (site ssh.host or --ssh-host)")
        exe = shutil.which("ssh")
        if exe is None:
            raise EnvironmentProblem(
                "the ssh transport runs the system OpenSSH client, and ssh is not on PATH; "
                "install openssh-client, or pass --ssh-client paramiko"
            )
        for what, value in (
            ("ssh config file", spec.ssh_config),
            ("ssh key file", spec.key_file),
            ("known_hosts file", spec.known_hosts),
        ):
            if what == "ssh config file" and value and os.path.expanduser(value) == os.devnull:
                continue  # ssh -F /dev/null: the usual "no configuration"
            if value and not Path(os.path.expanduser(value)).is_file():
                extra = " (host keys are never added)" if what == "known_hosts file" else ""
                raise ConfigError(f"{what} not found: {value}{extra}")
        self.spec = spec
        self._exe = exe

    def argv(self, command: str) -> list[str]:
        """The ``ssh`` command line that runs ``command`` (already prefixed with exports)."""
        s = self.spec
        argv = [self._exe]
        if s.ssh_config:
            argv += ["-F", os.path.expanduser(s.ssh_config)]
        argv += [
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"ConnectTimeout={max(1, math.ceil(s.connect_timeout))}",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=3",
        ]
        if s.port:
            argv += ["-p", str(s.port)]
        if s.user:
            argv += ["-l", s.user]
        if s.key_file:
            argv += ["-i", _ssh_path(s.key_file), "-o", "IdentitiesOnly=yes"]
        if s.known_hosts:
            argv += ["-o", f'UserKnownHostsFile="{_ssh_path(s.known_hosts)}"']
        assert s.host is not None
        return [*argv, "--", s.host, command]

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        argv = self.argv(_exports(self.spec.env) + command)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            with tempfile.TemporaryFile() as inp:
                if stdin is not None:
                    inp.write(stdin.encode())
                    inp.seek(0)
                try:
                    proc = subprocess.run(
                        argv,
                        stdin=inp if stdin is not None else subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        timeout=timeout,
                        preexec_fn=child_setup(),  # submit's Ctrl-C window (hpcenv.signals)
                    )
                except subprocess.TimeoutExpired as exc:
                    raise TransportError(
                        f"ssh command timed out after {timeout:.0f} s: {command}"
                    ) from exc
            out.seek(0)
            err.seek(0)
            done = Completed(
                proc.returncode,
                out.read().decode(errors="replace"),
                err.read().decode(errors="replace"),
            )
        if done.returncode == 255:
            self._raise_if_ssh_failed(done.stderr)
        return done

    def _raise_if_ssh_failed(self, stderr: str) -> None:
        """ssh's own failure (exit 255 with its words on stderr) as one line; a remote command
        that exits 255 by itself is returned as its result."""
        from hpcenv.printable import printable

        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        said = printable(" | ".join(lines[-2:]))[:400]
        where = f"ssh to {self.describe()} failed: {said}"
        if _SSH_HOSTKEY.search(stderr):
            raise JobError(
                f"{where} (the host key is not in known_hosts or does not match; hpcenv never "
                "adds one: check it, then connect once with ssh or add it to known_hosts)"
            )
        if _SSH_AUTH.search(stderr):
            raise JobError(
                f"{where} (hpcenv answers no password or MFA prompt: log in once with ssh using "
                "a ControlMaster/ControlPath in your ssh config, or load the key into ssh-agent)"
            )
        if _SSH_CONFIG.search(stderr):
            raise ConfigError(where)
        if _SSH_NOT_CONNECTED.search(stderr):
            raise NotConnected(where)
        if _SSH_FAILED.search(stderr):
            raise TransportError(where)

    def close(self) -> None:
        """Nothing held: each command is its own ``ssh`` (a ControlMaster is the user's)."""
        return None


def _ssh_path(path: str) -> str:
    """A file path as ssh's option values take it: ``~`` expanded, ``%`` (a token) doubled."""
    return os.path.expanduser(path).replace("%", "%%")


def make_transport(spec: TransportSpec) -> Transport:
    if spec.kind == "local":
        return LocalTransport(spec.env)
    return OpenSshTransport(spec) if spec.client == "openssh" else SshTransport(spec)


def ssh_spec(
    site: Site,
    host: str | None = None,
    port: int | None = None,
    user: str | None = None,
    key_file: str | None = None,
    known_hosts: str | None = None,
    *,
    env: dict[str, str],
    client: Literal["openssh", "paramiko"] = "openssh",
    ssh_config: str | None = None,
) -> TransportSpec:
    """An SSH transport from the site's ``ssh`` section, overridden by explicit values; ``env``:
    what the scheduler's client commands need there (:func:`hpcenv.jobs.schedulers.client_env`).
    A port the site file does not set is left to the ssh config (an alias's own Port)."""
    base = site.ssh
    host = host or (base.host if base else None) or site.scheduler.login_host
    if not host:
        raise ConfigError(f"site {site.name!r} has no ssh.host or login_host; pass --ssh-host")
    site_port = base.port if base and "port" in base.model_fields_set else None
    try:
        return TransportSpec(
            kind="ssh",
            host=host,
            port=port or site_port,
            user=user or (base.user if base else None),
            key_file=key_file or (base.key_file if base else None),
            known_hosts=known_hosts or (base.known_hosts if base else None),
            env=env,
            client=client,
            ssh_config=ssh_config,
        )
    except ValueError as err:  # pydantic's ValidationError: the validator's own line
        raise ConfigError(_first_error(err)) from None


def _first_error(err: ValueError) -> str:
    errors = getattr(err, "errors", None)
    if callable(errors):
        msg = str(errors()[0].get("msg", err))
        return msg.removeprefix("Value error, ")
    return str(err).splitlines()[0]
