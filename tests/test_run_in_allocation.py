"""``hpcenv run`` and ``hpcenv shell`` (issue 37): the job submit would write, run inside an
allocation. The launch line is the plan's (compared with submit's dry run, per scheduler and
runtime); each refusal is one line and exit 2 from the installed ``hpcenv``; under the project's
real Slurm, ``salloc ... hpcenv run`` runs the ranks in the podman image, and ``hpcenv shell``
reads its commands from a pipe inside the same container."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hpcenv.jobs.interactive import allocation_variable
from hpcenv.jobs.schedulers import SCHEDULERS, get_scheduler

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
IMAGE = "localhost/hpcenv/horovod-cpu:local"
ALLOCATION_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID")
COMMAND = (
    "python3",
    "-c",
    "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])",
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATION_VARS}
    return {**env, "HPCENV_CACHE": str(tmp_path / "cache"), **extra}


def hpcenv(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCENV, *args],
        capture_output=True,
        text=True,
        env=_env(tmp_path, **extra),
        cwd=tmp_path,
        timeout=120,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if " was retired on " not in ln]  # summit
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


def test_every_scheduler_names_its_allocation_variable() -> None:
    found = {name: allocation_variable(get_scheduler(name)) for name in SCHEDULERS}
    assert {found[k] for k in ("slurm", "pbs", "lsf")} == set(ALLOCATION_VARS)


SITES = [
    pytest.param(("--site", "local", "--image", IMAGE, "-n", "2"), "slurm", id="slurm-podman"),
    pytest.param(
        ("--site", "frontier", "-A", "stf007", "-r", "torch-gpu"), "slurm", id="apptainer"
    ),
    pytest.param(("--site", "alps-clariden", "-A", "a01", "-r", "torch-gpu"), "slurm", id="edf"),
    pytest.param(("--site", "aurora", "-A", "abc", "-r", "torch-gpu"), "pbs", id="pbs"),
    pytest.param(("--site", "summit", "-A", "abc", "-r", "horovod-gpu"), "lsf", id="lsf"),
]
ALLOCATE = {"slurm": ["salloc"], "pbs": ["qsub", "-I"], "lsf": ["bsub", "-Is"]}


@pytest.mark.parametrize(("options", "scheduler"), SITES)
def test_run_dry_run_launch_line_is_submits(
    tmp_path: Path, options: tuple[str, ...], scheduler: str
) -> None:
    """The same command lines, in the same order, as the script submit's dry run prints; and
    the allocation form of the job's shape (salloc, qsub -I, bsub -Is)."""
    sub = hpcenv(tmp_path, "submit", *options, "--dry-run", "--json", "--", *COMMAND)
    assert sub.returncode == 0, sub.stderr
    plan = json.loads(sub.stdout)["plan"]
    script = json.loads(sub.stdout)["script"]
    run = hpcenv(tmp_path, "run", *options, "--dry-run", "--json", "--", *COMMAND)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    launch = next(s["command"] for s in plan["steps"] if s["kind"] == "launch")
    assert doc["launch"] == launch and launch in script.splitlines()
    assert doc["commands"] == [s["command"] for s in plan["steps"]]
    assert doc["script"] == script  # the very script, run by bash in the allocation
    assert doc["allocation"] == {
        "variable": allocation_variable(get_scheduler(scheduler)),
        "id": None,
    }
    assert doc["allocate"][: len(ALLOCATE[scheduler])] == ALLOCATE[scheduler]
    assert not any(
        a.startswith(("--output", "--error")) or a in ("-o", "-e") for a in doc["allocate"]
    )
    text = hpcenv(tmp_path, "run", *options, "--dry-run", "--", *COMMAND)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("# hpcenv run on ") and shlex.join(doc["allocate"]) in lines[0]
    assert lines[2:] == doc["commands"]


def test_run_dry_run_inside_an_allocation_says_which(tmp_path: Path) -> None:
    opts = ("--site", "aurora", "-A", "abc", "-r", "torch-gpu", "--dry-run", "--")
    proc = hpcenv(tmp_path, "run", *opts, "true", PBS_JOBID="42.aurora-pbs")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "# hpcenv run on aurora (pbs), inside allocation 42.aurora-pbs ($PBS_JOBID)"
    )


def test_allocate_forms(tmp_path: Path) -> None:
    def allocate(*options: str) -> list[str]:
        proc = hpcenv(tmp_path, "run", *options, "--dry-run", "--json", "--", "true")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["allocate"]

    assert allocate("--site", "aurora", "-A", "abc", "-r", "torch-gpu", "-N", "2") == [
        *("qsub", "-I", "-N", "torch-gpu", "-l", "select=2", "-l", "place=scatter"),
        *("-l", "walltime=00:30:00", "-A", "abc", "-q", "debug", "-l", "filesystems=home:flare"),
    ]
    summit = allocate("--site", "summit", "-A", "abc", "-r", "horovod-gpu")
    assert summit[:2] == ["bsub", "-Is"] and summit[-1] == "bash"
    assert "-nnodes" in summit and "-o" not in summit and "-e" not in summit
    local = allocate("--site", "local", "--image", IMAGE, "-N", "1", "-n", "2", "-t", "5")
    assert local[:4] == ["salloc", "--job-name=hpcenv", "--nodes=1", "--ntasks-per-node=2"]
    assert local[-1] == "--time=5", local


@pytest.mark.parametrize(
    ("options", "head", "prefix"),
    [
        pytest.param(
            ("--site", "local", "--image", IMAGE),
            'srun --nodes=1 --ntasks=1 --mpi=none bash "$HPCENV_STEPS/podman-rank.sh"',
            f"--interactive {IMAGE} bash",
            id="slurm-podman",
        ),
        pytest.param(
            ("--site", "aurora", "-A", "abc", "-r", "torch-gpu"),
            "apptainer exec",
            '.sif" bash',
            id="pbs",
        ),
        pytest.param(
            ("--site", "summit", "-A", "abc", "-r", "horovod-gpu"),
            "jsrun -n 1 -a 1 -c 1 -r 1 apptainer exec",
            '.sif" bash',
            id="lsf",
        ),
        pytest.param(
            ("--site", "alps-clariden", "-A", "a01", "-r", "torch-gpu"),
            'srun --ntasks=1 --nodes=1 "--environment=$HPCENV_STEPS/',
            '.toml" bash',
            id="edf",
        ),
    ],
)
def test_shell_dry_run(tmp_path: Path, options: tuple[str, ...], head: str, prefix: str) -> None:
    """One bash on the first node in the job's container: srun one task (Slurm), nothing on
    PBS (qsub -I's shell is on the first node), jsrun one task (LSF's launch node); the steps
    before the launch stay, none after it."""
    proc = hpcenv(tmp_path, "shell", *options, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last.startswith(head) and last.endswith(prefix), last
    assert proc.stdout.startswith("# hpcenv shell on ")


REFUSALS = [
    pytest.param(
        ("run", "--site", "local", "--no-container", "--", "true"),
        "error: hpcenv run runs inside an allocation and $SLURM_JOB_ID is not set here; get one "
        "first (salloc --job-name=hpcenv --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 "
        "--time=00:20:00), then run hpcenv run in it",
        id="outside-allocation",
    ),
    pytest.param(
        ("shell", "--site", "local", "--no-container"),
        "error: hpcenv shell runs inside an allocation and $SLURM_JOB_ID is not set here; get "
        "one first (salloc --job-name=hpcenv --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 "
        "--time=00:20:00), then run hpcenv shell in it",
        id="shell-outside-allocation",
    ),
    pytest.param(
        ("run", "--site", "local", "--no-container", "--after", "12", "--", "true"),
        "error: --after is for hpcenv submit; hpcenv run runs now, in this allocation, and "
        "prints to this terminal",
        id="after",
    ),
    pytest.param(
        ("run", "--site", "local", "--no-container", "-o", "x.out", "--", "true"),
        "error: -o/--output is for hpcenv submit; hpcenv run runs now, in this allocation, and "
        "prints to this terminal",
        id="output",
    ),
    pytest.param(
        ("run", "--site", "local", "--no-container", "--wait", "--", "true"),
        "error: --wait is for hpcenv submit; hpcenv run runs now, in this allocation, and "
        "prints to this terminal",
        id="wait",
    ),
    pytest.param(
        ("run", "--site", "local", "--no-container", "--transport", "ssh", "--", "true"),
        "error: --transport ssh: hpcenv run runs in the allocation this shell is in (log in to "
        "the site, get one, and run it there)",
        id="ssh",
    ),
    pytest.param(
        ("shell", "--site", "local", "--no-container", "--", "true"),
        "error: hpcenv shell takes no command (hpcenv run -- COMMAND runs one)",
        id="shell-command",
    ),
    pytest.param(
        ("run", "--site", "local", "--no-container"),
        "error: hpcenv run: give the command after -- (hpcenv shell opens a shell)",
        id="no-command",
    ),
]


@pytest.mark.parametrize(("args", "message"), REFUSALS)
def test_refusals(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    assert one_line(hpcenv(tmp_path, *args)) == message


# -- under the project's real Slurm --------------------------------------------------------


def _salloc(
    slurm: SlurmInfo, tmp_path: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["salloc", "--nodes=1", "--ntasks=2", "--time=5", HPCENV, *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=_env(tmp_path, SLURM_CONF=str(slurm.conf)),
        cwd=tmp_path,
        timeout=200,
    )


@pytest.mark.slurm
@pytest.mark.podman
@pytest.mark.timeout(300)
def test_run_inside_salloc(slurm: SlurmInfo, local_image: str, tmp_path: Path) -> None:
    """Two ranks in the podman image, with torch's env:// names from the job's rank step; the
    command's exit status is hpcenv run's."""
    opts = ("--site", "local", "--image", local_image, "-n", "2", "--workdir", str(tmp_path / "w"))
    proc = _salloc(slurm, tmp_path, "run", *opts, "--", *COMMAND)
    assert proc.returncode == 0, proc.stderr
    ranks = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("rank "))
    assert ranks == ["rank 0 of 2", "rank 1 of 2"], proc.stdout
    failed = _salloc(slurm, tmp_path, "run", *opts, "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7, failed.stderr


@pytest.mark.slurm
@pytest.mark.podman
@pytest.mark.timeout(300)
def test_shell_inside_salloc_reads_a_pipe(
    slurm: SlurmInfo, local_image: str, tmp_path: Path
) -> None:
    """The shell runs in the image (podman's /run/.containerenv, horovod), on an allocated node,
    with the job's environment; what it reads comes from stdin."""
    opts = ("--site", "local", "--image", local_image, "--workdir", str(tmp_path / "w"))
    script = (
        'echo "in $SLURM_JOB_ID threads=$OMP_NUM_THREADS"\n'
        "test -e /run/.containerenv && python3 -c 'import horovod; print(\"horovod here\")'\n"
        "exit 3\n"
    )
    proc = _salloc(slurm, tmp_path, "shell", *opts, stdin=script)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("in ") and ln.endswith(" threads=2") for ln in lines), proc.stdout
    assert "horovod here" in lines, proc.stdout  # podman's mark, and the image's horovod


@pytest.mark.slurm
@pytest.mark.apptainer
@pytest.mark.timeout(600)
def test_run_inside_salloc_in_the_sif(
    slurm: SlurmInfo, site_mpi_prefix: Path, site_apptainer: Path, tmp_path: Path
) -> None:
    """The SIF site with the bind model: the job's preflight step (the site MPI replaces the
    image's) runs before the launch, as in the batch job, and two ranks run inside the SIF."""
    from image_builds import built

    built("bind")
    built("bind-sif")
    opts = ("--site", "local-bind-sif", "-r", "horovod-cpu", "-n", "2")
    probe = "import os; print('rank', os.environ['RANK'], os.path.isdir('/.singularity.d'))"
    proc = _salloc(
        slurm,
        tmp_path,
        "run",
        *opts,
        "--workdir",
        str(tmp_path / "w"),
        "--",
        "python3",
        "-c",
        probe,
    )
    assert proc.returncode == 0, proc.stderr
    assert "replaces the image's" in proc.stdout  # bind-preflight.sh, inside the image
    ranks = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("rank "))
    assert ranks == ["rank 0 True", "rank 1 True"], proc.stdout


def test_run_reads_the_project_file_as_submit_does(tmp_path: Path) -> None:
    """``./hpcenv.yaml`` under the options given: the same job as submit's, with no --site."""
    (tmp_path / "hpcenv.yaml").write_text('site: local\nnodes: 1\ntime: "00:10:00"\n')
    sub = hpcenv(tmp_path, "submit", "--no-container", "--dry-run", "--json", "--", "true")
    assert sub.returncode == 0, sub.stderr
    run = hpcenv(tmp_path, "run", "--no-container", "--dry-run", "--json", "-t", "5", "--", "true")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["site"] == "local" and doc["allocate"][-1] == "--time=5"  # the flag wins
    steps = json.loads(sub.stdout)["plan"]["steps"]
    assert doc["commands"] == [s["command"] for s in steps]


def test_the_docs_commands_run(tmp_path: Path) -> None:
    """docs/interactive.md's hpcenv lines, on the local site as dry runs (outside an allocation
    a dry run is what answers)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "interactive.md").read_text()
    (block,) = re.findall(r"```sh\n(.*?)```", text, re.S)
    lines = [ln.split("#")[0] for ln in block.splitlines() if ln.startswith("hpcenv ")]
    assert [shlex.split(ln)[1] for ln in lines] == ["run", "shell", "run"]
    for line in lines:
        argv = shlex.split(line)
        args = [argv[1], "--site", "local", "--no-container", "--dry-run", *argv[2:]]
        proc = hpcenv(tmp_path, *args)
        assert proc.returncode == 0, (line, proc.stderr)
        assert proc.stdout.startswith(f"# hpcenv {argv[1]} on local (slurm), not inside")
