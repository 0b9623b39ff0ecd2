"""The smoke suite's fixtures and result hooks, run for real against testinfra's local host."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FAKE_CHECK = """\
import json, os, sys
print("launcher noise")
print(json.dumps({"foo": os.environ.get("FOO"), "args": sys.argv[1:]}))
"""
BROKEN_CHECK = """\
import sys
print("partial output")
print("Traceback: boom", file=sys.stderr)
sys.exit(3)
"""
SUITE = """\
import pytest

def test_ok(run_check, record, target):
    doc = run_check("", "fake.py", "--x", "a b", env={"FOO": "bar"})
    assert doc == {"foo": "bar", "args": ["--x", "a b"]}
    assert target.ranks == 3
    record(n=3, sweep=[{"bytes": 8}])

def test_broken(run_check):
    run_check("", "broken.py")

def test_skipped(record):
    record(why="no binding")
    pytest.skip("ccl backend unavailable: precise reason")
"""


def test_fixtures_hooks_and_json_against_local_host(tmp_path: Path) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "fake.py").write_text(FAKE_CHECK)
    (checks / "broken.py").write_text(BROKEN_CHECK)
    (tmp_path / "test_suite.py").write_text(SUITE)
    out, junit = tmp_path / "results.json", tmp_path / "junit.xml"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "test_suite.py",
        "-p",
        "hpcenv.smoke.conftest",
        "-p",
        "no:cacheprovider",
        "--hosts=local://",
        f"--checks-dir={checks}",
        "--ranks=3",
        f"--smoke-json={out}",
        f"--junitxml={junit}",
    ]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr

    tests = {t["nodeid"].split("::")[-1]: t for t in json.loads(out.read_text())["tests"]}
    assert {k: v["outcome"] for k, v in tests.items()} == {
        "test_ok": "passed",
        "test_broken": "failed",
        "test_skipped": "skipped",
    }
    ok = tests["test_ok"]["metrics"]
    assert ok["n"] == 3 and ok["sweep"] == [{"bytes": 8}]
    assert ok["command"].endswith(f"python3 {checks}/fake.py --x 'a b'")
    assert "FOO=bar" in ok["command"] and "OMPI_ALLOW_RUN_AS_ROOT=1" in ok["command"]
    broken = tests["test_broken"]["message"]
    assert "broken.py exited 3" in broken and "Traceback: boom" in broken
    assert tests["test_skipped"]["message"] == "ccl backend unavailable: precise reason"
    assert tests["test_skipped"]["metrics"] == {"why": "no binding"}

    props = {
        p.get("name"): p.get("value")
        for case in ET.parse(junit).getroot().iter("testcase")
        if case.get("name", "").startswith("test_ok")
        for p in case.iter("property")
    }
    assert props["n"] == "3" and json.loads(props["sweep"] or "") == [{"bytes": 8}]
