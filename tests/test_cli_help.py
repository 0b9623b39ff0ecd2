"""What the help and the tables say, as users see them (issue 22, "What the README, docs and
help say is true"): ``-h`` everywhere, ``hpcenv apptainer --help`` is help (not a privileged
container), tables piped into another program are not cut to 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HPCENV = Path(sys.executable).with_name("hpcenv")
ROOT = Path(__file__).resolve().parents[1]


def hpcenv(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, timeout=120, env=env
    )


def _commands() -> list[list[str]]:
    from typer.main import get_command

    from hpcenv.cli.main import app

    root = get_command(app)
    found: list[list[str]] = [[]]
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        found.append([name])
        for sub in getattr(cmd, "commands", {}):
            found.append([name, sub])
    return found


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "hpcenv")
def test_dash_h_is_help_everywhere(path: list[str]) -> None:
    proc = hpcenv(*path, "-h")
    assert proc.returncode == 0, proc.stderr
    assert "Usage: hpcenv" in proc.stdout, proc.stdout


@pytest.mark.parametrize("args", [["apptainer", "--help"], ["apptainer", "-h"], ["apptainer"]])
def test_apptainer_help_is_help_not_a_container(args: list[str]) -> None:
    proc = hpcenv(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: hpcenv apptainer ARGS..."), proc.stdout
    assert "hpcenv apptainer help exec" in proc.stdout


def test_piped_tables_are_not_cut() -> None:
    """``hpcenv sites list | grep``: every site's every recipe is there, nothing ends in '…'."""
    out = hpcenv("sites", "list").stdout
    assert "…" not in out
    for path in sorted((ROOT / "site-configs").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        line = next(ln for ln in out.splitlines() if f" {doc['name']} " in ln)
        for recipe in doc.get("recipes", []):
            assert recipe in line, (doc["name"], recipe, line)
