"""Issue 35, "torchrun does not start": what the installed ``hpcenv submit --launcher torchrun``
renders for the commands torchrun users type, and the refusal of a launcher in the command.

Run as a real process (the exit code and the one ``error:`` line are what a user sees). The rule
itself is :func:`hpcenv.jobs.launchers.torchrun_runs_python`, tested in tests/test_launchers.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HPCENV = Path(sys.executable).with_name("hpcenv")
FRONTIER = ["--site", "frontier", "-r", "torch-gpu", "-A", "csc599", "-N", "2"]
RDZV_ID = '"--rdzv-id=$HPCENV_JOB_ID"'  # torchrun's last option as the job script quotes it


def _submit(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``hpcenv submit`` for Frontier, called from ``folder`` (a project with train.py)."""
    assert HPCENV.is_file(), f"the installed console script is missing: {HPCENV}"
    env = {**os.environ, "HPCENV_CACHE": str(folder / ".cache")}
    return subprocess.run(
        [str(HPCENV), "submit", *FRONTIER, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=120,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('training')\n")
    return tmp_path


def _torchrun_line(script: str) -> str:
    """The job script's one launch line (srun ... apptainer exec ... torchrun ...)."""
    lines = [ln for ln in script.splitlines() if " torchrun --nnodes=2 " in ln]
    assert len(lines) == 1, script
    return lines[0]


@pytest.mark.parametrize(
    "command", [["train.py"], ["train.py", "--arg", "x"], ["-m", "pkg.mod", "--arg", "x"]]
)
def test_a_script_or_module_runs_with_torchruns_python(project: Path, command: list[str]) -> None:
    proc = _submit(project, "--launcher", "torchrun", "--dry-run", "--", *command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = _torchrun_line(proc.stdout)
    assert "--no-python" not in line, line
    assert line.endswith(f"{RDZV_ID} {' '.join(command)}"), line


def test_a_program_runs_as_given_with_no_python(project: Path) -> None:
    proc = _submit(project, "--launcher", "torchrun", "--dry-run", "--", "python3", "train.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _torchrun_line(proc.stdout).endswith(f"{RDZV_ID} --no-python python3 train.py")


@pytest.mark.parametrize(
    ("launcher", "message"),
    [
        (
            ["--launcher", "torchrun"],
            "error: `torchrun` in the command would start a torchrun in every worker of "
            "--launcher torchrun: drop it (--launcher torchrun starts one per node)",
        ),
        (
            [],
            "error: `torchrun` in the command would start one torchrun per rank under the "
            "site's launcher: drop it and give --launcher torchrun",
        ),
    ],
)
def test_torchrun_in_the_command_exits_2_in_one_line(
    project: Path, launcher: list[str], message: str
) -> None:
    proc = _submit(
        project, *launcher, "--dry-run", "--", "torchrun", "--nproc-per-node", "8", "train.py"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [message], proc.stderr
    assert proc.stdout == ""
