"""A connection never made (refused, unknown host) is not a lost connection (issue 40, class 9):
nothing was sent, so submit neither retries it nor says the job "may have been submitted";
``--ssh-config /dev/null`` (the usual "no configuration") is taken. The transports are the real
OpenSSH client and paramiko against a port nothing listens on and a name that does not resolve
(``.invalid``, RFC 2606); the process tests run the installed ``hpcenv``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.submit import submit
from hpcenv.jobs.transport import (
    Completed,
    LocalTransport,
    NotConnected,
    OpenSshTransport,
    SshTransport,
    Transport,
    TransportError,
    TransportSpec,
)
from hpcenv.site import Site

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
NO_HOST = "no-such-host.invalid"


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("where", ["refused", "dns"])
def test_openssh_reports_a_connection_never_made(where: str) -> None:
    host, port = ("127.0.0.1", _closed_port()) if where == "refused" else (NO_HOST, None)
    t = OpenSshTransport(TransportSpec(kind="ssh", host=host, port=port, connect_timeout=5))
    with pytest.raises(NotConnected, match="Connection refused|Could not resolve"):
        t.run("true")


@pytest.mark.parametrize("where", ["refused", "dns"])
def test_paramiko_reports_a_connection_never_made(where: str, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    host, port = ("127.0.0.1", _closed_port()) if where == "refused" else (NO_HOST, 22)
    spec = TransportSpec(
        kind="ssh", host=host, port=port, known_hosts=str(known), client="paramiko"
    )
    with pytest.raises(NotConnected):
        SshTransport(spec).run("true")


class Refused(Transport):
    def __init__(self) -> None:
        self.spec = LocalTransport().spec
        self.calls = 0

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        self.calls += 1
        raise NotConnected(
            "ssh to login failed: ssh: connect to host x port 22: Connection refused"
        )

    def close(self) -> None:
        return None


def test_submit_does_not_retry_a_refused_connection(
    local_site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    job = JobSpec(name="r", command=["true"], launch="single", cores_per_rank=1)
    t = Refused()
    with pytest.raises(NotConnected) as err:
        submit(local_site, job, t, retry_wait=5.0)
    assert t.calls == 1
    assert "nothing was submitted" in str(err.value)
    assert "may have been submitted" not in str(err.value)


def _submit(*ssh: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    argv = [HPCENV, "submit", "--site", "local", "--no-container", "--transport", "ssh", *ssh]
    env = {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")}
    start = time.monotonic()
    proc = subprocess.run(
        [*argv, "--", "true"], capture_output=True, text=True, timeout=120, env=env
    )
    return proc, time.monotonic() - start


@pytest.mark.parametrize("where", ["refused", "dns"])
def test_the_installed_hpcenv_says_nothing_was_submitted(where: str, tmp_path: Path) -> None:
    if where == "refused":
        ssh = ["--ssh-host", "127.0.0.1", "--ssh-port", str(_closed_port())]
    else:
        ssh = ["--ssh-host", NO_HOST]
    proc, took = _submit(*ssh, "--ssh-config", "/dev/null", tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ssh to "), proc.stderr
    assert lines[0].endswith("; nothing was submitted"), lines[0]
    assert "may have been" not in lines[0] and "attempt" not in lines[0]
    assert took < 30  # no retries with their waits (2 s, then 4 s)


def test_ssh_config_dev_null_is_taken(tmp_path: Path) -> None:
    """``-F /dev/null`` reaches ssh (it used to be refused as "ssh config file not found")."""
    t = OpenSshTransport(TransportSpec(kind="ssh", host="h", ssh_config="/dev/null"))
    assert t.argv("true")[1:3] == ["-F", "/dev/null"]
    proc, _ = _submit("--ssh-host", NO_HOST, "--ssh-config", "/dev/null", tmp_path=tmp_path)
    assert "ssh config file not found" not in proc.stderr, proc.stderr
    missing, _ = _submit(
        "--ssh-host", NO_HOST, "--ssh-config", "/nonexistent/cfg", tmp_path=tmp_path
    )
    assert missing.returncode == 2 and "ssh config file not found" in missing.stderr


@pytest.mark.parametrize(
    ("stderr", "never_sent"),
    [
        ("ssh: connect to host login port 22: Connection refused", True),
        ("ssh: connect to host login port 22: Connection timed out", True),
        ("ssh: connect to host 10.0.0.1 port 22: No route to host", True),
        ("ssh: Could not resolve hostname login: Name or service not known", True),
        ("Connection closed by 10.0.0.1 port 22", False),  # it may have been sent
        ("client_loop: send disconnect: Broken pipe", False),
        ("Read from remote host login: Connection reset by peer", False),
    ],
)
def test_only_a_connection_never_made_is_not_connected(stderr: str, never_sent: bool) -> None:
    t = OpenSshTransport(TransportSpec(kind="ssh", host="login"))
    with pytest.raises(TransportError) as err:
        t._raise_if_ssh_failed(stderr + "\n")
    assert isinstance(err.value, NotConnected) is never_sent
