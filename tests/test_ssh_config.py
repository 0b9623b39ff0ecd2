"""The OpenSSH transport the way HPC users reach login nodes, against real loopback sshd's:
Host aliases from an ssh config, a ProxyJump chain through a second sshd, a submission through
an existing ControlMaster socket after the key is gone (the MFA case: no new authentication,
counted in the server's own log), and ssh-agent. Submissions run the installed ``hpcenv``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hpcenv.errors import JobError
from hpcenv.jobs.transport import OpenSshTransport, TransportError, TransportSpec

if TYPE_CHECKING:
    from services import SlurmInfo, SshdInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.ssh, pytest.mark.timeout(180), pytest.mark.alongside]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def _host(alias: str, info: SshdInfo, key: Path | None, port: int = 0, **extra: str) -> str:
    """One Host block; ssh takes the first value of a keyword, so ``port`` replaces the info's."""
    lines = [
        f"Host {alias}",
        f"  HostName {info.host}",
        f"  Port {port or info.port}",
        "  User root",
        f"  UserKnownHostsFile {info.known_hosts}",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
    ]
    if key is not None:
        lines += [f"  IdentityFile {key}", "  IdentitiesOnly yes"]
    lines += [f"  {k} {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def _accepted(info: SshdInfo) -> int:
    """Logins the server accepted so far (its own log, LogLevel VERBOSE)."""
    log = info.key.parent / "sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey") if log.exists() else 0


def _ssh(cfg: Path, host: str) -> OpenSshTransport:
    return OpenSshTransport(TransportSpec(kind="ssh", host=host, ssh_config=str(cfg)))


def _submit(
    tmp_path: Path, host: str, cfg: Path, command: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    argv = [HPCENV, "submit", "--site", "local", "--no-container", "--single"]
    argv += ["--workdir", str(tmp_path / "remote"), "--json", "--wait", *extra]
    argv += ["--transport", "ssh", "--ssh-host", host, "--ssh-config", str(cfg)]
    return _hpcenv(tmp_path, *argv[1:], "--", "bash", "-c", command)


def _hpcenv(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, env=env, timeout=150, check=False
    )


def test_alias_from_the_ssh_config(sshd: SshdInfo, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(_host("login", sshd, sshd.key))
    t = _ssh(cfg, "login")
    res = t.run("wc -c; echo err >&2; exit 7", stdin="x" * 100_000 + "\n")
    assert (res.returncode, res.stdout.strip(), res.stderr.strip()) == (7, "100001", "err")
    assert t.describe() == "ssh://login"  # HostName, Port, User: the config's, not on argv
    argv = t.argv("true")
    assert argv[-3:] == ["--", "login", "true"] and "-p" not in argv and "-l" not in argv


def test_proxyjump_chain_through_a_second_sshd(
    sshd: SshdInfo, sshd_jump: SshdInfo, tmp_path: Path
) -> None:
    """target <- hop (the first sshd) <- jump (the second): a two-hop ProxyJump chain. Each
    server's log counts the logins that went through it; a dead jump host fails in one line."""
    cfg = tmp_path / "config"
    cfg.write_text(
        _host("jump", sshd_jump, sshd_jump.key)
        + _host("hop", sshd, sshd.key)
        + _host("target", sshd, sshd.key, ProxyJump="jump,hop")
        + _host("deadjump", sshd, sshd.key, port=1)
        + _host("unreachable", sshd, sshd.key, ProxyJump="deadjump")
    )
    before_jump, before_main = _accepted(sshd_jump), _accepted(sshd)
    res = _ssh(cfg, "target").run("echo through-the-chain")
    assert (res.returncode, res.stdout.strip()) == (0, "through-the-chain"), res.stderr
    assert _accepted(sshd_jump) == before_jump + 1  # the first hop
    assert _accepted(sshd) == before_main + 2  # the second hop and the target
    with pytest.raises(TransportError, match=r"^ssh to ssh://unreachable failed: .*"):
        _ssh(cfg, "unreachable").run("true")


@pytest.mark.slurm
def test_submission_through_a_proxyjump(
    slurm: SlurmInfo, sshd: SshdInfo, sshd_jump: SshdInfo, tmp_path: Path
) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        _host("jump", sshd_jump, sshd_jump.key) + _host("login", sshd, sshd.key, ProxyJump="jump")
    )
    before = _accepted(sshd_jump)
    res = _submit(tmp_path, "login", cfg, "echo job-via-jump")
    assert res.returncode == 0, res.stderr
    sub = json.loads(res.stdout)
    assert sub["status"]["state"] == "COMPLETED"
    assert sub["transport"]["host"] == "login" and sub["transport"]["ssh_config"] == str(cfg)
    assert _accepted(sshd_jump) > before  # it went through the jump host
    logs = _hpcenv(tmp_path, "logs", sub["job_id"])  # the record follows the same path
    assert "job-via-jump" in logs.stdout, logs.stderr


@pytest.fixture
def master(sshd: SshdInfo, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A ControlMaster the user opened (``ssh -MNf``) with a key that is then deleted: every
    later login through this config can only succeed over the master's socket."""
    key = tmp_path / "mfa_key"
    shutil.copy(sshd.key, key)
    key.chmod(0o600)
    sock = tmp_path / "cm.sock"
    cfg = tmp_path / "config"
    cfg.write_text(
        _host("login", sshd, key, ControlMaster="auto", ControlPath=str(sock))
        + _host("nomaster", sshd, key, ControlMaster="no", ControlPath="none")
    )
    subprocess.run(  # -f: backgrounds after authenticating; its output must not be a pipe we wait on
        ["ssh", "-F", str(cfg), "-MNf", "login"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=30,
    )
    assert sock.is_socket()
    key.unlink()  # the "MFA code" is spent: no new login can authenticate
    try:
        yield cfg, sock
    finally:
        subprocess.run(
            ["ssh", "-F", str(cfg), "-O", "exit", "login"], capture_output=True, timeout=30
        )


def test_an_existing_controlmaster_is_reused_without_authenticating(
    sshd: SshdInfo, master: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg, _ = master
    before = _accepted(sshd)
    res = _ssh(cfg, "login").run("echo over-the-master")
    assert (res.returncode, res.stdout.strip()) == (0, "over-the-master"), res.stderr
    assert _accepted(sshd) == before  # no new authentication at the server
    with pytest.raises(JobError, match=r"Permission denied.*ControlMaster"):
        _ssh(cfg, "nomaster").run("true")  # without the socket the key is really gone
    failed = _hpcenv(
        tmp_path,
        *("submit", "--site", "local", "--no-container", "--single", "--transport", "ssh"),
        *("--ssh-host", "nomaster", "--ssh-config", str(cfg), "--", "true"),
    )
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ssh to ssh://nomaster failed:"), lines


@pytest.mark.slurm
def test_submission_through_an_existing_controlmaster(
    slurm: SlurmInfo, sshd: SshdInfo, master: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg, _ = master
    before = _accepted(sshd)
    res = _submit(tmp_path, "login", cfg, "echo job-over-the-master")
    assert res.returncode == 0, res.stderr
    sub = json.loads(res.stdout)
    assert sub["status"]["state"] == "COMPLETED"
    st = _hpcenv(tmp_path, "status", sub["job_id"])
    assert st.stdout.startswith(f"job {sub['job_id']}: COMPLETED"), st.stderr
    assert "job-over-the-master" in _hpcenv(tmp_path, "logs", sub["job_id"]).stdout
    assert _accepted(sshd) == before  # submit, wait, status, logs: not one new login


def test_ssh_agent_holds_the_key(
    sshd: SshdInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No IdentityFile anywhere: the key is only in an ssh-agent (SSH_AUTH_SOCK)."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.run(
        ["ssh-agent", "-a", str(sock), "-s"], capture_output=True, text=True, check=True
    )
    pid = next(
        ln.split("=")[1].split(";")[0]
        for ln in proc.stdout.splitlines()
        if ln.startswith("SSH_AGENT_PID=")
    )
    env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
    try:
        subprocess.run(["ssh-add", "-q", str(sshd.key)], env=env, check=True, timeout=30)
        cfg = tmp_path / "config"
        cfg.write_text(_host("login", sshd, None))
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        res = _ssh(cfg, "login").run("echo via-agent")
        assert (res.returncode, res.stdout.strip()) == (0, "via-agent"), res.stderr
    finally:
        os.kill(int(pid), 15)  # the agent this test started
