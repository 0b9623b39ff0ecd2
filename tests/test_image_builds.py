"""The builds `make test` starts early (tests/image_builds.py) stay builds hpcenv accepts: each
argument list, with --dry-run, is resolved and rendered by the installed ``hpcenv``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from image_builds import BUILDS

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


@pytest.mark.parametrize("name", list(BUILDS))
def test_each_early_build_is_one_hpcenv_accepts(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [HPCENV, "build", *BUILDS[name], "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HPCENV_CACHE": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "build" in proc.stdout
