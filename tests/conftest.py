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


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def local_site():
    from hpcenv.site import load_site

    return load_site("local")
