"""Where hpcenv finds its data (templates, recipes, sites) and keeps its caches.

Package data is found through ``importlib.resources`` only, inside the ``hpcenv`` package
(``hpcenv/data/``), never by looking next to the package: a stray ``recipes/`` folder in the
working directory or in site-packages cannot hide the built-in ones. In a source checkout
``hpcenv/data/{recipes,site-configs,templates}`` are symlinks to the top-level folders; the
wheel build follows them, so an installed wheel carries real copies at the same place.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path


def _package_path() -> Path:
    root = files("hpcenv")
    if not isinstance(root, Path):  # a zip import; hpcenv needs real files for builds
        raise RuntimeError(f"hpcenv must be installed as files, not imported from {root}")
    return root


def data_path(*parts: str) -> Path:
    """A file or folder under the package's ``data/`` (e.g. ``data_path("containers.conf")``)."""
    return _package_path().joinpath("data", *parts)


def templates_dir() -> Path:
    return data_path("templates")


def recipes_dir() -> Path:
    return data_path("recipes")


def site_configs_dir() -> Path:
    return data_path("site-configs")


def package_dir() -> Path:
    return _package_path()


def cache_dir(*, create: bool = True) -> Path:
    """Per-user cache for base images, logs and results (``HPCENV_CACHE`` overrides).

    ``create=False`` only names it (``build --dry-run`` writes nothing). A cache that cannot be
    made or written is a one-line ConfigError naming the variable to change.
    """
    from hpcenv.errors import ConfigError

    env = "HPCENV_CACHE" if os.environ.get("HPCENV_CACHE") else "XDG_CACHE_HOME"
    root = os.environ.get("HPCENV_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "hpcenv"
    )
    path = Path(root)
    if not create:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"cache folder {root} cannot be made ({err.strerror or err}); set {env} to a "
            "writable folder"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"cache folder {root} is not writable; set {env} to a writable folder")
    return path


@contextmanager
def file_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive advisory lock; a second caller waits until the first is done (``on_wait``
    is called once first, when it has to wait)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
