"""SIGTERM and SIGHUP end hpcenv through its ``finally`` blocks, as Ctrl-C does.

Slurm sends SIGTERM at a job's time limit and a closed terminal sends SIGHUP; Python's default for
both is to die at once, which would leave what hpcenv started behind: a bench, smoke or tune
container (``sleep infinity`` as PID 1, which ignores SIGTERM itself), a build's secret files.
Turned into ``SystemExit(128 + signal)`` they unwind like any error, and the exit code is the one
shells expect. A handler someone else set (``nohup``'s SIG_IGN) is kept.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_exit(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second signal does not cut the clean-up short
    raise SystemExit(128 + signum)


def install() -> None:
    """For the whole process (the CLI's entry point): SIGTERM and SIGHUP unwind."""
    for sig in SIGNALS:
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _raise_exit)


@contextmanager
def exit_on_signals() -> Iterator[None]:
    """The same for one block (library use); the previous handlers come back after. Only the
    main thread may set handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in SIGNALS:
        if signal.getsignal(sig) == signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _raise_exit)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
