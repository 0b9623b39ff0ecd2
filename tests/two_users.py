"""Two real Unix users on this machine, for the tests where another user is involved (issues 20
and 40): ``hpcenv-ua`` and ``hpcenv-ub``, made once with ``useradd`` (idempotent) and left in
place, both members of the project group ``hpcenv-proj``, as on a site's project storage.

The users run the installed ``hpcenv`` through :func:`as_user`, under :func:`expose_prefix`: the
test's interpreter (a venv whose base Python lives under ``/root``, mode 0700, on this machine
and in CI when pyenv provides ``python3``) cannot be run by other users, so their ``hpcenv`` runs
in a private mount namespace (``unshare --mount``) in which each folder that blocks them is
covered by an empty 0755 tmpfs with only the interpreter's, the venv's and this checkout's
folders bound back in. Nothing outside that process tree changes.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

from requirements import need_tool

A, B = "hpcenv-ua", "hpcenv-ub"
PROJECT_GROUP = "hpcenv-proj"
ROOT = Path(__file__).resolve().parent.parent


def make_user(name: str) -> pwd.struct_passwd:
    """The user ``name``, made (no home folder) if this machine has none yet; a member of
    :data:`PROJECT_GROUP`."""
    subprocess.run(["groupadd", "-f", PROJECT_GROUP], check=True)
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name], check=True)
    subprocess.run(["usermod", "-a", "-G", PROJECT_GROUP, name], check=True)
    return pwd.getpwnam(name)


def home(name: str) -> Path:
    """The user's home (useradd --no-create-home left none): made 0700 on first use."""
    pw = pwd.getpwnam(name)
    path = Path(pw.pw_dir)
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def _blocked_ancestor(path: Path) -> Path | None:
    """The first folder above ``path`` that other users cannot enter (no o+x), if any."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def expose_prefix(tmp: Path) -> list[str]:
    """An argv prefix that runs a command (as root, before ``runuser``) in a mount namespace
    where this interpreter, its venv and this checkout are reachable by every user."""
    needs = {
        Path(os.path.realpath(sys.executable)),
        Path(sys.base_prefix) / "lib",
        Path(sys.prefix) / "lib",
        ROOT / "hpcenv",
    }
    covers: dict[Path, set[str]] = {}
    for need in needs:
        blocker = _blocked_ancestor(need)
        if blocker is not None:
            covers.setdefault(blocker, set()).add(need.relative_to(blocker).parts[0])
    if not covers:
        return []
    need_tool("unshare", why="the other users' hpcenv runs in a private mount namespace")
    lines = ["set -e", "mount --make-rprivate /"]
    for i, (blocker, children) in enumerate(sorted(covers.items())):
        hold = tmp / f"hold-{i}"
        hold.mkdir()
        lines.append(f"mount --bind {blocker} {hold}")
        lines.append(f"mount -t tmpfs -o mode=0755 hpcenv-expose {blocker}")
        for child in sorted(children):
            lines.append(
                f"mkdir -p {blocker}/{child} && mount --bind {hold}/{child} {blocker}/{child}"
            )
    lines.append('exec "$@"')
    return ["unshare", "--mount", "--", "bash", "-c", "\n".join(lines), "expose"]


def as_user(name: str, prefix: list[str], *argv: str, umask: str = "", **env: str) -> list[str]:
    """``argv`` run as ``name`` with a clean environment (its home, ``env`` added); ``umask``:
    the user's umask for the command (``002`` on project storage)."""
    clean = [
        "env",
        "-i",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        f"HOME={home(name)}",
        f"USER={name}",
        "LANG=C.UTF-8",
        f"PYTHONPATH={ROOT}",
        *(f"{k}={v}" for k, v in env.items()),
    ]
    if umask:
        clean = ["bash", "-c", f'umask {umask} && exec "$@"', "as-user", *clean]
    return [*prefix, "runuser", "-u", name, "--", *clean, *argv]


def sh(name: str, script: str, *, umask: str = "") -> subprocess.CompletedProcess[str]:
    """``script`` run by bash as ``name`` (no venv needed)."""
    if umask:
        script = f"umask {umask} && {script}"
    return subprocess.run(
        ["runuser", "-u", name, "--", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
