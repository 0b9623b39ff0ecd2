"""Where hpcenv finds its data (templates, recipes, sites) and keeps its caches.

Package data is found through ``importlib.resources`` only, inside the ``hpcenv`` package
(``hpcenv/data/``), never by looking next to the package: a stray ``recipes/`` folder in the
working directory or in site-packages cannot hide the built-in ones. In a source checkout
``hpcenv/data/{recipes,site-configs,templates}`` are symlinks to the top-level folders; the
wheel build follows them, so an installed wheel carries real copies at the same place.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
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

    A folder hpcenv makes for it is 0700 whatever the umask (:func:`make_dirs`): README sends
    the cache to project storage, where a umask of 002 is usual; an existing one is the user's
    choice and is left as it is. ``create=False`` only names it (``build --dry-run`` writes nothing). A cache that cannot be
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
        make_dirs(path)
    except OSError as err:
        raise ConfigError(
            f"cache folder {root} cannot be made ({err.strerror or err}); set {env} to a "
            "writable folder"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        from hpcenv.reads import owner_name

        owner = path.stat().st_uid
        whose = f" (it belongs to {owner_name(owner)})" if owner != os.geteuid() else ""
        raise ConfigError(
            f"cache folder {root} is not writable{whose}; set {env} to a folder of yours "
            "(one cache per user: on project storage, a folder under it named for you)"
        )
    return path


def make_dirs(path: Path) -> Path:
    """Make ``path`` and every missing folder above it with mode 0700 (the umask can only take
    bits away: 002 leaves 0700); folders already there are left as they are."""
    missing: list[Path] = []
    here = path
    while not os.path.lexists(here) and here.parent != here:
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        with suppress(FileExistsError):  # another process made it meanwhile: the caller checks
            os.mkdir(folder, 0o700)
    return path


def private_dir(path: Path) -> Path:
    """``path`` as a folder only this user may write: made 0700 when missing
    (:func:`make_dirs`); when there, it must be this user's own folder (or this user's link to
    one), and write access for group and others is taken away. Else one ConfigError line
    naming it: a folder another user made (or linked) in a group-writable cache would let them
    plant links and files where hpcenv writes and reads back (issue 40)."""
    from hpcenv.errors import ConfigError
    from hpcenv.reads import owner_name

    fix = "delete it (or set HPCENV_CACHE to a folder of yours)"
    make_dirs(path)
    try:
        link = os.lstat(path)
        info = os.stat(path)
    except OSError as err:
        raise ConfigError(f"folder {path} cannot be used ({err.strerror or err}); {fix}") from None
    me = os.geteuid()
    if stat.S_ISLNK(link.st_mode) and link.st_uid != me:
        raise ConfigError(
            f"refusing folder {path}: it is a link made by {owner_name(link.st_uid)}; {fix}"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"refusing folder {path}: it is not a folder; {fix}")
    if info.st_uid != me:
        raise ConfigError(
            f"refusing folder {path}: it belongs to {owner_name(info.st_uid)}, not to you; {fix}"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
    return path


@contextmanager
def file_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive advisory lock; a second caller waits until the first is done (``on_wait``
    is called once first, when it has to wait).

    The lock file is opened with ``O_NOFOLLOW`` (a link at its name is refused: ``open("a")``
    created the link's target) and must be a regular file of this user's (one another user
    made could be held by them for ever); a new one is 0600."""
    from hpcenv.errors import ConfigError
    from hpcenv.reads import owner_name

    make_dirs(path.parent)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ConfigError(
                f"refusing lock file {path}: it is a symbolic link (a lock never follows "
                "one); delete it"
            ) from None
        raise
    with os.fdopen(fd, "r+b") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            why = (
                "it is not a regular file"
                if not stat.S_ISREG(info.st_mode)
                else f"it belongs to {owner_name(info.st_uid)}, not to you"
            )
            raise ConfigError(f"refusing lock file {path}: {why}; delete it")
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
