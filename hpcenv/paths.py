"""Where hpcenv finds its data (templates, recipes, sites) and keeps its caches."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    """A data folder: the source checkout's top level, else the copy inside the wheel."""
    checkout = _PKG.parent / name
    return checkout if checkout.is_dir() else _PKG / "_data" / name


def templates_dir() -> Path:
    return _data_dir("templates")


def recipes_dir() -> Path:
    return _data_dir("recipes")


def site_configs_dir() -> Path:
    return _data_dir("site-configs")


def package_dir() -> Path:
    return _PKG


def cache_dir() -> Path:
    """Per-user cache for base images, logs and results (``HPCENV_CACHE`` overrides)."""
    root = os.environ.get("HPCENV_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "hpcenv"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock; a second caller waits until the first is done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
