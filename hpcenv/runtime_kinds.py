"""Which container runtimes exist, by kind, without importing them.

Each module of the :mod:`hpcenv.jobs.runtimes` package that does not start with ``_`` and is not
``base`` or ``registry`` is a runtime: its kind is the module name with ``-`` for ``_`` (``podman_hpc`` ->
``podman-hpc``) and its ``RUNTIME`` attribute is the class. A runtime that lives outside the
package (a site's plugin, a test) is added with :func:`register`. Unknown kinds are one clean error
that lists the known ones (ReFrame's registries), never a ``KeyError``.

This module sits low (it imports nothing from hpcenv but the error family), so the site model may
ask it; the classes themselves are reached through :mod:`hpcenv.jobs.runtimes.registry`.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError

_NOT_RUNTIMES = frozenset({"base", "registry"})
_PACKAGE = "hpcenv.jobs.runtimes"
_ADDED: dict[str, str] = {}  # kind -> "module:attribute", added by register()


@cache
def _builtin() -> dict[str, str]:
    folder = Path(__file__).resolve().parent / "jobs" / "runtimes"
    out = {}
    for info in pkgutil.iter_modules([str(folder)]):
        if info.name.startswith("_") or info.name in _NOT_RUNTIMES:
            continue
        out[info.name.replace("_", "-")] = f"{_PACKAGE}.{info.name}:RUNTIME"
    return out


def _targets() -> dict[str, str]:
    return {**_builtin(), **_ADDED}


def known_kinds() -> list[str]:
    """Every runtime kind a site file may name, sorted."""
    return sorted(_targets())


def register(kind: str, target: str) -> None:
    """Make runtime ``kind`` known as ``"module:attribute"`` (imported when first used). A kind
    already taken by another target is refused."""
    taken = _targets().get(kind)
    if taken is not None and taken != target:
        raise ValueError(f"container runtime {kind!r} is already registered ({taken})")
    _ADDED[kind] = target


def unregister(kind: str) -> None:
    """Forget a runtime added with :func:`register` (built-in ones stay)."""
    _ADDED.pop(kind, None)


def check_kind(kind: str) -> str:
    """``kind`` when it is a known runtime; else one line naming the known ones."""
    if kind not in _targets():
        raise ConfigError(f"unknown container runtime {kind!r}; known: {', '.join(known_kinds())}")
    return kind


def load_class(kind: str) -> Any:
    """The class registered for ``kind``, its module imported on first use."""
    module, _, attribute = _targets()[check_kind(kind)].partition(":")
    cls = getattr(importlib.import_module(module), attribute)
    if getattr(cls, "kind", None) != kind:
        raise ConfigError(f"runtime module {module} defines kind {cls.kind!r}, not {kind!r}")
    return cls


def readers(field: str) -> list[str]:
    """The runtime kinds that read site field ``runtime.<field>`` (each runtime's ``fields``)."""
    return [k for k in known_kinds() if field in load_class(k).fields]
