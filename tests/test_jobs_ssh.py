"""SSH transport against the project's loopback sshd: key auth, host keys checked against
known_hosts with RejectPolicy (never added), and the CLI submitting and following a job over SSH."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.errors import ConfigError, JobError
from hpcenv.jobs import SshTransport, TransportSpec

if TYPE_CHECKING:
    from services import SlurmInfo, SshdInfo

pytest_plugins = ["services"]  # the slurm and sshd fixtures
pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def _spec(info: SshdInfo, known_hosts: Path) -> TransportSpec:
    return TransportSpec(kind="ssh", host=info.host, port=info.port, user="root",
                         key_file=str(info.key), known_hosts=str(known_hosts))  # fmt: skip


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
    common = ["--transport", "ssh", "--ssh-host", sshd.host, "--ssh-port", str(sshd.port),
              "--ssh-user", "root", "--ssh-key", str(sshd.key), "--known-hosts", str(sshd.known_hosts)]  # fmt: skip
    res = runner.invoke(app, ["submit", "--site", "local", "--no-container", "--single",
                              "--workdir", str(tmp_path / "remote"), "--json", "--wait", *common,
                              "--", "bash", "-c", "echo from-ssh-job on $(hostname -s)"])  # fmt: skip
    assert res.exit_code == 0, res.output
    sub = json.loads(res.stdout)
    assert sub["transport"]["kind"] == "ssh" and sub["status"]["state"] == "COMPLETED"
    st = runner.invoke(app, ["status", sub["job_id"]])  # follows the record: over SSH again
    assert st.stdout.startswith(f"job {sub['job_id']}: COMPLETED")
    assert "from-ssh-job on" in runner.invoke(app, ["logs", sub["job_id"]]).stdout

    res = runner.invoke(app, ["submit", "--site", "local", "--no-container", "--single",
                              "--workdir", str(tmp_path / "remote"), "--wait", *common,
                              "--", "bash", "-c", "echo 'no such dataset' >&2; exit 4"])  # fmt: skip
    assert isinstance(res.exception, JobError)
    assert "FAILED exit=4:0 reason=NonZeroExitCode" in str(res.exception)
    assert "no such dataset" in str(res.exception)
