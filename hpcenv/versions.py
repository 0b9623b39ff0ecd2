"""Dotted version helpers (no third-party parser: our versions are plain release numbers)."""

from __future__ import annotations

import re


def vtuple(version: str) -> tuple[int, ...]:
    """``"2.1.100+xpu"`` -> ``(2, 1, 100)``."""
    parts = []
    for piece in re.split(r"[.]", version.split("+")[0]):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def major_minor(version: str) -> str:
    t = vtuple(version)
    return ".".join(str(x) for x in t[:2])


def major(version: str) -> str:
    return str(vtuple(version)[0])


def at_least(version: str, minimum: str) -> bool:
    return vtuple(version) >= vtuple(minimum)
