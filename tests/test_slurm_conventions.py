"""``hpcenv submit`` takes Slurm's options on every scheduler (issue 22): ``-n`` is the total
number of tasks, combinations that do not divide or oversubscribe are refused with one line, and
the job runs in the folder ``submit`` was called from. Process tests run the installed hpcenv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.jobs import render_job
from hpcenv.jobs.placement import job_placement
from hpcenv.jobs.schedulers import get_scheduler
from hpcenv.jobs.service import command_script
from hpcenv.jobs.spec import JobSpec
from hpcenv.site import load_site

HPCENV = Path(sys.executable).with_name("hpcenv")
FRONTIER = ("--site", "frontier", "-r", "torch-gpu", "-A", "CSC1", "--dry-run")


def hpcenv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert HPCENV.is_file(), f"the installed console script is missing: {HPCENV}"
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def plan(*args: str, cwd: Path | None = None) -> dict:
    proc = hpcenv("submit", "--json", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["plan"]


def one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    # a retired site's one-line warning may come first (summit)
    lines = [ln for ln in proc.stderr.strip().splitlines() if " was retired on " not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_ntasks_is_the_total_on_frontier(tmp_path: Path) -> None:
    """``-N 2 -n 16`` on Frontier: 16 ranks, 8 per node, one GCD each (never 32)."""
    proc = hpcenv("submit", *FRONTIER, "-N", "2", "-n", "16", "--json", "--", "true")
    assert proc.returncode == 0, proc.stderr
    p = json.loads(proc.stdout)["plan"]["placement"]
    assert (p["nodes"], p["ranks_per_node"], p["gpus_per_rank"], p["gpu_bind"]) == (
        2,
        8,
        1,
        "closest",
    )
    assert "the total, as in Slurm: 8 per node on 2 nodes" in proc.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("-N", "2", "-n", "32"), ("16 ranks per node > 8 GPUs", "--force")),
        (("-N", "2", "-n", "15"), ("does not divide over -N/--nodes 2",)),
        (("-N", "2", "-n", "16", "--ntasks-per-node", "4"), ("2 node(s) x", "= 8")),
        (("-n", "3"), ("do not divide among 3 ranks",)),
        (("-n", "4", "--gpus-per-task", "4"), ("= 16 GPUs", "has 8")),
        (("--gpus-per-node", "9"), ("--gpus-per-node 9",)),
        (("--gpus-per-node", "4"), ("8 ranks per node > 4 GPUs (--gpus-per-node 4)",)),
        (("-n", "8", "-c", "8"), ("over-subscription",)),
        (("-t", "1:30"), ("-t/--time", "ambiguous")),
        (("-t", "2-25:00:00"), ("-t/--time",)),
        (("-J", "my job"), ("-J/--job-name",)),
        (("-o", "logs/x.out"), ("-o/--output", "a folder for it ending in /")),
        (("-n", "0"), ("ntasks", "at least 1")),
    ],
)
def test_bad_combinations_are_one_line_errors(
    args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    one_line_error(hpcenv("submit", *FRONTIER, *args, "--", "true"), *words)


def test_cpus_per_task_counts_the_schedulers_cpus() -> None:
    """Perlmutter's Slurm counts hardware threads: ``-c 32`` is 16 cores, ``-c 3`` refused."""
    site = load_site("perlmutter")
    p = job_placement(site, JobSpec(command=["x"], ntasks=4, cpus_per_task=32))
    assert (p.ranks_per_node, p.cores_per_rank) == (4, 16)
    one_line_error(
        hpcenv(
            "submit",
            "--site",
            "perlmutter",
            "-r",
            "torch-gpu",
            "-A",
            "m1",
            "--dry-run",
            "-c",
            "3",
            "--",
            "true",
        ),
        "2 CPUs per core",
    )


def test_options_map_to_each_scheduler() -> None:
    """Names, logs, time, queue and QOS in each scheduler's own words."""
    job = JobSpec(
        command=["x"], name="train", stdout="%x-%j.out", stderr="%x-%A_%a.err", walltime="90"
    )
    assert get_scheduler("slurm").log_names(job) == ("train-%j.out", "train-%A_%a.err")
    assert get_scheduler("lsf").log_names(job) == ("train-%J.out", "train-%J_%I.err")
    summit = render_job(load_site("summit"), job.model_copy(update={"account": "CSC1"}))
    assert "#BSUB -W 01:30" in summit and "#BSUB -o train-%J.out" in summit
    aurora = load_site("aurora")
    plain = job.model_copy(update={"account": "p1", "stdout": "%x.out", "stderr": None})
    script = render_job(aurora, plain)
    assert "#PBS -o train.out" in script and "#PBS -l walltime=01:30:00" in script
    one_line_error(
        hpcenv(
            "submit",
            "--site",
            "aurora",
            "-r",
            "torch-ccl",
            "-A",
            "p1",
            "--dry-run",
            "-o",
            "%j.out",
            "--",
            "true",
        ),
        "pbs has no pattern '%j'",
    )
    # -q is Slurm's QOS; on PBS the old "-q QUEUE" says where the queue went
    one_line_error(
        hpcenv(
            "submit",
            "--site",
            "aurora",
            "-r",
            "torch-ccl",
            "-A",
            "p1",
            "--dry-run",
            "-q",
            "debug",
            "--",
            "true",
        ),
        "'debug' is a partition on site 'aurora', not a QOS: give -p/--partition debug",
    )
    p = plan(*FRONTIER, "-q", "debug", "-p", "batch", "-J", "t1", "-t", "0-01:00", "--", "true")
    assert {
        "#SBATCH --qos=debug",
        "#SBATCH --partition=batch",
        "#SBATCH --job-name=t1",
        "#SBATCH --time=0-01:00",
    } <= set(p["directives"])


@pytest.mark.parametrize(
    ("command", "script"),
    [
        (("python3", "train.py"), "train.py"),
        (("python3", "-u", "src/train.py", "--lr", "1"), "src/train.py"),
        (("python3", "-m", "torch.distributed.run", "x.py"), None),
        (("python3", "-c", "print(1)"), None),
        (("./run.sh",), "./run.sh"),
        (("/opt/venv/bin/python3", "/opt/x.py"), None),
        (("python3", "/opt/x.py"), None),
        (("hostname",), None),
        (("bash", "{data}/x.sh"), None),
    ],
)
def test_command_script(command: tuple[str, ...], script: str | None) -> None:
    assert command_script(command) == script


def test_job_runs_where_submit_was_called(tmp_path: Path) -> None:
    """The default chdir is the current folder: exported, entered before the steps, bound into
    the container (and its start folder), while hpcenv's steps stay in the workdir."""
    (tmp_path / "train.py").write_text("print(1)\n")
    p = plan(*FRONTIER, "--", "python3", "train.py", cwd=tmp_path)
    assert p["paths"]["chdir"] == str(tmp_path)
    argv = p["launch"]["argv"]
    assert ["--pwd", str(tmp_path)] == argv[argv.index("--pwd") : argv.index("--pwd") + 2]
    assert str(tmp_path) in [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    other = tmp_path / "elsewhere"
    other.mkdir()
    p = plan(*FRONTIER, "--chdir", str(other), "--", "true", cwd=tmp_path)
    assert p["paths"]["chdir"] == str(other)
    # podman-hpc (Perlmutter): the folder is a volume and the container's workdir
    p = plan(
        "--site",
        "perlmutter",
        "-r",
        "torch-gpu",
        "-A",
        "m1",
        "--dry-run",
        "--",
        "python3",
        "train.py",
        cwd=tmp_path,
    )
    argv = p["launch"]["argv"]
    assert f"--volume={tmp_path}:{tmp_path}" in argv and f"--workdir={tmp_path}" in argv


def test_script_rendered_with_cd_into_chdir(tmp_path: Path) -> None:
    job = JobSpec(command=["python3", "train.py"], chdir=str(tmp_path), account="CSC1")
    script = render_job(load_site("frontier"), job, "/x.sif")
    assert f"export HPCENV_CHDIR={tmp_path}" in script
    assert script.index('cd "$HPCENV_WORKDIR"') < script.index('cd "$HPCENV_CHDIR"')
    assert script.index('cd "$HPCENV_CHDIR"') < script.index("srun --nodes")


def test_missing_script_is_refused_before_queueing(tmp_path: Path) -> None:
    """Not a dry run: the check comes before any scheduler is asked (none is needed here)."""
    env_cwd = tmp_path
    proc = hpcenv(
        "submit", "--site", "local", "--no-container", "--", "python3", "train.py", cwd=env_cwd
    )
    one_line_error(proc, "train.py: no such file in", str(tmp_path))
    proc = hpcenv(
        "submit",
        "--site",
        "local",
        "--no-container",
        "--chdir",
        str(tmp_path / "nope"),
        "--",
        "true",
        cwd=env_cwd,
    )
    one_line_error(proc, "--chdir", "no such folder")


# Queue limits per real site (scheduler.queue_limits; sources in docs/sites/NAME.md).
LIMITS = [
    # site, recipe, options, routed-to directive or None, error words or None
    ("frontier", "torch-gpu", ("-N", "10", "-t", "10:00:00"), "#SBATCH --partition=extended", None),
    ("frontier", "torch-gpu", ("-N", "100", "-t", "10:00:00"), None, ("at most 6 h for 92-183",)),
    ("frontier", "torch-gpu", ("-N", "100", "-t", "06:00:00"), "#SBATCH --partition=batch", None),
    ("frontier", "torch-gpu", ("-q", "debug", "-t", "03:00:00"), None, ("qos 'debug'", "2 h")),
    ("aurora", "torch-gpu", ("-N", "8"), "#PBS -q debug-scaling", None),
    ("aurora", "torch-gpu", ("-t", "3"), None, ("5 min to 1 h", "3 min asked")),
    ("aurora", "torch-gpu", ("-N", "300", "-p", "prod", "-t", "13:00:00"), None, ("12 h",)),
    ("aurora", "torch-gpu", ("-N", "1200", "-p", "prod", "-t", "13:00:00"), "#PBS -q prod", None),
    ("summit", "torch-gpu", ("-N", "2", "-t", "12:00:00"), "#BSUB -q batch-hm", None),
    ("summit", "torch-gpu", ("-N", "60", "-t", "12:00:00"), None, ("at most 6 h for 46-91",)),
    ("perlmutter", "torch-gpu", ("-t", "3-00:00:00"), None, ("qos 'regular'", "2 d")),
    ("perlmutter", "torch-gpu", ("-q", "debug", "-N", "9"), None, ("qos 'debug'", "1-8 node")),
    (
        "generic-slurm",
        "horovod-cpu",
        ("-N", "500", "-t", "3-00:00:00"),
        "#SBATCH --partition=compute",
        None,
    ),
]


@pytest.mark.parametrize(("site", "recipe", "args", "directive", "error"), LIMITS)
def test_queue_limits_per_site(
    site: str,
    recipe: str,
    args: tuple[str, ...],
    directive: str | None,
    error: tuple[str, ...] | None,
) -> None:
    base = ("submit", "--site", site, "-r", recipe, "-A", "csc42", "--dry-run", *args)
    proc = hpcenv(*base, "--", "true")
    if error:
        one_line_error(proc, "scheduler.queue_limits", *error)
        return
    assert proc.returncode == 0, proc.stderr
    assert directive in proc.stdout.splitlines()
    routed = [ln for ln in proc.stderr.splitlines() if "routed to" in ln]
    assert len(routed) == (0 if directive.endswith(("batch", "compute", "prod")) else 1)
