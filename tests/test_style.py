"""One formatting policy, applied by a tool: ``make lint`` and this test (so CI applies it too)
run ``ruff format --check``, ``ruff check`` and mypy over the package and the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "argv",
    [
        ["ruff", "format", "--check", "hpcenv", "tests"],
        ["ruff", "check", "hpcenv", "tests"],
        ["mypy", "hpcenv"],
    ],
    ids=["ruff-format", "ruff-check", "mypy"],
)
def test_lint(argv: list[str]) -> None:
    tool = BIN / argv[0]
    assert tool.is_file(), f"{tool} missing: make venv installs the dev tools"
    proc = subprocess.run(
        [str(tool), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_no_format_skip_markers() -> None:
    """The formatter decides layout: no ``# fmt: skip``/``# fmt: off`` left to argue with it."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("hpcenv", "tests")
        for path in (ROOT / folder).rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.rstrip().endswith(("# fmt: " + "skip", "# fmt: " + "off"))
    ]
    assert not found, found
