"""Following jobs in the project's real one-node Slurm, through the installed ``hpcenv``: the
listing of submitted jobs with their states (and each job's end marker), Ctrl-C during
``submit --wait`` leaving the job running (and saying so), and ``logs --site`` for a job whose
record is gone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from interrupts import terminal_sigint

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")}


def _argv(tmp_path: Path, *command: str) -> list[str]:
    return [
        *(HPCENV, "submit", "--site", "local", "--no-container", "--single"),
        *("--workdir", str(tmp_path / "w"), "--json", "--wait", "--"),
        *command,
    ]


def _hpcenv(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, env=_env(tmp_path), timeout=120
    )


def _submitted(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``submit --wait`` of a one-line bash job; the caller checks its exit code."""
    return subprocess.run(
        _argv(tmp_path, "bash", "-c", script),
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )


def test_listing_submitted_jobs_with_their_states(slurm: SlurmInfo, tmp_path: Path) -> None:
    ids = []
    for code in (0, 3):
        proc = _submitted(tmp_path, f"echo job-{code}; exit {code}")
        assert proc.returncode == (0 if code == 0 else 2), proc.stderr
        if code == 0:
            ids.append(json.loads(proc.stdout)["job_id"])
    listing = _hpcenv(tmp_path, "status")
    assert listing.returncode == 0, listing.stderr
    rows = {ln.split()[0]: ln.split() for ln in listing.stdout.splitlines()[1:]}
    assert len(rows) == 2 and rows[ids[0]][4] == "COMPLETED"
    (failed,) = set(rows) - set(ids)
    assert rows[failed][4] == "FAILED" and "exit=3:0" in rows[failed]
    doc = json.loads(_hpcenv(tmp_path, "status", "--json").stdout)
    assert {r["status"]["state"] for r in doc} == {"COMPLETED", "FAILED"}
    assert all(r["submission"]["transport"]["kind"] == "local" for r in doc)
    # Each batch script wrote its exit status to its steps folder as it exited, failed or not
    # (what `submit --wait` looks for, hpcenv.jobs.ended).
    from hpcenv.jobs.ended import marker_path
    from hpcenv.jobs.submit import Submission

    marks = {}
    for row in doc:
        sub = row["submission"]
        folder = Path(sub["workdir"]) / ".hpcenv" / sub["job_id"]
        # where the wait looks, for the submission as its record reads back
        assert marker_path(Submission.from_dict(sub)) == folder / "ended"
        marks[row["status"]["state"]] = (folder / "ended").read_text()
    assert marks == {"COMPLETED": "0\n", "FAILED": "3\n"}


def test_ctrl_c_while_waiting_leaves_the_job_running(slurm: SlurmInfo, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        _argv(tmp_path, "sleep", "120"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        preexec_fn=terminal_sigint,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first state line: the job is queued
    assert " job " in first and ("PENDING" in first or "RUNNING" in first), first
    assert "(+0m0" in first  # the time waited
    job_id = first.split(" job ")[1].split(":")[0]
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130
    assert (
        f"stopped waiting for job {job_id}; the job was left as it is (hpcenv status {job_id} "
        f"--wait follows it again, hpcenv cancel {job_id} cancels it)"
    ) in rest
    try:
        st = _hpcenv(tmp_path, "status", job_id)
        assert st.stdout.startswith(f"job {job_id}: ") and (
            "RUNNING" in st.stdout or "PENDING" in st.stdout
        ), st.stdout + st.stderr
    finally:
        cancel = _hpcenv(tmp_path, "cancel", job_id)
    assert cancel.returncode == 0 and cancel.stdout.strip() == f"cancelled {job_id}"


def test_logs_with_site_for_a_job_without_a_record(slurm: SlurmInfo, tmp_path: Path) -> None:
    proc = _submitted(tmp_path, "echo no-record-logs")
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["job_id"]
    for record in (tmp_path / "cache" / "jobs").glob(f"*-{job_id}.*"):
        record.unlink()
    asked = _hpcenv(tmp_path, "logs", job_id)
    assert asked.stderr.strip() == (
        f"error: no record of job {job_id} here; pass --site to ask its scheduler"
    )
    logs = _hpcenv(tmp_path, "logs", job_id, "--site", "local")
    assert logs.returncode == 0 and "no-record-logs" in logs.stdout, logs.stderr


def test_logs_of_a_job_whose_files_are_gone_says_so(slurm: SlurmInfo, tmp_path: Path) -> None:
    """Log files removed after the job (a cleaned workdir): one line naming where hpcenv
    looked and exit 2, not an empty success."""
    proc = _submitted(tmp_path, "echo gone-logs")
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["job_id"]
    shown = _hpcenv(tmp_path, "logs", job_id).stdout
    files = re.findall(r"^==> (.+) <==$", shown, flags=re.M)
    assert files and "gone-logs" in shown, shown
    for name in files:
        Path(name).unlink()
    gone = _hpcenv(tmp_path, "logs", job_id)
    assert gone.returncode == 2 and gone.stdout == "", gone.stdout
    assert gone.stderr.strip() == (
        f"error: no log file of job {job_id} is there (not written yet, or removed): "
        + ", ".join(files)
    )
