"""Shared fixtures: sites, recipes and a CLI runner."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
# What tests need from the host, and the needs_tool mark: a failure under CI=true, else a skip.
pytest_plugins = ["requirements"]
# A shell without job control starts background jobs with SIGINT ignored, and an ignored signal
# stays ignored in every child: the Ctrl-C tests need the disposition a terminal gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Measured tuning files of this machine (hpcenv tune --measure) must not change what tests render.
# Set, not defaulted: a developer's exported HPCENV_TUNING_DIR must not leak in either.
_TUNING_DIR = tempfile.mkdtemp(prefix="hpcenv-test-tuning-")
os.environ["HPCENV_TUNING_DIR"] = _TUNING_DIR
atexit.register(shutil.rmtree, _TUNING_DIR, ignore_errors=True)


REAL_MARKS = ("podman", "slurm", "ssh", "apptainer")  # the Makefile's UNIT set is none of these


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``alongside`` is for real tests only: on a unit test it would run it twice in `make
    test` (with the unit tests, and again beside the background builds)."""
    wrong = [
        item.nodeid
        for item in items
        if item.get_closest_marker("alongside")
        and not any(item.get_closest_marker(m) for m in REAL_MARKS)
    ]
    if wrong:
        raise pytest.UsageError(
            f"marked alongside but none of {', '.join(REAL_MARKS)}: {', '.join(wrong)}"
        )


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def local_site():
    from hpcenv.site import load_site

    return load_site("local")
