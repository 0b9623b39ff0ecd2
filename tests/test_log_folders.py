"""``-o``/``-e`` take a folder (issue 37): ``logs/`` (in the workdir) or an absolute folder gets
the scheduler's default file name inside it, the folder is made before the scheduler opens the
file, and ``status``/``logs`` read it there. Under the project's real Slurm the installed
``hpcenv`` submits with both forms and ``logs`` prints both files; a folder where the scheduler
expands no job id (PBS), or one that climbs out (``../``), is one line and exit 2.

Without ``-o``/``-e`` the logs go beside the folder ``submit`` is called from, as sbatch and
bsub write them, unless ``--workdir`` names hpcenv's folder for them, the site says not to run
jobs from that folder, or the scheduler names one fixed file (PBS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hpcenv.jobs.schedulers import get_scheduler
from hpcenv.jobs.spec import JobSpec

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def hpcenv(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")},
        timeout=180,
    )


def test_a_folder_gets_the_default_name_in_each_scheduler_s_words() -> None:
    job = JobSpec(name="train", command=["true"], stdout="logs/", stderr="/scratch/me/")
    assert get_scheduler("slurm").log_names(job) == (
        "logs/train-%j.out",
        "/scratch/me/train-%j.err",
    )
    assert get_scheduler("lsf").log_names(job) == ("logs/train-%J.out", "/scratch/me/train-%J.err")


def test_dry_run_makes_the_folders_before_submitting(tmp_path: Path) -> None:
    out = tmp_path / "outs"
    out.mkdir()  # an existing absolute folder needs no trailing /
    args = ("--site", "local", "--no-container", "--workdir", "/w", "-o", "logs/", "-e", str(out))
    proc = hpcenv(tmp_path, "submit", *args, "--dry-run", "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert (
        f"note: dry run: a submit runs: mkdir -p -- /w/logs {out} && mkdir -p -- /w && cd -- /w "
        "&& sbatch --parsable --comment=hpcenv-TOKEN < JOB_SCRIPT"
    ) in proc.stderr.splitlines()
    assert f"note: dry run: logs: /w/logs/hpcenv-<id>.out, {out}/hpcenv-<id>.err" in proc.stderr
    assert "#SBATCH --output=logs/hpcenv-%j.out" in proc.stdout.splitlines()
    assert f"#SBATCH --error={out}/hpcenv-%j.err" in proc.stdout.splitlines()


def _from(folder: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, "submit", *args, "--dry-run", "--", "true"],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "HPCENV_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)},
        timeout=180,
    )


def test_by_default_the_logs_go_beside_the_submit_folder(tmp_path: Path) -> None:
    here = tmp_path / "project"
    here.mkdir()
    proc = _from(here, tmp_path, "--site", "local", "--no-container")
    assert proc.returncode == 0, proc.stderr
    assert f"#SBATCH --output={here}/hpcenv-%j.out" in proc.stdout.splitlines()
    assert f"#SBATCH --error={here}/hpcenv-%j.err" in proc.stdout.splitlines()
    assert f"note: dry run: logs: {here}/hpcenv-<id>.out, {here}/hpcenv-<id>.err" in proc.stderr
    # --chdir moves them with the job
    other = tmp_path / "other"
    other.mkdir()
    proc = _from(here, tmp_path, "--site", "local", "--no-container", "--chdir", str(other))
    assert f"#SBATCH --output={other}/hpcenv-%j.out" in proc.stdout.splitlines()
    # --workdir is "hpcenv's folder for the job (steps, logs)": they stay there
    proc = _from(here, tmp_path, "--site", "local", "--no-container", "--workdir", "/w")
    assert "#SBATCH --output=hpcenv-%j.out" in proc.stdout.splitlines()
    assert "note: dry run: logs: /w/hpcenv-<id>.out, /w/hpcenv-<id>.err" in proc.stderr


def test_logs_stay_in_the_workdir_where_the_site_says_not_to_run_jobs(tmp_path: Path) -> None:
    site = tmp_path / "local-home.yaml"
    site.write_text(
        "extends: local\n"
        "name: local-home\n"
        "filesystems:\n"
        "  - {name: home, kind: local, path: $HOME, purpose: home, submit_here: false}\n"
        "  - {name: scratch, kind: local, path: /var/tmp/hpcenv-scratch, purpose: scratch}\n"
    )
    home_run = tmp_path / "run"  # under $HOME (tmp_path): the site says not to submit here
    home_run.mkdir()
    proc = _from(home_run, tmp_path, "--site", str(site), "--no-container")
    assert proc.returncode == 0, proc.stderr
    assert "says not to submit jobs from" in proc.stderr
    assert "#SBATCH --output=hpcenv-%j.out" in proc.stdout.splitlines()
    # characters a log path may not carry: the logs stay in the workdir too
    odd = tmp_path / "at@host:run"  # a path the job may run in, not one a log name carries
    odd.mkdir()
    proc = _from(odd, tmp_path, "--site", "local", "--no-container")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --output=hpcenv-%j.out" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("--site", "aurora", "-A", "abc", "-r", "torch-gpu", "-o", "logs/"),
            "error: -o/--output 'logs/': pbs expands no job id in a log name, so a folder would "
            "hold one file for every job; give a file name",
            id="pbs",
        ),
        pytest.param(
            ("--site", "local", "--no-container", "-e", "../up/"),
            "error: -e/--error '../up/': a file name in the job's workdir (letters, digits, "
            "_.%+-, Slurm's %j %A %a %x), or a folder for it ending in /",
            id="climbs-out",
        ),
    ],
)
def test_refusals(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = hpcenv(tmp_path, "submit", *args, "--dry-run", "--", "true")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [message] and "Traceback" not in proc.stderr


@pytest.mark.slurm
@pytest.mark.alongside
@pytest.mark.timeout(240)
def test_logs_land_in_the_folders_and_logs_reads_them(slurm: SlurmInfo, tmp_path: Path) -> None:
    errs = tmp_path / "errs"  # absolute, not there yet: submit makes it
    args = ("--site", "local", "--no-container", "--single", "--workdir", str(tmp_path / "w"))
    proc = hpcenv(
        tmp_path,
        "submit",
        *args,
        *("-o", "logs/", "-e", f"{errs}/", "--wait", "--json", "--"),
        *("bash", "-c", "echo to-out; echo to-err >&2"),
    )
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_id"]
    out = tmp_path / "w" / "logs" / f"hpcenv-{job}.out"
    err = errs / f"hpcenv-{job}.err"
    assert "to-out" in out.read_text() and err.read_text() == "to-err\n"
    logs = hpcenv(tmp_path, "logs", job)
    assert logs.returncode == 0, logs.stderr
    assert f"==> {out} <==" in logs.stdout and f"==> {err} <==\nto-err\n" in logs.stdout


@pytest.mark.slurm
@pytest.mark.alongside
@pytest.mark.timeout(240)
def test_default_logs_land_beside_the_submit_folder_and_logs_reads_them(
    slurm: SlurmInfo, tmp_path: Path
) -> None:
    here = tmp_path / "project"
    here.mkdir()
    proc = subprocess.run(
        [HPCENV, "submit", "--site", "local", "--no-container", "--single", "--wait", "--json"]
        + ["--", "bash", "-c", "echo to-out; echo to-err >&2"],
        capture_output=True,
        text=True,
        cwd=here,
        env={**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")},
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_id"]
    out, err = here / f"hpcenv-{job}.out", here / f"hpcenv-{job}.err"
    assert "to-out" in out.read_text() and err.read_text() == "to-err\n"
    logs = hpcenv(tmp_path, "logs", job)
    assert logs.returncode == 0, logs.stderr
    assert f"==> {out} <==" in logs.stdout and f"==> {err} <==\nto-err\n" in logs.stdout
