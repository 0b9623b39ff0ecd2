"""Ctrl-C tests' two halves: the child starts with the signal state a terminal gives, and a child
that outlives its signal is described (what it was doing, what it ignored or blocked), not just
timed out.

A child inherits an ignored signal (a shell's background job without job control) and a blocked
one (the signal mask survives exec): either would make a Ctrl-C test wait for nothing.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest


def terminal_sigint() -> None:
    """``preexec_fn``: SIGINT at its default and unblocked, as a terminal starts a command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _described(pid: int) -> str:
    fields = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as err:
        return f"/proc/{pid}: {err}"
    kept = [line.replace("\t", " ") for line in status if line.split(":")[0] in fields]
    return "; ".join([*kept, f"wchan {wchan or '-'}"])


def after_signal(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """The child's stdout and stderr once it has exited; a child still running after ``timeout``
    seconds is described from /proc, killed, and the test fails saying so."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        state = _described(proc.pid) if proc.poll() is None else f"exited {proc.returncode}"
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(
            f"the child still held its pipes {timeout:.0f} s after the signal ({state}); "
            f"stdout {out[-2000:]!r}; stderr {err[-2000:]!r}"
        )
