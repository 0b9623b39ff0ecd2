"""Output folders that are replaced whole, never half-written, never someone else's.

``render --out DIR`` and build contexts go through :func:`publish_dir`: the files are written
into a temporary folder beside ``DIR`` and swapped in with one ``renameat2(RENAME_EXCHANGE)``
(two renames where the kernel lacks it), under a lock beside ``DIR`` so concurrent writers take
turns. Ctrl-C, a full disk or a read-only target leave the previous output as it was. A folder
hpcenv made carries a marker file; a non-empty folder without it is refused unless ``force``.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from hpcenv.errors import OutputError
from hpcenv.paths import file_lock, private_dir

MARKER = ".hpcenv-output"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
T = TypeVar("T")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), str(b))


def check_target(out: Path, *, force: bool) -> Path:
    """``out`` made absolute, or an OutputError saying why hpcenv will not write there."""
    try:
        return _check_target(out, force=force)
    except OSError as err:  # an unreadable folder, a vanished working directory
        raise OutputError(f"cannot write to {out}: {err.strerror or err}") from err


def _check_target(out: Path, *, force: bool) -> Path:
    target = Path(os.path.abspath(out))
    if target == Path(target.anchor) or target.parent == target:
        raise OutputError(f"refusing to write output to the filesystem root {out}")
    if target == Path.home() or os.path.ismount(target):
        raise OutputError(f"refusing to replace {out} (a home folder or mount point)")
    try:
        cwd: Path | None = Path(os.getcwd())
    except OSError:  # the working directory was removed: nothing to protect there
        cwd = None
    if cwd is not None and (target == cwd or target in cwd.parents):
        raise OutputError(f"refusing to replace {out}: it is (or holds) the current folder")
    if target.exists() or target.is_symlink():
        if target.is_symlink():
            raise OutputError(f"{out} is a symbolic link; give the folder it points to")
        if not target.is_dir():
            raise OutputError(f"{out} is a file, not a folder; give a folder for the output")
        if not force and not (target / MARKER).is_file() and any(target.iterdir()):
            raise OutputError(
                f"{out} is a non-empty folder that hpcenv did not create; "
                "give a new or empty folder, or --force to replace it"
            )
    return target


def _lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.hpcenv-lock"


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Serialise writers of one output folder (a lock file beside it)."""
    target = Path(os.path.abspath(out))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = file_lock(_lock_path(target))
        lock.__enter__()
    except OSError as err:
        raise OutputError(f"cannot write to {out}: {err.strerror or err}") from err
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def publish_dir(
    out: Path,
    write: Callable[[Path], T],
    *,
    force: bool = False,
    locked: bool = False,
    mode: int = 0o755,
) -> T:
    """Run ``write(tmp)`` in a fresh folder beside ``out`` and swap it in as ``out``.

    Holds :func:`output_lock` (``locked``: the caller already does); on any failure, Ctrl-C
    included, the temporary folder is removed and ``out`` is unchanged. OSErrors become
    one-line :class:`OutputError`. ``mode``: of the folder itself (0700 for private ones).
    """
    target = check_target(out, force=force)
    if locked:
        return _publish(out, target, write, mode)
    with output_lock(target):
        target = check_target(out, force=force)  # again: another writer may have been first
        return _publish(out, target, write, mode)


def _publish(out: Path, target: Path, write: Callable[[Path], T], mode: int) -> T:
    # Under the lock, a temporary folder of this output is left over from a killed writer.
    for kind in ("tmp", "old"):
        for stale in target.parent.glob(f".{glob.escape(target.name)}.hpcenv-{kind}-*"):
            shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.hpcenv-tmp-", dir=target.parent))
    except OSError as err:
        raise OutputError(f"cannot write to {out}: {err.strerror or err}") from err
    try:
        (tmp / MARKER).write_text(
            "Made by hpcenv; replaced whole on every write. Delete this file to keep "
            "hpcenv from replacing the folder without --force.\n",
            encoding="utf-8",
        )
        result = write(tmp)
        os.chmod(tmp, mode)  # mkdtemp makes it 0700
        _swap(tmp, target)
    except OSError as err:
        raise OutputError(f"cannot write to {out}: {err.strerror or err}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # after the swap: the previous output
    return result


def _swap(tmp: Path, target: Path) -> None:
    """Make ``tmp`` the new ``target``; afterwards ``tmp`` holds what was there (if anything)."""
    if not target.exists():
        os.rename(tmp, target)
        return
    if _exchange(tmp, target):
        return
    old = target.with_name(f".{target.name}.hpcenv-old-{os.getpid()}")
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    os.rename(old, tmp)


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically with mode 0600 (never world-readable, even briefly).

    The one way hpcenv writes a file it reads back (job records, image records, build stamps,
    tuning files, podman's configuration): into a folder only this user may write
    (:func:`hpcenv.paths.private_dir`), through a ``mkstemp`` name in it (``O_EXCL``: a link
    planted at a fixed temporary name was followed before, issue 40), renamed over ``path``
    (a link at ``path`` is replaced, never written through)."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
