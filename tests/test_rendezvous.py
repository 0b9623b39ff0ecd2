"""torch.distributed's env:// rendezvous on every site (hpcenv.jobs.rendezvous): the address and
port each real site documents, the per-rank names rank-env.sh derives from each launcher's own
variables (run for real under sh), and ``--launcher torchrun`` (one per node, refused for a
recipe without torch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.jobs.render import plan_job, step_script
from hpcenv.jobs.spec import JobSpec
from hpcenv.site import load_site

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def _plan(site: str, **extra: object):  # type: ignore[no-untyped-def]
    job = JobSpec(
        name="ddp",
        command=["python3", "train.py"],
        nodes=2,
        recipe="torch-gpu",
        account="proj123",
        **extra,  # type: ignore[arg-type]
    )
    return plan_job(load_site(site), job, "img.sif")


# What each site documents (read 2026-11-24; docs/sites/NAME.md "Rendezvous").
DOCUMENTED = {
    # OLCF pytorch_frontier.rst "Master Address and Sockets": $(hostname -i), port 3442.
    "frontier": ("$(hostname -i | cut -d ' ' -f 1)", "3442"),
    # NERSC Launchers: $(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1), 29500.
    "perlmutter": ('$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', "29500"),
    # ALCF pytorch.md / containers test_container.sh: <host>.hsn.cm.aurora.alcf.anl.gov, 2345.
    "aurora": (
        '$(head -n 1 "$PBS_NODEFILE" | cut -d . -f 1).hsn.cm.aurora.alcf.anl.gov',
        "2345",
    ),
    # OLCF Summit guide: `jsrun -n1 hostname` names a compute node; no documented port.
    "summit": (
        "$(jsrun -n1 -r1 -a1 -c1 hostname)",
        "$((20000 + 10#0${HPCENV_JOB_ID%%[!0-9]*} % 12000))",  # launch node: no probe
    ),
}


@pytest.mark.parametrize("site", sorted(DOCUMENTED))
def test_torch_ddp_job_exports_the_documented_rendezvous(site: str) -> None:
    plan = _plan(site)
    env = {v.name: v for v in plan.environment}
    addr, port = DOCUMENTED[site]
    assert env["MASTER_ADDR"].value == addr and env["MASTER_ADDR"].source == "rendezvous"
    assert env["MASTER_PORT"].value == port
    launch = plan.launch
    assert launch is not None and launch.rank_step[0] == "sh"
    assert "rank-env.sh" in {f.name for f in plan.files}


def test_a_job_value_overrides_the_site_port() -> None:
    plan = _plan("frontier", env={"MASTER_PORT": "4000"})
    assert plan.env()["MASTER_PORT"] == "4000"


def _rank_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    script = tmp_path / "rank-env.sh"
    script.write_text(step_script("rank_env") + "\n")
    base = {"PATH": os.environ["PATH"]}
    proc = subprocess.run(
        ["sh", str(script), "env"], env={**base, **env}, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    out = dict(ln.split("=", 1) for ln in proc.stdout.splitlines() if "=" in ln)
    return {k: out[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE") if k in out}


@pytest.mark.parametrize(
    ("env", "want"),
    [
        (  # srun, uneven: node 3 of "2(x3),1" runs one task
            {
                "SLURM_PROCID": "6",
                "SLURM_LOCALID": "0",
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_NUM_TASKS": "7",
                "SLURM_NODEID": "3",
                "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
            },
            ("6", "0", "7", "1"),
        ),
        (  # mpirun inside an allocation: Open MPI's names win over the batch shell's SLURM_*
            {
                "SLURM_PROCID": "0",
                "SLURM_STEP_ID": "batch",
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            ("3", "1", "4", "2"),
        ),
        (  # PALS mpiexec (Aurora)
            {
                "PALS_RANKID": "13",
                "PALS_LOCAL_RANKID": "1",
                "PMI_SIZE": "24",
                "PALS_LOCAL_SIZE": "12",
            },
            ("13", "1", "24", "12"),
        ),
        (  # jsrun's own namespace variables
            {
                "JSM_NAMESPACE_RANK": "7",
                "JSM_NAMESPACE_LOCAL_RANK": "1",
                "JSM_NAMESPACE_SIZE": "12",
                "JSM_NAMESPACE_LOCAL_SIZE": "6",
            },
            ("7", "1", "12", "6"),
        ),
        (  # MPICH Hydra
            {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
            ("2", "0", "4", "2"),
        ),
    ],
)
def test_rank_env_maps_each_launchers_variables(
    tmp_path: Path, env: dict[str, str], want: tuple[str, ...]
) -> None:
    got = _rank_env(tmp_path, env)
    assert (got["RANK"], got["LOCAL_RANK"], got["WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]) == want


def test_rank_env_without_a_launcher_says_so(tmp_path: Path) -> None:
    script = tmp_path / "rank-env.sh"
    script.write_text(step_script("rank_env") + "\n")
    proc = subprocess.run(
        ["sh", str(script), "true"],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 3 and "no launcher variables" in proc.stderr


def test_torchrun_is_one_per_node_under_the_site_launcher() -> None:
    plan = _plan("perlmutter", launcher="torchrun")
    launch = plan.launch
    assert launch is not None and launch.rank_step == ()  # torchrun sets RANK itself
    head = list(launch.head)
    assert head[:6] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",  # not the job's SLURM_NTASKS, which the step inherits
        "--ntasks-per-node=1",
        "--cpus-per-task=128",
        "--gpus-per-node=4",  # the step's task sees all four (the job asked one per task)
    ]
    assert launch.runner[:5] == (
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT",
    )
    line = launch.line()
    assert line.index("podman-hpc run") < line.index("torchrun") < line.index("python3 train.py")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HPCENV, *args], capture_output=True, text=True, timeout=120)


def test_torchrun_for_a_recipe_without_torch_is_refused() -> None:
    proc = _cli(
        "submit",
        "--site",
        "local",
        "--recipe",
        "daal4py",
        "--launcher",
        "torchrun",
        "--dry-run",
        "--",
        "python3",
        "train.py",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert lines == [
        "error: --launcher torchrun needs torch in the image; recipe 'daal4py' has none "
        "(use a torch recipe, or the site's launcher)"
    ]


def test_torchrun_with_a_user_recipe_file(tmp_path: Path) -> None:
    """A recipe file carries its own name: torchrun is checked on the file, not looked up by
    that name among the built-ins (which failed with 'unknown recipe')."""
    with_torch = tmp_path / "mine.yaml"
    with_torch.write_text("name: mine\nextends: horovod-cpu\nuser:\n  pip: [six]\n")
    without = tmp_path / "notorch.yaml"
    without.write_text("name: notorch\nextends: daal4py\nuser:\n  pip: [six]\n")
    args = ["--launcher", "torchrun", "--image", "localhost/x:1", "--dry-run"]
    ok = _cli(
        "submit", "--site", "local", "--recipe", str(with_torch), *args, "--", "python3", "t.py"
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "torchrun" in ok.stdout
    proc = _cli(
        "submit", "--site", "local", "--recipe", str(without), *args, "--", "python3", "t.py"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert lines == [
        "error: --launcher torchrun needs torch in the image; recipe 'notorch' has none "
        "(use a torch recipe, or the site's launcher)"
    ]


def test_unknown_launcher_is_refused() -> None:
    proc = _cli(
        "submit",
        "--site",
        "local",
        "--recipe",
        "horovod-cpu",
        "--launcher",
        "torchrunn",
        "--dry-run",
        "--",
        "python3",
        "train.py",
    )
    assert (
        proc.returncode == 2
        and "--launcher torchrunn: no such launcher (did you mean 'torchrun'?)" in proc.stderr
    )
