"""Following jobs, as the installed ``hpcenv`` runs: ``status`` without an id lists the job
records, a missing scheduler command is the one-line hint ``submit`` gives (status, cancel,
--wait, the listing), ``logs`` takes the ``--site`` its message asks for, and the option
combinations that make no sense are one line, exit 2. The waits against a real Slurm
(listing real states, Ctrl-C leaving the job queued, logs of a job with no record) are in
tests/test_follow_slurm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
HINT = (
    "error: {cmd} is not on this host: local takes jobs through slurm; run hpcenv {verb} "
    "from a login node of local, or submit over SSH with --transport ssh --ssh-host LOGIN_NODE "
    "so that status, cancel and logs follow the job there"
)


def _run(tmp_path: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([HPCENV, *args], capture_output=True, text=True, env=env, timeout=120)


def _record(tmp_path: Path, job_id: str, **transport: object) -> Path:
    jobs = tmp_path / "cache" / "jobs"
    jobs.mkdir(parents=True, exist_ok=True, mode=0o700)
    doc = {
        "job_id": job_id,
        "name": "train",
        "site": "local",
        "scheduler": "slurm",
        "workdir": str(tmp_path / "w"),
        "transport": {"kind": "ssh" if transport else "local", **transport},
        "log_names": ["train-%j.out", "train-%j.err"],
        "script_path": "",
    }
    kind = "local-h" if not transport else "ssh-h"
    path = jobs / f"{kind}-{job_id}.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path


@pytest.fixture
def no_slurm(tmp_path: Path) -> str:
    """A PATH with a shell, ssh and the tools hpcenv runs, and no Slurm client."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "cat", "grep", "tail", "hostname", "ssh"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            os.symlink(found, bin_dir / tool)
    return str(bin_dir)


def test_status_without_records_lists_nothing(tmp_path: Path) -> None:
    proc = _run(tmp_path, "status")
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr.strip() == "no jobs submitted from here (hpcenv keeps a record of each)"
    assert json.loads(_run(tmp_path, "status", "--json").stdout) == []


@pytest.mark.parametrize("verb", ["status", "cancel"])
def test_a_missing_scheduler_command_is_the_submit_hint(
    tmp_path: Path, no_slurm: str, verb: str
) -> None:
    _record(tmp_path, "41")
    proc = _run(tmp_path, verb, "41", path=no_slurm)
    assert proc.returncode == 2
    cmd = "scontrol" if verb == "status" else "scancel"
    assert proc.stderr.strip().splitlines() == [HINT.format(cmd=cmd, verb=verb)]


def test_wait_with_a_missing_scheduler_command(tmp_path: Path, no_slurm: str) -> None:
    _record(tmp_path, "42")
    proc = _run(tmp_path, "status", "42", "--wait", path=no_slurm)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [HINT.format(cmd="scontrol", verb="status --wait")]


def test_the_listing_shows_each_jobs_problem_and_keeps_going(tmp_path: Path, no_slurm: str) -> None:
    _record(tmp_path, "43")
    bad = _record(tmp_path, "44")
    bad.write_text('{"job_id": "44; rm -rf ~"}')
    _record(tmp_path, "45", host="127.0.0.1", port=1)  # nothing listens there
    proc = _run(tmp_path, "status", path=no_slurm)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["JOB", "SITE", "VIA", "NAME", "STATE", "DETAIL"]
    by_job = {ln.split()[0]: ln for ln in lines[1:]}
    assert HINT.format(cmd="scontrol", verb="status")[len("error: ") :] in by_job["43"]
    assert "UNREADABLE" in by_job["?"] and "delete it" in by_job["?"]
    assert "ssh to ssh://127.0.0.1:1 failed" in by_job["45"] and " 127.0.0.1 " in by_job["45"]
    rows = json.loads(_run(tmp_path, "status", "--json", path=no_slurm).stdout)
    assert [r["submission"]["job_id"] if r["submission"] else None for r in rows] == [
        "43",
        None,
        "45",
    ]
    assert all(r["status"] is None and r["error"] for r in rows)
    assert _run(tmp_path, "status", "--limit", "1", path=no_slurm).stdout.count("\n") == 2


def test_logs_takes_the_site_its_message_asks_for(tmp_path: Path, no_slurm: str) -> None:
    proc = _run(tmp_path, "logs", "999")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: no record of job 999 here; pass --site to ask its scheduler"
    )
    proc = _run(tmp_path, "logs", "999", "--site", "local", path=no_slurm)
    assert proc.returncode == 2  # taken; without a record only the scheduler names the files
    assert proc.stderr.strip() == HINT.format(cmd="scontrol", verb="logs")


@pytest.mark.parametrize(
    "args, line",
    [
        (["status", "--wait"], "error: --wait and --timeout follow one job: give its id"),
        (["status", "7", "--timeout", "5"], "error: --timeout is for --wait"),
        (["status", "7", "--wait", "--timeout", "0"], "error: --timeout 0.0: give a number"),
    ],
)
def test_wait_options_that_make_no_sense(tmp_path: Path, args: list[str], line: str) -> None:
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    (got,) = proc.stderr.strip().splitlines()
    assert got.startswith(line)
