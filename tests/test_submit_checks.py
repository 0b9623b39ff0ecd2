"""``submit`` checks what ``build`` checks (issue 37): each case that exited 0 (a mistyped
recipe, a recipe the site's GPUs do not fit, a launcher the site does not offer, a QOS given as
a partition, an unknown QOS, ``-C cpu`` merged into ``gpu&cpu``, ``--after notajob``,
``--array 0-9`` read as ``-9``) exits 2 with one line, from the installed ``hpcenv`` as a
process, in a dry run as in a real submit; a dry run says in one line what it did not check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.errors import ConfigError
from hpcenv.jobs.spec import ArraySpec

HPCENV = Path(sys.executable).with_name("hpcenv")


def submit(*args: str, dry: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(HPCENV), "submit", *args, *(["--dry-run"] if dry else []), "--", "true"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if " was retired on " not in ln]  # summit
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    return lines[0]


FRONTIER = ("--site", "frontier", "-A", "stf007")
PERLMUTTER = ("--site", "perlmutter", "-A", "m1234")

CASES = [
    pytest.param(
        [*FRONTIER, "-r", "torch-gpus"],
        "unknown recipe 'torch-gpus' (did you mean 'torch-gpu'?)",
        id="mistyped-recipe",
    ),
    pytest.param(
        ["--site", "generic-slurm", "-r", "torch-gpu"],
        "recipe torch-gpu needs GPUs but site generic-slurm has none (gpu.vendor: none)",
        id="gpu-recipe-on-cpu-site",
    ),
    pytest.param(
        [*FRONTIER, "-r", "torch-gpu", "--launcher", "mpirun"],
        "--launcher mpirun: site frontier starts ranks with srun (scheduler.launcher, for its "
        "cray-mpich@9.1.0); give srun or torchrun, or leave --launcher out",
        id="launcher-not-the-sites",
    ),
    pytest.param(
        [*FRONTIER, "-r", "torch-gpu", "--launcher", "jsrun"],
        "--launcher jsrun: scheduler slurm does not take it (it takes srun, mpirun, mpiexec)",
        id="launcher-not-the-schedulers",
    ),
    pytest.param(
        [*PERLMUTTER, "-r", "torch-gpu", "-p", "debug"],
        "-p/--partition debug: 'debug' is a QOS on site 'perlmutter', not a partition: give "
        "-q/--qos debug (scheduler.queue_limits)",
        id="qos-as-partition",
    ),
    pytest.param(
        [*PERLMUTTER, "-r", "torch-gpu", "-q", "regulr"],
        "-q/--qos regulr: site 'perlmutter' has no QOS 'regulr' (did you mean 'regular'?); "
        "its QOSs: regular, debug",
        id="unknown-qos",
    ),
    pytest.param(
        [*FRONTIER, "-r", "torch-gpu", "-p", "bach"],
        "-p/--partition bach: site 'frontier' has no partition 'bach' (did you mean 'batch'?); "
        "its partitions: batch, extended",
        id="unknown-partition",
    ),
    pytest.param(
        [*PERLMUTTER, "-r", "torch-gpu", "-C", "cpu"],
        "-C 'cpu': site 'perlmutter' already asks for -C 'gpu' (scheduler.extra_directives), "
        "so slurm would get 'gpu&cpu'",
        id="constraint-merged",
    ),
    pytest.param(
        [*FRONTIER, "-r", "torch-gpu", "--after", "notajob"],
        "--after 'notajob': not a slurm job id: a job id (12345) or an array task (12345_7)",
        id="after-slurm",
    ),
    pytest.param(
        ["--site", "summit", "-A", "abc123", "-r", "horovod-gpu", "--after", "12345_1"],
        "--after '12345_1': not a lsf job id: a job id (12345) or an array element (12345[7])",
        id="after-lsf",
    ),
    pytest.param(
        ["--site", "aurora", "-A", "proj", "-r", "torch-gpu", "--after", "12;rm"],
        "--after '12;rm': not a pbs job id",
        id="after-pbs",
    ),
    pytest.param(
        [*FRONTIER, "-r", "torch-gpu", "--array", "1-10"],
        "--array '1-10': task ids start at 0 (HPCENV_TASK_ID): give 0-9",
        id="array-from-1",
    ),
    pytest.param(
        [*FRONTIER, "-r", "torch-gpu", "--array", "0-9:2"],
        "--array '0-9:2': give a task count (10) or a range from 0 (0-9)",
        id="array-step",
    ),
]


@pytest.mark.parametrize(("args", "message"), CASES)
def test_a_dry_run_refuses_in_one_line(args: list[str], message: str) -> None:
    assert message in one_line(submit(*args))


@pytest.mark.parametrize(
    ("args", "message"), [c for c in CASES if c.id in ("mistyped-recipe", "after-slurm")]
)
def test_a_real_submit_refuses_the_same_before_anything_is_queued(
    args: list[str], message: str
) -> None:
    assert message in one_line(submit(*args, dry=False))


@pytest.mark.parametrize(
    ("args", "directive"),
    [
        (["--array", "0-9"], "#SBATCH --array=0-9\n"),
        (["--array", "10"], "#SBATCH --array=0-9\n"),
        (["--array", "0-9%2"], "#SBATCH --array=0-9%2\n"),
        (["--after", "12345_7"], None),
        (["-C", "gpu&hbm80g"], '#SBATCH -C "gpu&hbm80g"\n'),
        (["-q", "debug"], "#SBATCH --qos=debug\n"),
    ],
)
def test_what_the_site_takes_still_renders(args: list[str], directive: str | None) -> None:
    proc = submit(*PERLMUTTER, "-r", "torch-gpu", *args)
    assert proc.returncode == 0, proc.stderr
    if directive:
        assert directive in proc.stdout


def test_a_cpu_recipe_runs_on_a_gpu_site_when_the_job_asks_for_no_gpus() -> None:
    proc = submit(*FRONTIER, "-r", "horovod-cpu", "--gpus-per-node", "0")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --gpus" not in proc.stdout


def test_a_dry_run_says_what_it_did_not_check_in_one_line() -> None:
    proc = submit(*FRONTIER, "-r", "torch-gpu", "--stage-in", "/lustre/data")
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "not checked" in line]
    assert notes == [
        "note: dry run: not checked here (a real submit checks them where it submits): that "
        "the image $MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/torch-gpu-frontier.sif exists; "
        "the stage-in data /lustre/data and its manifest"
    ]


@pytest.mark.parametrize(
    ("text", "count", "parallel"),
    [("10", 10, None), ("0-9", 10, None), ("0-0", 1, None), ("0-99%5", 100, 5), ("3%1", 3, 1)],
)
def test_array_spec_parse(text: str, count: int, parallel: int | None) -> None:
    spec = ArraySpec.parse(text)
    assert (spec.count, spec.parallel) == (count, parallel)


@pytest.mark.parametrize("text", ["-9", "0", "0-9:2", "1,3", "5-2", "", "0-100000", "x"])
def test_array_spec_refuses(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        ArraySpec.parse(text)
    assert str(err.value).startswith(f"--array {text!r}: ")


def test_a_cpu_recipe_on_a_gpu_site_asks_for_no_gpus(tmp_path: Path) -> None:
    """A recipe without a GPU stack would hold every GPU the placement binds and use none: the
    job asks for none, and says so in one note (``--gpus-per-node N`` holds them anyway)."""
    (tmp_path / "x.py").write_text("print(1)\n")
    argv = [str(HPCENV), "submit", *FRONTIER, "-r", "daal4py", "-N", "1", "--dry-run"]
    proc = subprocess.run(
        [*argv, "--", "python3", "x.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "note: recipe daal4py has no GPU stack (accelerator: none): the job asks frontier " in (
        proc.stderr
    )
    launch = [ln for ln in proc.stdout.splitlines() if ln.lstrip().startswith("srun ")]
    assert launch and all("--gpus-per-task" not in ln and "--gpu-bind" not in ln for ln in launch)
