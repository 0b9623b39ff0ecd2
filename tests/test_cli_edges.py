"""The installed ``hpcenv`` at its edges (issue 20): an output it cannot write (a full disk, a
closed pipe), Ctrl-C at any moment, durations that are not durations, ``sites init`` paths that
are wrong, URLs Python cannot read. Each: one line on stderr, the right exit code, no traceback."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from interrupts import terminal_sigint

HPCENV = Path(sys.executable).with_name("hpcenv")
HOSTS = Path(__file__).parent / "data" / "hosts"


def hpcenv(*args: str, cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, timeout=120, **kw
    )


def one_error(proc: subprocess.CompletedProcess[str], code: int, pattern: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and re.search(pattern, lines[0]), proc.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["sites", "list"],
        ["--version"],
        ["render", "-s", "local", "-r", "horovod-cpu", "-f", "docker"],
        ["sites", "show", "frontier", "--json"],
    ],
)
def test_full_stdout_is_one_line_and_exit_1(args: list[str]) -> None:
    """``> /dev/full`` (every write: ENOSPC), as a redirect to a full disk: never exit 0."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [str(HPCENV), *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    one_error(proc, 1, r"^error: No space left on device$")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        ["render", "-s", "local", "-r", "horovod-cpu", "-f", "docker"],
        ["sites", "list"],
    ],
)
def test_closed_pipe_exits_non_zero_without_traceback(args: list[str]) -> None:
    """``| head -0``: the reader is gone before the output is written."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [str(HPCENV), *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert len(proc.stderr.splitlines()) <= 1, proc.stderr  # Rich's own exit says nothing


def _hpcenv_frames(err: str) -> list[str]:
    return [f for f in re.findall(r'File "([^"]+)"', err) if "/hpcenv/" in f or "typer" in f]


def test_ctrl_c_at_random_moments_is_130_without_traceback() -> None:
    """SIGINT at random points of ``sites list`` (module loading, the table, exit): 130 with
    one line, or 0 when the command had finished. Python's own startup (its frozen ``site``)
    comes before any line of the command; a signal there is Python's, not hpcenv's to catch.
    The command (bin/hpcenv, not a generated console script, which imported ``re`` first)
    takes SIGINT in its first statement."""
    assert "_signal.signal(_signal.SIGINT" in HPCENV.read_text()  # the installed one is ours
    rng = random.Random(20)
    seen: dict[int, int] = {}
    for _ in range(16):
        proc = subprocess.Popen(
            [str(HPCENV), "sites", "list"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=terminal_sigint,
        )
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        seen[proc.returncode] = seen.get(proc.returncode, 0) + 1
        assert proc.returncode in (0, 130, -signal.SIGINT), err
        assert not _hpcenv_frames(err), err
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1] == "interrupted", err
    assert seen.get(130), seen  # most signals land while hpcenv runs


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e400"])
def test_wait_timeout_must_be_a_duration(value: str) -> None:
    proc = hpcenv(
        "submit",
        "-s",
        "local",
        "-r",
        "horovod-cpu",
        "--wait",
        "--timeout",
        value,
        "--dry-run",
        "--",
        "true",
    )
    one_error(proc, 2, r"^error: --timeout \S+: give a number of seconds greater than 0$")


def test_tune_budget_must_be_a_duration() -> None:
    proc = hpcenv("tune", "-s", "local", "--budget", "nan")
    one_error(proc, 2, r"^error: --budget nan: give a number of seconds greater than 0$")


def test_sites_init_paths(tmp_path: Path) -> None:
    rec = HOSTS / "frontier"
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    cases = [
        (["--recorded", str(rec), "--out", "folder"], r"--out folder is a folder"),
        (["--recorded", str(rec), "--out", "folder", "--force"], r"--out folder is a folder"),
        (
            ["--recorded", str(rec), "--out", "file/x.yaml"],
            r"--out file/x.yaml: file is not a folder",
        ),
        (["--recorded", "missing"], r"--recorded missing does not exist"),
        (["--recorded", "file"], r"--recorded file is not a folder"),
    ]
    for args, pattern in cases:
        one_error(hpcenv("sites", "init", "x", *args, cwd=tmp_path), 2, "^error: " + pattern)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]


@pytest.mark.parametrize(
    ("lscpu", "pattern"),
    [
        (b"Architecture: x86_64\n", r"output of lscpu: no 'Socket\(s\)' line"),
        (
            b"Socket(s): \xff\xfe\nCore(s) per socket: 8\n",
            r"Socket\(s\) is '\\ufffd\\ufffd'|Socket",
        ),
        (b"Socket(s): " + b"9" * 5000 + b"\nCore(s) per socket: 8\n", r"not a whole number"),
        (None, r"lscpu.txt is not a file"),
    ],
)
def test_sites_init_bad_recordings(tmp_path: Path, lscpu: bytes | None, pattern: str) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for f in (HOSTS / "frontier").glob("*.txt"):
        (rec / f.name).write_bytes(f.read_bytes())
    if lscpu is None:
        (rec / "lscpu.txt").unlink()
        (rec / "lscpu.txt").mkdir()
    else:
        (rec / "lscpu.txt").write_bytes(lscpu)
    proc = hpcenv("sites", "init", "x", "--recorded", str(rec), cwd=tmp_path)
    one_error(proc, 2, pattern)
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://user:pw@mirror.example:99999/simple", "port out of range"),
        ("https://mirror.example:0/simple", "port 0"),
        ("https://[::1/simple", "invalid IPv6 URL"),
    ],
)
def test_url_ports_are_checked_when_the_site_loads(tmp_path: Path, url: str, why: str) -> None:
    site = tmp_path / "p.yaml"
    site.write_text(f'extends: local\nname: p\nbuild:\n  pip_index_url: "{url}"\n')
    for args in (
        ["sites", "validate", str(site)],
        ["render", "-s", str(site), "-r", "horovod-cpu", "-f", "docker"],
    ):
        proc = hpcenv(*args)
        one_error(proc, 2, f"field 'build.pip_index_url': not a usable URL: {why}")
        assert "pw" not in proc.stderr


@pytest.mark.parametrize("component", ["torch-ccl", "ipex"])
def test_required_component_without_its_prerequisite_is_refused(
    tmp_path: Path, component: str
) -> None:
    """A required component built for torch, in a recipe without torch: refused, never dropped
    silently (the image would lack what the recipe says it must have)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"name: r\ndescription: x\ncomponents:\n  {component}: required\n  mpi4py: required\n"
    )
    proc = hpcenv("render", "-s", "local", "-r", str(recipe), "-f", "docker")
    one_error(proc, 2, rf"^error: recipe r: components: {component} needs torch; add torch$")
    recipe.write_text(recipe.read_text().replace("required\n  mpi4py", "optional\n  mpi4py"))
    proc = hpcenv("resolve", "-s", "local", "-r", str(recipe), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["excluded"] == {
        component: "optional and built for torch, which the recipe lacks"
    }
