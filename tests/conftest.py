"""Shared fixtures: sites, recipes and a CLI runner."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
# Measured tuning files of this machine (hpcenv tune --measure) must not change what tests render.
os.environ.setdefault("HPCENV_TUNING_DIR", tempfile.mkdtemp(prefix="hpcenv-test-tuning-"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def local_site():
    from hpcenv.site import load_site

    return load_site("local")
