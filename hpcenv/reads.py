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

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError

MAX_BYTES = 1 << 20
MAX_DEPTH = 64


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


def read_bounded(path: Path, limit: int = MAX_BYTES, what: str = "a file") -> bytes:
    """The bytes of ``path``; ConfigError when it is larger than ``limit`` (checked before
    reading), not readable, or a folder."""
    try:
        with open(path, "rb") as handle:
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


def load_json(path: Path, limit: int = MAX_BYTES, what: str = "a JSON file") -> Any:
    """Parse a JSON file read with :func:`read_bounded`; ConfigError (one line, no content)
    when it is too large, not UTF-8, not JSON, or nested deeper than :data:`MAX_DEPTH`."""
    raw = read_bounded(path, limit, what)
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
    no records."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if keep(doc):
            out.append(doc)
    return out
