"""``submit --dry-run`` prints the exact submit command line and the log paths (issue 37): on
stderr as two note lines and in ``--json`` as ``submit_command`` and ``logs``, per scheduler.
Under the project's real Slurm the printed line, run by bash with the dry run's script, submits
the job, and its output lands at the printed log path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, "submit", *args, "--dry-run", "--", "true"],
        capture_output=True,
        text=True,
        env={**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")},
        cwd=tmp_path,
        timeout=120,
    )


def notes(proc: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "a submit runs: " in ln)
    logs = next(ln for ln in proc.stderr.splitlines() if ln.startswith("note: dry run: logs: "))
    return line.split("a submit runs: ", 1)[1], logs.removeprefix("note: dry run: logs: ")


@pytest.mark.parametrize(
    ("args", "line", "logs"),
    [
        pytest.param(
            (
                "--site",
                "local",
                "--no-container",
                "--workdir",
                "/w",
                "--after",
                "12",
                "-o",
                "a-%j.log",
            ),
            "mkdir -p -- /w && cd -- /w && sbatch --parsable --dependency=afterok:12 "
            "--kill-on-invalid-dep=yes --comment=hpcenv-TOKEN < JOB_SCRIPT",
            "/w/a-<id>.log, /w/hpcenv-<id>.err",
            id="slurm",
        ),
        pytest.param(
            ("--site", "aurora", "-A", "abc", "-r", "torch-gpu", "--workdir", "/w"),
            "HPCENV_PROJECT=abc; "
            'MPI_ROOT="${MPI_ROOT:?site aurora sets MPI_ROOT on its nodes}"; '
            "mkdir -p -- /w && cd -- /w && qsub < JOB_SCRIPT",
            "/w/torch-gpu.o<id>, /w/torch-gpu.e<id>",
            id="pbs",
        ),
        pytest.param(
            (
                "--site",
                "summit",
                "-A",
                "abc",
                "-r",
                "horovod-gpu",
                "--workdir",
                "/w",
                "--after",
                "7",
            ),
            "HPCENV_PROJECT=abc; "
            'MEMBERWORK="${MEMBERWORK:-/gpfs/alpine2/scratch/$USER}"; '
            "mkdir -p -- /w && cd -- /w && bsub -w 'done(7)' < JOB_SCRIPT",
            "/w/horovod-gpu-<id>.out, /w/horovod-gpu-<id>.err",
            id="lsf",
        ),
    ],
)
def test_dry_run_prints_the_submit_line_and_log_paths(
    tmp_path: Path, args: tuple[str, ...], line: str, logs: str
) -> None:
    proc = dry_run(tmp_path, *args)
    assert notes(proc) == (line, logs)
    doc = json.loads(dry_run(tmp_path, *args, "--json").stdout)
    assert doc["submit_command"] == line and ", ".join(doc["logs"]) == logs


@pytest.mark.slurm
@pytest.mark.alongside
@pytest.mark.timeout(240)
def test_the_printed_line_submits_and_logs_land_where_printed(
    slurm: SlurmInfo, tmp_path: Path
) -> None:
    args = ("--site", "local", "--no-container", "--single", "--workdir", str(tmp_path / "w"))
    proc = subprocess.run(
        [HPCENV, "submit", *args, "--dry-run", "--", "echo", "from-the-printed-line"],
        capture_output=True,
        text=True,
        env={**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")},
        timeout=120,
    )
    line, logs = notes(proc)
    script = tmp_path / "job.sh"
    script.write_text(proc.stdout)
    run = subprocess.run(
        ["bash", "-c", line.replace("JOB_SCRIPT", str(script))],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": str(slurm.conf)},
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    job_id = run.stdout.strip()
    assert job_id.isdigit(), run.stdout
    out = Path(logs.split(", ")[0].replace("<id>", job_id))
    deadline = time.monotonic() + 120
    while (
        "hpcenv: job " not in (out.read_text() if out.exists() else "")
        or "done at" not in out.read_text()
    ):
        assert time.monotonic() < deadline, f"{out} did not get the job's output"
        time.sleep(0.5)
    assert "from-the-printed-line" in out.read_text()
