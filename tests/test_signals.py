"""SIGTERM (what Slurm sends at a time limit) and SIGHUP end hpcenv through its clean-up: the
containers it started go, the exit code is 128 + the signal (issue 20, class 8)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from requirements import need_image, need_tool

HPCENV = Path(sys.executable).with_name("hpcenv")
IMAGE = "localhost/hpcenv/horovod-cpu:local"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_unwinds_through_finally(tmp_path: Path, sig: signal.Signals) -> None:
    """The handler the CLI installs: ``finally`` runs, the exit code is 128 + signal. The
    program starts from the default disposition: a test run under ``nohup`` hands its children
    SIGHUP ignored, which ``install`` rightly keeps (the next test)."""
    marker = tmp_path / "cleaned"
    program = textwrap.dedent(
        f"""
        import signal
        import time
        from hpcenv import signals
        for sig in signals.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signals.install()
        try:
            print("ready", flush=True)
            time.sleep(60)
        finally:
            open({str(marker)!r}, "w").close()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 128 + sig
    assert marker.exists()


def test_an_ignored_signal_stays_ignored(tmp_path: Path) -> None:
    """``nohup`` hands the process SIGHUP ignored: hpcenv keeps it so."""
    program = "import signal; from hpcenv import signals; signals.install(); " + (
        "print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)"
    )
    out = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
        check=True,
    ).stdout
    assert out.strip() == "True"


def _bench_containers() -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", "name=hpcenv-bench-", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


@pytest.mark.podman
def test_bench_ended_by_sigterm_removes_its_container(tmp_path: Path) -> None:
    """``hpcenv bench`` killed by Slurm's SIGTERM: its ``sleep infinity`` container is removed
    at once (it does not wait podman's 10 s for a PID 1 that ignores SIGTERM), exit 143."""
    need_tool("podman", why="the bench runs its sections in a podman container")
    need_image(IMAGE, "the bench measures it")
    before = set(_bench_containers())
    proc = subprocess.Popen(
        [str(HPCENV), "bench", "--site", "local", "--section", "allreduce", "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not set(_bench_containers()) - before:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the bench never started its container"
            time.sleep(0.5)
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        # under podman's 10 s stop wait: removed at once (-t 0), not stopped politely
        assert time.monotonic() - started < 9.5, "the container was not removed at once"
        assert not set(_bench_containers()) - before
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
