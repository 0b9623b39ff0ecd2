"""SIGTERM and SIGHUP end hpcenv through its ``finally`` blocks, as Ctrl-C does.

Slurm sends SIGTERM at a job's time limit and a closed terminal sends SIGHUP; Python's default for
both is to die at once, which would leave what hpcenv started behind: a bench, smoke or tune
container (``sleep infinity`` as PID 1, which ignores SIGTERM itself), a build's secret files.
Turned into ``SystemExit(128 + signal)`` they unwind like any error, and the exit code is the one
shells expect. A handler someone else set (``nohup``'s SIG_IGN) is kept.

Ctrl-C the other way round: :func:`deferred_interrupt` holds it while ``submit`` talks to the
scheduler, so a job the scheduler queued is never left without its id printed and its record.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

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


class Deferred:
    """What :func:`deferred_interrupt` saw: ``seen`` once Ctrl-C came while it held it."""

    seen = False


# The one line a deferred Ctrl-C writes at once (the command goes on, so the user is told why).
DEFER_NOTE = b"hpcenv: finishing the submission so the job is not lost (Ctrl-C again stops now)\n"


@contextmanager
def deferred_interrupt() -> Iterator[Deferred]:
    """Hold Ctrl-C (SIGINT) for a block that must finish once begun (the scheduler has queued a
    job, and its id must be printed and recorded): the first one is remembered in ``seen`` and
    told in one line on stderr, a second one stops at once (KeyboardInterrupt). Commands
    started meanwhile (:func:`child_setup`) ignore SIGINT, so a terminal's Ctrl-C, which goes
    to every process of the foreground group, does not kill ``sbatch`` or ``ssh`` between the
    scheduler's answer and hpcenv reading it. A SIGINT already ignored (``nohup``, ``&``) stays
    ignored; off the main thread, nothing is changed."""
    state = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        yield state
        return

    def hold(signum: int, frame: object) -> None:
        if state.seen:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        state.seen = True
        with suppress(OSError):
            os.write(2, DEFER_NOTE)

    signal.signal(signal.SIGINT, hold)
    _HOLDING.append(True)
    try:
        yield state
    finally:
        _HOLDING.pop()
        if signal.getsignal(signal.SIGINT) is hold:
            signal.signal(signal.SIGINT, previous)


_HOLDING: list[bool] = []


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def child_setup() -> Callable[[], None] | None:
    """``preexec_fn`` for a command started inside :func:`deferred_interrupt`: it ignores
    SIGINT (an ignored signal stays ignored across exec, and a non-interactive shell cannot
    trap it again: POSIX "Signal Actions"); None outside, where nothing changes."""
    return _ignore_sigint if _HOLDING else None
