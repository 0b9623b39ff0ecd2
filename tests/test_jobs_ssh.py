"""SSH transport against the project's loopback sshd: key auth, host keys checked against
known_hosts with RejectPolicy (never added), and the CLI submitting and following a job over SSH."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.errors import ConfigError, JobError
from hpcenv.jobs import SshTransport, TransportSpec
from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.transport import Completed, Transport, TransportError

if TYPE_CHECKING:
    from services import SlurmInfo, SshdInfo

pytest_plugins = ["services"]  # the slurm and sshd fixtures
pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120), pytest.mark.alongside]


def _spec(info: SshdInfo, known_hosts: Path) -> TransportSpec:
    return TransportSpec(
        kind="ssh",
        host=info.host,
        port=info.port,
        user="root",
        key_file=str(info.key),
        known_hosts=str(known_hosts),
    )


def test_ssh_runs_commands_with_stdin(sshd: SshdInfo) -> None:
    t = SshTransport(_spec(sshd, sshd.known_hosts))
    try:
        big = "x" * 200_000 + "\n"
        res = t.run("wc -c; echo err >&2; exit 7", stdin=big)
        assert (res.returncode, res.stdout.strip(), res.stderr.strip()) == (7, "200001", "err")
        assert t.describe() == f"ssh://root@{sshd.host}:{sshd.port}"
    finally:
        t.close()


def test_unknown_host_key_is_rejected(sshd: SshdInfo, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "known_hosts_wrong"
    key = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    wrong.write_text(f"[{sshd.host}]:{sshd.port} {key}\n")
    with pytest.raises(JobError, match="ssh to .* failed: .*(BadHostKey|does not match|Server)"):
        SshTransport(_spec(sshd, wrong)).run("true")
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    with pytest.raises(JobError, match="not found in known_hosts"):
        SshTransport(_spec(sshd, empty)).run("true")
    assert empty.read_text() == ""  # never added
    with pytest.raises(ConfigError, match="known_hosts file not found"):
        SshTransport(_spec(sshd, tmp_path / "missing"))


@pytest.mark.slurm
def test_cli_submit_over_ssh_then_status_and_logs(
    runner: CliRunner,
    slurm: SlurmInfo,
    sshd: SshdInfo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    common = [
        "--transport",
        "ssh",
        "--ssh-host",
        sshd.host,
        "--ssh-port",
        str(sshd.port),
        "--ssh-user",
        "root",
        "--ssh-key",
        str(sshd.key),
        "--known-hosts",
        str(sshd.known_hosts),
    ]
    res = runner.invoke(
        app,
        [
            "submit",
            "--site",
            "local",
            "--no-container",
            "--single",
            "--workdir",
            str(tmp_path / "remote"),
            "--json",
            "--wait",
            *common,
            "--",
            "bash",
            "-c",
            "echo from-ssh-job on $(hostname -s)",
        ],
    )
    assert res.exit_code == 0, res.output
    sub = json.loads(res.stdout)
    assert sub["transport"]["kind"] == "ssh" and sub["status"]["state"] == "COMPLETED"
    st = runner.invoke(app, ["status", sub["job_id"]])  # follows the record: over SSH again
    assert st.stdout.startswith(f"job {sub['job_id']}: COMPLETED")
    assert "from-ssh-job on" in runner.invoke(app, ["logs", sub["job_id"]]).stdout

    res = runner.invoke(
        app,
        [
            "submit",
            "--site",
            "local",
            "--no-container",
            "--single",
            "--workdir",
            str(tmp_path / "remote"),
            "--wait",
            *common,
            "--",
            "bash",
            "-c",
            "echo 'no such dataset' >&2; exit 4",
        ],
    )
    assert isinstance(res.exception, JobError)
    assert "FAILED exit=4:0 reason=NonZeroExitCode" in str(res.exception)
    assert "no such dataset" in str(res.exception)


# -- time limits and a retry that cannot submit twice ------------------------------------------
def test_command_timeout_ends_a_hung_command(sshd: SshdInfo) -> None:
    t = SshTransport(_spec(sshd, sshd.known_hosts))
    try:
        started = time.monotonic()
        with pytest.raises(TransportError, match="timed out after 2 s"):
            t.run("echo partial; sleep 30", timeout=2)
        assert time.monotonic() - started < 20  # not the command's 30 s (a loaded host: slack)
        assert t.run("echo again").stdout.strip() == "again"  # reconnects after the timeout
    finally:
        t.close()


def test_connect_timeout_on_a_silent_server(sshd: SshdInfo) -> None:
    """A port that accepts TCP but never says a word (no SSH banner): connect_timeout ends it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    spec = _spec(sshd, sshd.known_hosts).model_copy(
        update={"port": server.getsockname()[1], "connect_timeout": 2.0}
    )
    try:
        started = time.monotonic()
        with pytest.raises(TransportError, match="failed"):
            SshTransport(spec).run("true")
        assert time.monotonic() - started < 20  # ended, not hung (a loaded host: slack)
    finally:
        server.close()


class _DropsFirstReply(Transport):
    """Real SSH. The first submission is sent and runs on the login side; once Slurm holds the
    job, the connection is cut before the reply is read (what a network drop does)."""

    def __init__(self, inner: SshTransport, before: bool) -> None:
        self.inner, self.spec, self.before, self.calls = inner, inner.spec, before, 0

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        self.calls += 1
        found = re.search(r"--comment=(hpcenv-[0-9a-f]+)", command)
        if self.calls > 1 or not found:
            return self.inner.run(command, stdin, timeout)
        if self.before:
            raise TransportError("ssh to login failed: Connection reset by peer")
        conn = self.inner._connection()
        conn.open()
        chan = conn.client.get_transport().open_session()
        chan.exec_command(command)
        chan.sendall((stdin or "").encode())
        chan.shutdown_write()
        deadline = time.monotonic() + 30
        while found[1] not in _squeue_comments():
            assert time.monotonic() < deadline, "the first submission never reached Slurm"
            time.sleep(0.1)
        conn.client.get_transport().sock.close()  # cut: no exit status, no job id
        self.inner.close()
        raise TransportError("ssh to login failed: Connection reset by peer")

    def close(self) -> None:
        self.inner.close()


def _squeue_comments() -> str:
    return subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i %k"], capture_output=True, text=True
    ).stdout


@pytest.mark.slurm
@pytest.mark.parametrize("before", [False, True], ids=["reply-lost", "never-sent"])
def test_retry_after_a_dropped_connection_submits_once(
    slurm: SlurmInfo,
    sshd: SshdInfo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    before: bool,
) -> None:
    from hpcenv.jobs.submit import submit
    from hpcenv.site import load_site

    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    t = _DropsFirstReply(SshTransport(_spec(sshd, sshd.known_hosts)), before)
    job = JobSpec(
        name="once",
        command=["true"],
        launch="single",
        cores_per_rank=1,
        workdir=str(tmp_path / "remote"),
    )
    try:
        sub = submit(load_site("local"), job, t, retry_wait=0.5)
    finally:
        t.close()
    assert t.calls == 2
    token_lines = [ln.split() for ln in _squeue_comments().splitlines() if " hpcenv-" in ln]
    mine = [ln for ln in token_lines if ln[0] == sub.job_id]
    assert len(mine) == 1
    same_token = [ln for ln in token_lines if ln[1] == mine[0][1]]
    assert same_token == mine, same_token  # one job carries the token: submitted once
