"""Typer CLI: thin command modules over hpcenv's core.

Importing the CLI takes a noticeable moment (Typer, the command modules); a Ctrl-C then, before
:func:`hpcenv.cli.main.main` can catch it, would print a traceback. The hook below, installed
before anything heavy is imported, turns an uncaught KeyboardInterrupt into the same one line
and exit code 130 that :func:`~hpcenv.cli.main.main` gives; any other exception goes to the hook
that was there before.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not ``typing``'s: importing typing takes long enough to be interrupted
if TYPE_CHECKING:
    from types import TracebackType
    from typing import NoReturn


def interrupted(*, now: bool = False) -> NoReturn:
    """The one line and exit code of Ctrl-C (128 + SIGINT, as shells expect); ``now``: at once,
    where Python's exit would print the interrupt again (nothing of ours is open then)."""
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    finally:
        if now:
            os._exit(130)
        sys.exit(130)


_previous_hook = sys.excepthook


def _uncaught(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
    """Ctrl-C outside :func:`main`'s ``try`` (while the command modules load, or while an
    error is being reported): the same one line and 130, never a traceback."""
    if issubclass(kind, KeyboardInterrupt):
        interrupted(now=True)
    _previous_hook(kind, err, tb)


sys.excepthook = _uncaught
