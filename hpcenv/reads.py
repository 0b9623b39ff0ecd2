"""Reading the files a user hands hpcenv, with bounds: size before reading, depth after parsing.

Issue 20 ("reads bounded and confined"): a 3 GiB file was read whole before the 1 MiB limit
applied, and a tuning file of 10000 nested lists ended in a RecursionError. Every reader of a
user file (site and recipe YAML, measured tuning files, job records, dataset manifests) goes
through :func:`read_bounded`, which looks at the size before it reads and never reads more than
``limit + 1`` bytes (a pipe or a device has no size to look at), and JSON goes through
:func:`load_json`, which refuses nesting deeper than :data:`MAX_DEPTH` (the deepest real file,
a site, nests 5 levels). Each refusal is one :class:`~hpcenv.errors.ConfigError` line that names
the file and never shows its content.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from hpcenv.errors import ConfigError

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_HISTORY = 64 << 20  # a JSON-lines history hpcenv appends to (a few KiB a run)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


class NotYours(ConfigError):
    """A file hpcenv reads back (an image record, a build stamp, a tuning file, a lock) that is
    not this user's own, or that others may change: refused, never used (issue 40)."""


def owner_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def trust_problem(info: os.stat_result, *, root_ok: bool = False) -> str | None:
    """Why a file with this ``stat`` must not decide what hpcenv does; None when it may.

    The one rule for every file hpcenv reads back from places others may reach (a cache on
    group-writable project storage): a regular file, owned by this user (``root_ok``: or by
    root, for a client configuration a site installs), that neither its group nor others may
    write."""
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != os.geteuid() and not (root_ok and info.st_uid == 0):
        return f"it belongs to {owner_name(info.st_uid)}, not to you"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def path_trust_problem(path: Path | str, *, root_ok: bool = False) -> str | None:
    """:func:`trust_problem` of the file at ``path`` itself (a link is not followed: it is
    refused); a missing or unreadable file is a problem too."""
    try:
        info = os.lstat(path)
    except OSError as err:
        return f"it cannot be read ({err.strerror or err})"
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    return trust_problem(info, root_ok=root_ok)


def refusal(what: str, path: Path | str, problem: str) -> NotYours:
    """The one line that refuses ``what`` at ``path`` for ``problem``."""
    return NotYours(
        f"refusing {what} {path}: {problem} (hpcenv uses only files of yours that nobody "
        "else may change); delete it"
    )


def open_own(path: Path, what: str = "a file") -> BinaryIO:
    """``path`` opened for reading when it is a file of this user's that nobody else may change
    (:func:`trust_problem`), else :class:`NotYours`; a link is never followed (refused) and a
    FIFO never waited on (``O_NONBLOCK``, then refused as not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise refusal(what, path, "it is a symbolic link") from None
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    problem = trust_problem(os.fstat(fd))
    if problem is not None:
        os.close(fd)
        raise refusal(what, path, problem)
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: Path | str, what: str = "a file") -> BinaryIO:
    """``path`` opened for reading when it is a regular file (a link to one is followed), else
    one ConfigError line: a FIFO is never waited on (opened ``O_NONBLOCK``, then looked at)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ConfigError(f"{path}: is {_kind(mode)}, not {what}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _open(path: Path, what: str, *, own: bool, regular: bool) -> BinaryIO:
    if own:
        return open_own(path, what)
    if regular:
        return open_regular(path, what)
    return open(path, "rb")


def read_bounded(
    path: Path,
    limit: int = MAX_BYTES,
    what: str = "a file",
    *,
    own: bool = False,
    regular: bool = False,
) -> bytes:
    """The bytes of ``path``; ConfigError when it is larger than ``limit`` (checked before
    reading), not readable, or a folder. ``own``: a file hpcenv wrote and reads back, opened
    with :func:`open_own`; ``regular``: a FIFO, socket or device is refused before any read
    (:func:`open_regular`)."""
    try:
        with _open(path, what, own=own, regular=regular) as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise ConfigError(f"{path}: is a folder, not {what}")
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise ConfigError(f"{path}: {info.st_size} bytes; {what} is at most {_size(limit)}")
            data = handle.read(limit + 1)
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not {what}") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(data) > limit:
        raise ConfigError(f"{path}: more than {_size(limit)}; {what} is at most {_size(limit)}")
    return data


def too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and mappings in ``data`` nest deeper than ``limit`` (checked without
    recursion, so the check itself cannot overflow the stack)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            items = list(value.values())
        elif isinstance(value, list):
            items = value
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((item, depth + 1) for item in items)
    return False


def load_json(
    path: Path, limit: int = MAX_BYTES, what: str = "a JSON file", *, own: bool = False
) -> Any:
    """Parse a JSON file read with :func:`read_bounded` (``own``: a file hpcenv wrote, refused
    when it is not the user's own); ConfigError (one line, no content) when it is too large,
    not UTF-8, not JSON, or nested deeper than :data:`MAX_DEPTH`."""
    raw = read_bounded(path, limit, what, own=own)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:
        msg = err.msg if isinstance(err, json.JSONDecodeError) else "invalid"
        where = f" (line {err.lineno})" if isinstance(err, json.JSONDecodeError) else ""
        raise ConfigError(f"{path}: not valid JSON{where}: {msg}") from None
    if too_deep(data):
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    return data


def json_lines(path: Path, keep: Callable[[Any], bool]) -> list[Any]:
    """The records of a JSON-lines file hpcenv appends to (a history), oldest first: those
    ``keep`` accepts; a torn line from an interrupted run is skipped, the rest kept; no file,
    no records; a FIFO, or a file over :data:`MAX_HISTORY`, is one ConfigError line."""
    if not path.is_file():
        return []
    raw = read_bounded(path, MAX_HISTORY, "a history file", regular=True)
    out = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if keep(doc):
            out.append(doc)
    return out
