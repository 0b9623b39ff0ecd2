"""Ctrl-C while ``submit`` talks to the scheduler (issue 40, class 7): a job the scheduler queued
is never left without its id shown and its record. The unit tests hold real SIGINTs sent to
this process (hpcenv.signals.deferred_interrupt); the process test runs the installed
``hpcenv submit`` against a stand-in ``sbatch`` on PATH that answers with an id and then takes
its time, and sends SIGINT to the whole process group (what a terminal's Ctrl-C does) in that
window."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcenv.signals import child_setup, deferred_interrupt

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def test_a_first_ctrl_c_is_held_and_a_second_stops_at_once() -> None:
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupt() as held:
        assert child_setup() is not None  # commands started now ignore SIGINT
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs between bytecodes
        assert held.seen
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is before
    assert child_setup() is None


def test_a_command_started_in_the_window_survives_sigint() -> None:
    with deferred_interrupt():
        proc = subprocess.Popen(["sleep", "5"], preexec_fn=child_setup())  # noqa: PLW1509
    try:
        os.kill(proc.pid, signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
    finally:
        proc.kill()
        proc.wait()


SBATCH = """#!/bin/sh
cat >/dev/null
echo 4242
: >"$GOT/answered"
sleep 5
"""


def _submit_and_interrupt(tmp_path: Path, times: int) -> tuple[int, str, Path, dict[str, str]]:
    """The installed ``hpcenv submit`` against the stand-in ``sbatch``; once it answered,
    ``times`` SIGINTs to the whole process group. (exit code, stderr, cache, environment)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    got = tmp_path / "got"
    got.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GOT": str(got),
        "HPCENV_CACHE": str(cache),
    }
    argv = [HPCENV, "submit", "--site", "local", "--no-container"]
    argv += ["--workdir", str(tmp_path / "work"), "--", "true"]
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 60
    while not (got / "answered").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    for _ in range(times):
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: hpcenv, bash and sbatch all get it
        time.sleep(0.3)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err, cache, env


def test_ctrl_c_after_sbatch_answered_still_prints_the_id_and_writes_the_record(
    tmp_path: Path,
) -> None:
    code, err, cache, env = _submit_and_interrupt(tmp_path, 1)
    assert code == 130, err
    assert "finishing the submission so the job is not lost" in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "queued job 4242" in lines[0], err
    assert "hpcenv cancel 4242" in lines[0] and "Traceback" not in err
    records = list((cache / "jobs").glob("local-*-4242.json"))
    assert len(records) == 1, list((cache / "jobs").iterdir())
    shown = subprocess.run(
        [HPCENV, "status", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "4242" in shown.stdout, shown.stdout + shown.stderr


def test_a_second_ctrl_c_stops_at_once_and_names_the_token(tmp_path: Path) -> None:
    code, err, cache, _ = _submit_and_interrupt(tmp_path, 2)
    assert code == 130, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "may have queued the job" in lines[0], err
    assert "look for a job with comment hpcenv-" in lines[0] and "Traceback" not in err
    assert not list((cache / "jobs").glob("*.json"))
