"""Quoting for job scripts: every value that reaches a script goes through here.

Policy: plain values are ``shlex.quote``-d. Paths that name environment variables (``$USER``,
``${PROJ}``, as allowed by ``site.ShellPath``) must still expand on the compute node, so they are
validated against that pattern (letters, digits, ``_.,:@%+=/-`` and ``$NAME``/``${NAME}`` only:
no quotes, backslashes, backticks or ``$(``) and then put in double quotes, where only the
variables expand. An :class:`Expand` marks such a value inside an argv list.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from hpcenv.errors import ConfigError

# Whole-string patterns, always used with fullmatch: ``re.match(r"^...$")`` accepts "x\n".
_PATH = re.compile(r"(?:[A-Za-z0-9_.,:@%+=/-]|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)+")
_WORD = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\[\]-]{0,127}")  # 128 characters at most
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Expand(str):
    """An argv item whose ``$VARS`` expand in the job script (a validated ``ShellPath``)."""

    __slots__ = ()

    def __new__(cls, value: str) -> Expand:
        if not _PATH.fullmatch(value):
            raise ConfigError(f"not a safe path for a job script: {value!r}")
        return super().__new__(cls, value)


def expanding(value: str) -> str:
    """An argv item for a path or value that may name variables: an :class:`Expand` when it
    does (validated, its variables expand in the job), else the plain text."""
    return Expand(value) if "$" in value else value


def qpath(value: str) -> str:
    """Quote a path: double quotes (``$VARS`` expand) when it names a variable, else shlex."""
    if "$" not in value:
        return shlex.quote(value)
    Expand(value)  # validates
    return f'"{value}"'


def q(value: str) -> str:
    """Quote one argv item; :class:`Expand` items keep their variables."""
    return qpath(value) if isinstance(value, Expand) else shlex.quote(value)


def join(argv: Iterable[str]) -> str:
    """Render an argv list as one shell command line."""
    return " ".join(q(a) for a in argv)


def env_name(name: str) -> str:
    """Check an environment variable name."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"not an environment variable name: {name!r}")
    return name


def word(value: str, what: str) -> str:
    """Check a value that is written unquoted (scheduler directives)."""
    if not _WORD.fullmatch(value):
        raise ConfigError(f"{what} {value!r} may only use letters, digits and _.,:@%+=/-")
    return value


def job_name(value: str) -> str:
    """Check a job name (used in directives and log file names)."""
    if not _JOB_NAME.fullmatch(value):
        raise ConfigError(
            f"job name {value!r}: 1-64 characters, letters, digits, '_', '.', '-' "
            "(starting with a letter or digit)"
        )
    return value


def job_id(value: str) -> str:
    """Check a job id (``12``, ``12_3``, ``123[].pbs01``) before it reaches a command."""
    if not _JOB_ID.fullmatch(value):
        shown = repr(value[:60]) + ("..." if len(value) > 60 else "")
        raise ConfigError(f"not a job id: {shown}")
    return value


def is_expandable_path(value: str) -> bool:
    return bool(_PATH.fullmatch(value))


# Placeholders allowed in command arguments -> the job script variable they stand for.
PLACEHOLDERS = {
    "data": "HPCENV_DATA",
    "output": "HPCENV_OUTPUT",
    "task": "HPCENV_TASK_ID",
    "tasks": "HPCENV_TASKS",
    "workdir": "HPCENV_WORKDIR",
    "jobid": "HPCENV_JOB_ID",
    "node_local": "HPCENV_NODE_LOCAL",
}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


def placeholders(value: str) -> set[str]:
    return set(_PLACEHOLDER.findall(value))


def command_arg(value: str) -> str:
    """Quote one command argument; ``{data}``-style placeholders become ``"${HPCENV_DATA}"``.

    Literal text is ``shlex.quote``-d piece by piece, so nothing else in the argument expands.
    """
    pieces: list[str] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(value):
        if m.start() > pos:
            pieces.append(shlex.quote(value[pos : m.start()]))
        pieces.append(f'"${{{PLACEHOLDERS[m.group(1)]}}}"')
        pos = m.end()
    if pos < len(value) or not pieces:
        pieces.append(shlex.quote(value[pos:]))
    return "".join(pieces)
