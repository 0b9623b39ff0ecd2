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


class _Item:
    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_alongside_on_a_unit_test_is_refused_at_collection() -> None:
    """`make test` runs the unit set and then ``-m alongside``: a unit test marked alongside
    would run twice, so collection stops and names it; a real one passes."""
    from conftest import pytest_collection_modifyitems

    pytest_collection_modifyitems([_Item("t.py::real", "slurm", "alongside")])  # type: ignore[list-item]
    with pytest.raises(
        pytest.UsageError, match=r"none of podman, slurm, ssh, apptainer: t.py::unit"
    ):
        pytest_collection_modifyitems([_Item("t.py::unit", "alongside")])  # type: ignore[list-item]
