"""The shipped scripts that run on the submitting host (templates/jobs/submit.sh, logs.sh), and
the rule behind them: no hpcenv module builds a shell program as a string (issue 18).

The scripts are shellchecked as files and run for real through :class:`LocalTransport` the way
:func:`hpcenv.jobs.submit.run_host_script` runs them (``bash -s -- ARGS`` with the script and
then the job script on stdin); the scheduler is a stand-in on PATH (the real Slurm and SSH runs
are in test_jobs_slurm.py and test_jobs_ssh.py)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest
from requirements import needs_tool

from hpcenv.jobs.submit import (
    LOGS_SCRIPT,
    SUBMIT_SCRIPT,
    _only_star,
    host_script,
    host_script_line,
    run_host_script,
)
from hpcenv.jobs.transport import LocalTransport
from hpcenv.paths import templates_dir

HOST_SCRIPTS = [SUBMIT_SCRIPT, LOGS_SCRIPT]
JOB = "#!/bin/bash\n#SBATCH --job-name=x\ntouch \"$PWNED\"\necho 'last line, no newline'"


@needs_tool("shellcheck", why="the host scripts are shellchecked as files")
@pytest.mark.parametrize("name", HOST_SCRIPTS)
def test_host_script_passes_shellcheck(name: str) -> None:
    path = templates_dir() / "jobs" / name
    proc = subprocess.run(["shellcheck", "-S", "style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", HOST_SCRIPTS)
def test_host_script_ends_by_calling_itself_and_exiting(name: str) -> None:
    """The framing's one rule: the last line calls the script's one function and exits, so
    nothing that follows on stdin (the job script) is ever read as commands here."""
    lines = host_script(name).rstrip("\n").splitlines()
    assert lines[-1].endswith('"$@"; exit $?'), lines[-1]


@pytest.fixture
def sched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``sbatch`` keeps the stdin it got and prints an id; ``squeue`` prints ``ID TOKEN``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\ncat >"$GOT"\necho 42\n')
    (bin_dir / "squeue").write_text('#!/bin/sh\ncat "$JOBS"\n')
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    (tmp_path / "jobs.txt").write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("GOT", str(tmp_path / "got.sh"))
    monkeypatch.setenv("JOBS", str(tmp_path / "jobs.txt"))
    monkeypatch.setenv("PWNED", str(tmp_path / "pwned"))
    return tmp_path


def _submit(args: list[str], prelude: str = ""):  # type: ignore[no-untyped-def]
    return run_host_script(LocalTransport(), SUBMIT_SCRIPT, args, prelude=prelude, stdin=JOB)


FIND = ["squeue", "--format=%i %k"]


def test_submit_hands_the_job_script_over_byte_for_byte(sched: Path) -> None:
    wd = sched / "work dir; touch $PWNED"  # a space, a ';' and a '$': one word all the same
    r = _submit([str(wd), "hpcenv-t1", str(len(FIND)), *FIND, "sbatch", "--parsable"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"HPCENV_WORKDIR={wd}\n42\n"
    assert (sched / "got.sh").read_text() == JOB
    assert not (sched / "pwned").exists()
    assert list((wd / ".hpcenv").iterdir()) == []  # the lock is removed


def test_submit_finds_the_job_with_its_token_and_reads_no_further(sched: Path) -> None:
    """A retry finds the first submission; the unread job script is never run here."""
    (sched / "jobs.txt").write_text("7 other\n9 hpcenv-t2\n")
    r = _submit([str(sched / "w"), "hpcenv-t2", str(len(FIND)), *FIND, "sbatch"])
    assert (r.returncode, r.stdout) == (
        0,
        f"HPCENV_WORKDIR={sched / 'w'}\nHPCENV_SUBMITTED_BEFORE=9\n",
    )
    assert not (sched / "got.sh").exists() and not (sched / "pwned").exists()


def test_submit_without_a_token_takes_no_lock(sched: Path) -> None:
    r = _submit([str(sched / "w"), "", "0", "sbatch"])
    assert (r.returncode, r.stdout) == (0, f"HPCENV_WORKDIR={sched / 'w'}\n42\n")
    assert not (sched / "w" / ".hpcenv").exists()


def test_submit_expands_the_workdirs_variables_after_the_prelude(sched: Path) -> None:
    from hpcenv.jobs.shell import Expand

    r = _submit([Expand("$HPCENV_T/w"), "", "0", "sbatch"], prelude=f"HPCENV_T={sched}; ")
    assert r.stdout.splitlines()[0] == f"HPCENV_WORKDIR={sched / 'w'}"


def test_submit_passes_the_submit_commands_failure_on(sched: Path) -> None:
    r = _submit([str(sched / "w"), "hpcenv-t3", "1", "squeue", "no-such-sbatch"])
    assert r.returncode == 127 and "command not found" in r.stderr
    assert list((sched / "w" / ".hpcenv").iterdir()) == []


@pytest.mark.parametrize(
    "args,why",
    [
        (["/w", "t"], "usage"),
        (["/w", "t", "x;y", "sbatch"], "NFIND is not a count"),
        (["/w", "t", "1", "squeue"], "no submit command"),
        (["/w", "", "1", "squeue", "sbatch"], "without a token"),
    ],
)
def test_submit_refuses_malformed_arguments(sched: Path, args: list[str], why: str) -> None:
    r = _submit(args)
    assert r.returncode == 2 and why in r.stderr and r.stdout == ""
    assert not (sched / "pwned").exists() and not (sched / "got.sh").exists()


def test_the_command_line_is_one_quoted_word_per_argument() -> None:
    line = host_script_line(["/a b", "x;rm -rf ~", "$(id)"], prelude="P=1; ")
    assert line == "P=1; bash -s -- '/a b' 'x;rm -rf ~' '$(id)'"


def test_logs_prints_each_file_once_only_star_matches(tmp_path: Path) -> None:
    for name in ("r.out", "r_1.err", "r_2.err", "q?.log", "qx.log"):
        (tmp_path / name).write_text(f"{name} text\n")
    paths = [f"{tmp_path}/r.out", f"{tmp_path}/r_*.err", f"{tmp_path}/q?.log", f"{tmp_path}/gone"]
    r = run_host_script(LocalTransport(), LOGS_SCRIPT, [_only_star(p) for p in paths])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(
        f"==> {tmp_path}/{n} <==\n{n} text\n" for n in ("r.out", "r_1.err", "r_2.err", "q?.log")
    )


# -- no shell programs built as Python strings ---------------------------------------------------
HPCENV = Path(__file__).resolve().parent.parent / "hpcenv"
# Shell loops, conditionals and locking in a string literal of a module (an f-string read whole,
# ``{}`` for each placed value) are a program built as a string. Ship it as a script with
# arguments instead (templates/jobs/, templates/image/).
CONTROL = re.compile(
    r"\bfor [A-Za-z_]\w* in\b[^;]*;\s*do\b"  # for f in ...; do
    r"|\bwhile\b[^;]*;\s*do\b"
    r"|;\s*then\b.*\bfi\b"  # if ...; then ...; fi
    r"|\bcase\b.*\bin\b.*\besac\b"
    r"|\bflock\s+(?:-\w+\s+)*\d"  # flock 9
    r"|\bexec\s+\d+[<>]",  # exec 9>lock
    re.DOTALL,
)
# Strings that still hold one, with why (none may be added: move it to a shipped script).
NOT_YET: dict[str, str] = {}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant and f-string (its placed values as ``{}``), except docstrings."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            out.append((node.lineno, text))
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        ):
            out.append((node.lineno, node.value))
    return out


def test_no_module_builds_a_shell_program_as_a_string() -> None:
    found = []
    for path in sorted(HPCENV.rglob("*.py")):
        rel = path.relative_to(HPCENV).as_posix()
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if CONTROL.search(text) and NOT_YET.get(rel, "\0") not in text:
                found.append(f"{rel}:{line}: {text[:80]!r}")
    assert not found, "ship these as scripts with arguments:\n" + "\n".join(found)
