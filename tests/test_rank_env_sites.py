"""Every site x every launcher it uses: each rank gets RANK, LOCAL_RANK, WORLD_SIZE and
LOCAL_WORLD_SIZE (torch.distributed's env:// names).

The site's own launcher runs the job's ``rank-env.sh`` as the plan writes it, for real under
``sh``, with the variables that launcher (and, for srun, the site's ``--mpi`` plugin) gives a
task; ``--launcher torchrun`` sets the four itself for each worker it starts (PyTorch
"torchrun (Elastic Launch)", Environment Variables: LOCAL_RANK, RANK, LOCAL_WORLD_SIZE,
WORLD_SIZE, read 2026-11-28), so its plan has no rank step and starts ``--nproc-per-node`` workers
on each of ``--nnodes`` nodes.

What each launcher gives a task (read 2026-11-28):

- srun: SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_ID, SLURM_NODEID, SLURM_STEP_NUM_TASKS,
  SLURM_STEP_TASKS_PER_NODE (Slurm srun(1) "OUTPUT ENVIRONMENT VARIABLES").
- srun --mpi=cray_shasta (Frontier, Perlmutter): also PALS_RANKID, PALS_LOCAL_RANKID,
  PALS_NODEID, PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK, PMI_LOCAL_SIZE, and no PALS_LOCAL_SIZE
  (SchedMD/slurm src/plugins/mpi/cray_shasta/mpi_cray_shasta.c, mpi_p_slurmstepd_task). Before
  2026-11-28 rank-env.sh read PALS_LOCAL_SIZE alone there, and no rank had LOCAL_WORLD_SIZE.
- srun --mpi=pmi2: also PMI_RANK, PMI_SIZE, PMI_FD; --mpi=pmix: PMIX_RANK.
- mpiexec (PALS, Aurora): PALS_RANKID, PALS_LOCAL_RANKID, PALS_NODEID, PMI_RANK, PMI_SIZE,
  PMI_LOCAL_RANK, PMI_LOCAL_SIZE, PMIX_RANK, no SLURM_* (argonne-lcf/user-guides @ 7d04a3f
  docs/aurora/running-jobs-aurora.md PALS_LOCAL_RANKID, docs/aurora/data-science/frameworks/
  oneCCL.md PMI_SIZE, docs/aurora/data-science/profiling_dl.md PMIX_RANK,
  docs/polaris/data-science/frameworks/pytorch.md PMI_LOCAL_RANK and PMI_LOCAL_SIZE). Whether
  PALS also sets PALS_LOCAL_SIZE is left out: the step must not need it.
- jsrun (Summit): JSM_NAMESPACE_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE and Spectrum MPI's
  OMPI_COMM_WORLD_* (the batch shell's LSB_* besides).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpcenv.errors import HpcenvError
from hpcenv.jobs.placement import GPU_BIND_VAR, GPU_MASKS_VAR
from hpcenv.jobs.render import plan_job
from hpcenv.jobs.spec import JobSpec
from hpcenv.recipe import load_recipe
from hpcenv.site import Site, load_site
from hpcenv.site.load import site_names

FOUR = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
NODES = 2


def _srun(site: Site, rank: int, local: int, node: int, world: int, per_node: int) -> dict:
    env = {
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local),
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": str(node),
        "SLURM_NTASKS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{NODES})",
    }
    plugin = site.scheduler.mpi_plugin
    if plugin == "cray_shasta":
        env |= {
            "PALS_APID": "7.0",
            "PALS_RANKID": str(rank),
            "PALS_LOCAL_RANKID": str(local),
            "PALS_NODEID": str(node),
            "PMI_RANK": str(rank),
            "PMI_SIZE": str(world),
            "PMI_LOCAL_RANK": str(local),
            "PMI_LOCAL_SIZE": str(per_node),
            "PMI_UNIVERSE_SIZE": str(world),
        }
    elif plugin == "pmi2":
        env |= {"PMI_RANK": str(rank), "PMI_SIZE": str(world), "PMI_FD": "5"}
    elif plugin == "pmix":
        env |= {"PMIX_RANK": str(rank)}
    return env


def _pals(site: Site, rank: int, local: int, node: int, world: int, per_node: int) -> dict:
    return {
        "PALS_RANKID": str(rank),
        "PALS_LOCAL_RANKID": str(local),
        "PALS_NODEID": str(node),
        "PMI_RANK": str(rank),
        "PMI_SIZE": str(world),
        "PMI_LOCAL_RANK": str(local),
        "PMI_LOCAL_SIZE": str(per_node),
        "PMIX_RANK": str(rank),
        "PBS_JOBID": "7.aurora-pbs",
    }


def _jsrun(site: Site, rank: int, local: int, node: int, world: int, per_node: int) -> dict:
    return {
        "JSM_NAMESPACE_RANK": str(rank),
        "JSM_NAMESPACE_LOCAL_RANK": str(local),
        "JSM_NAMESPACE_SIZE": str(world),
        "JSM_NAMESPACE_LOCAL_SIZE": str(per_node),
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
        "OMPI_COMM_WORLD_SIZE": str(world),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node),
        "LSB_JOBID": "7",
    }


TASK_ENV = {"srun": _srun, "mpiexec": _pals, "jsrun": _jsrun}


def _recipe(site: Site) -> str:
    """The site's recipe with torch (torch-gpu first), else its first."""
    torch = [r for r in site.recipes if load_recipe(r).wants("torch")]
    return "torch-gpu" if "torch-gpu" in torch else (torch or site.recipes)[0]


def _plan(site: Site, launcher: str | None):  # type: ignore[no-untyped-def]
    job = JobSpec(
        name="ddp",
        command=["python3", "train.py"],
        nodes=NODES,
        recipe=_recipe(site),
        account="proj123",
        launcher=launcher,
    )
    return plan_job(site, job, "img.sif")


def _visible(site: Site, bind: str | None) -> dict[str, str]:
    """One device per rank where the launcher binds it (the variable the site's GPUs use)."""
    if not bind or not site.node.gpus:
        return {}
    name = {"amd": "ROCR_VISIBLE_DEVICES", "intel": "ZE_AFFINITY_MASK"}.get(
        site.gpu.vendor if site.gpu else "", "CUDA_VISIBLE_DEVICES"
    )
    return {name: "0"}


SITES = site_names()
# torchrun needs torch in the image: the sites that list a torch recipe.
TORCH_SITES = [n for n in SITES if load_recipe(_recipe(load_site(n))).wants("torch")]


@pytest.mark.parametrize("name", SITES)
def test_the_site_launcher_gives_every_rank_the_four_names(tmp_path: Path, name: str) -> None:
    site = load_site(name)
    launcher = site.scheduler.launcher
    assert launcher in TASK_ENV, f"{name}: no model of what {launcher} gives a task"
    plan = _plan(site, None)
    launch = plan.launch
    assert launch is not None and launch.rank_step[0] == "sh", name
    step = next(f for f in plan.files if f.name == "rank-env.sh")
    (tmp_path / step.name).write_text(step.text + "\n")
    for source in step.sources:
        (tmp_path / source).write_text(next(f for f in plan.files if f.name == source).text)
    bind = plan.env().get(GPU_BIND_VAR)
    per_node = int(launch.what.split(", ")[1].split()[0])
    world = per_node * NODES
    for rank in (0, per_node - 1, world - 1):
        node, local = divmod(rank, per_node)
        env = TASK_ENV[launcher](site, rank, local, node, world, per_node)
        env |= {n: v for n, v in plan.env().items() if n in (GPU_BIND_VAR, GPU_MASKS_VAR)}
        if bind != "mask":  # under mask rank-env.sh sets ZE_AFFINITY_MASK itself
            env |= _visible(site, bind)
        proc = subprocess.run(
            ["sh", str(tmp_path / step.name), "env"],
            env={"PATH": os.environ["PATH"], **env},
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and proc.stderr == "", (name, rank, proc.stderr)
        got = dict(ln.split("=", 1) for ln in proc.stdout.splitlines() if "=" in ln)
        assert [n for n in FOUR if n not in got] == [], (name, launcher, rank)
        assert (got["RANK"], got["WORLD_SIZE"]) == (str(rank), str(world)), name
        assert got["LOCAL_WORLD_SIZE"] == str(per_node), (name, launcher)
        want_local = "0" if bind else str(local)  # one device per rank: index 0
        assert got["LOCAL_RANK"] == want_local, (name, launcher, rank)


@pytest.mark.parametrize("name", TORCH_SITES)
def test_torchrun_sets_the_four_names_for_its_workers(name: str) -> None:
    site = load_site(name)
    try:
        plan = _plan(site, "torchrun")
    except HpcenvError as err:  # a site whose launcher cannot host torchrun says so
        pytest.fail(f"{name}: --launcher torchrun refused: {err}")
    launch = plan.launch
    assert launch is not None and launch.rank_step == (), name
    runner = list(launch.runner)
    assert runner[0] == "torchrun" and f"--nnodes={NODES}" in runner, (name, runner)
    per_node = [a for a in runner if a.startswith("--nproc-per-node=")]
    assert len(per_node) == 1 and int(per_node[0].split("=")[1]) >= 1, (name, runner)
