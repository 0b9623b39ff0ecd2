"""One exception family for every domain error; the CLI turns them into one-line messages."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a near miss among ``choices``, else empty."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class HpcenvError(Exception):
    """Base of every error hpcenv reports to a user (exit code 2 at the CLI edge)."""

    exit_code = 2


class ConfigError(HpcenvError):
    """A site, recipe or option is invalid; the message names the file, line and field."""


class ConflictError(HpcenvError):
    """Two components violate a compatibility rule; names both, the rule and its source."""


class BuildError(HpcenvError):
    """A build step failed; names the step and where its full log is."""

    def __init__(self, step: str, log_path: Path | None, detail: str = "") -> None:
        self.step = step
        self.log_path = log_path
        where = f" (full log: {log_path})" if log_path else ""
        super().__init__(f"build step {step!r} failed{where}" + (f": {detail}" if detail else ""))


class JobError(HpcenvError):
    """A job could not be submitted or failed; carries the scheduler's own message."""


class EnvironmentProblem(HpcenvError):
    """Something this host lacks (engine, runtime, launcher); says how to fix it."""


class OutputError(HpcenvError):
    """hpcenv will not, or cannot, write its output where asked; nothing was changed there."""
