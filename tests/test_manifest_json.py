"""``hpcenv manifest --json`` (issue 37: README says every command that prints data takes
--json): the installed command as a process, writing and verifying; a failed verify stays the
one error line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HPCENV = Path(sys.executable).with_name("hpcenv")


def manifest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), "manifest", *args], capture_output=True, text=True, timeout=60
    )


def test_manifest_writes_and_verifies_as_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    (data / "b.bin").write_bytes(b"bb")
    wrote = manifest(str(data), "--json")
    assert wrote.returncode == 0, wrote.stderr
    doc = json.loads(wrote.stdout)
    assert doc == {
        "directory": str(data),
        "manifest": str(data / ".hpcenv-manifest"),
        "files": 2,
        "written": True,
    }
    checked = manifest(str(data), "--verify", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout) == {k: v for k, v in doc.items() if k != "written"} | {
        "verified": True
    }
    (data / "a.bin").write_bytes(b"c")  # same size, other bytes
    bad = manifest(str(data), "--verify", "--json")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == f"error: {data}: sha256: a.bin differs"
