"""``hpcenv logs --follow``, ``logs --json`` and ``cancel --json`` (issue 37, "logs where users
look"). The log reader (templates/jobs/log_chunks.sh) runs for real through
:class:`LocalTransport`: bounded pieces, exact bytes, a truncated file read again; under the
project's real Slurm the installed ``hpcenv`` follows a job's files as they grow until it ends,
and every refusal is one line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from requirements import needs_tool

from hpcenv.jobs.logtail import CHUNKS_SCRIPT, _drain, parse_chunks, printer, read_chunks
from hpcenv.jobs.submit import host_script
from hpcenv.jobs.transport import LocalTransport
from hpcenv.paths import templates_dir

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


@needs_tool("shellcheck", why="the host scripts are shellchecked as files")
def test_log_reader_passes_shellcheck() -> None:
    path = templates_dir() / "jobs" / CHUNKS_SCRIPT
    proc = subprocess.run(["shellcheck", "-S", "style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert host_script(CHUNKS_SCRIPT).rstrip("\n").splitlines()[-1].endswith('"$@"; exit $?')


def test_pieces_are_bounded_exact_and_resume(tmp_path: Path) -> None:
    log = tmp_path / "job-1.out"
    body = bytes(range(256)) * 4096  # 1 MiB, every byte value (newlines, ESC, NUL, invalid UTF-8)
    log.write_bytes(body)
    t = LocalTransport()
    first = read_chunks(t, [str(log), str(tmp_path / "absent.err")], {}, cap=1000)
    assert [(c.path, c.size, c.offset, c.data) for c in first] == [
        (str(log), len(body), 0, body[:1000])
    ]
    (again,) = read_chunks(t, [str(log)], {str(log): 1000}, cap=0)
    assert again.offset == 1000 and again.data == body[1000:]
    log.write_bytes(b"new\n")  # truncated: read from its start
    (fresh,) = read_chunks(t, [str(log)], {str(log): len(body)}, cap=0)
    assert (fresh.offset, fresh.data) == (0, b"new\n")


def test_drain_reads_a_long_file_in_pieces_of_at_most_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "big.out"
    body = b"".join(b"line %d\n" % i for i in range(300_000))  # ~3.5 MB
    log.write_bytes(body)
    got: list[bytes] = []
    offsets: dict[str, int] = {}
    _drain(LocalTransport(), [str(log)], offsets, lambda _p, d: got.append(d), 256 * 1024)
    assert b"".join(got) == body and max(map(len, got)) <= 256 * 1024 and len(got) > 10
    assert offsets == {str(log): len(body)}


def test_printer_shows_escapes_and_decodes_across_pieces() -> None:
    shown: list[str] = []
    write = printer(shown.append)
    euro = "€".encode()
    write("/w/a.out", b"one\n\x1b[2J" + euro[:1])
    write("/w/a.out", euro[1:] + b"\n")
    write("/w/a.err", b"bad \xff\n")
    assert "".join(shown) == ("==> /w/a.out <==\none\n\\x1b[2J€\n\n==> /w/a.err <==\nbad \ufffd\n")


def test_a_reader_line_of_another_shape_is_one_error() -> None:
    from hpcenv.errors import JobError

    with pytest.raises(JobError, match="unexpected answer from the log reader"):
        parse_chunks("/w/x.out\t3\t0\n")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache"), **extra}


def hpcenv(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, env=_env(tmp_path), timeout=180
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_follow_with_json_is_refused(tmp_path: Path) -> None:
    assert one_line(hpcenv(tmp_path, "logs", "12", "--follow", "--json")) == (
        "error: --follow prints the logs as they grow; --json is for the whole files"
    )


def test_follow_of_an_unknown_job_is_one_line(tmp_path: Path) -> None:
    assert one_line(hpcenv(tmp_path, "logs", "999999", "--follow")) == (
        "error: no record of job 999999 here; pass --site to ask its scheduler"
    )


# -- under the project's real Slurm --------------------------------------------------------


def _submit(tmp_path: Path, script: str) -> str:
    argv = [
        *(HPCENV, "submit", "--site", "local", "--no-container", "--single"),
        *("--workdir", str(tmp_path / "w"), "--json", "--", "bash", "-c", script),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["job_id"])


@pytest.mark.slurm
@pytest.mark.alongside
@pytest.mark.timeout(240)
def test_follow_prints_the_logs_as_they_grow_until_the_job_ends(
    slurm: SlurmInfo, tmp_path: Path
) -> None:
    job = _submit(tmp_path, 'for i in 1 2 3 4; do echo "step $i"; sleep 1; done; echo warn >&2')
    started = time.monotonic()
    proc = subprocess.Popen(
        [HPCENV, "logs", job, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the header comes while the job still runs
    assert first == f"==> {tmp_path}/w/hpcenv-{job}.out <==\n", first
    out = proc.stdout.read()  # to the end: the job has ended
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    text = first + out
    steps = [ln for ln in text.splitlines() if ln.startswith("step ")]
    assert steps == ["step 1", "step 2", "step 3", "step 4"], text
    assert f"==> {tmp_path}/w/hpcenv-{job}.err <==\nwarn\n" in text
    assert err.strip().startswith(f"job {job}: COMPLETED"), err
    assert time.monotonic() - started >= 3  # it followed; it did not print once and leave


@pytest.mark.slurm
@pytest.mark.alongside
@pytest.mark.timeout(240)
def test_follow_of_a_failed_job_exits_2_and_json_forms(slurm: SlurmInfo, tmp_path: Path) -> None:
    job = _submit(tmp_path, "echo before; printf '\\033]0;title\\007\\n'; exit 3")
    proc = hpcenv(tmp_path, "logs", job, "--follow")
    assert proc.returncode == 2 and "before\n\\x1b]0;title\\x07\n" in proc.stdout, proc.stdout
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: job {job}: FAILED exit=3"), proc.stderr
    doc = json.loads(hpcenv(tmp_path, "logs", job, "--json").stdout)
    assert doc["job_id"] == job
    (out,) = [f for f in doc["files"] if f["path"].endswith(".out")]
    assert out["text"].endswith("before\n\x1b]0;title\x07\n") and out["size"] == len(
        out["text"].encode()
    )
    sleeper = _submit(tmp_path, "sleep 120")
    cancel = hpcenv(tmp_path, "cancel", sleeper, "--json")
    assert cancel.returncode == 0, cancel.stderr
    assert json.loads(cancel.stdout) == {"job_id": sleeper, "cancelled": True}


def test_an_empty_file_shows_its_header_once(tmp_path: Path) -> None:
    """As logs always showed: an empty stderr file is listed (a test removes what it lists)."""
    (tmp_path / "a.out").write_bytes(b"x\n")
    (tmp_path / "a.err").write_bytes(b"")
    shown: list[str] = []
    paths = [str(tmp_path / "a.out"), str(tmp_path / "a.err")]
    offsets: dict[str, int] = {}
    write = printer(shown.append)
    for _ in range(2):  # a follower's second look adds nothing
        _drain(LocalTransport(), paths, offsets, write, 1024)
    assert "".join(shown) == f"==> {paths[0]} <==\nx\n\n==> {paths[1]} <==\n"
