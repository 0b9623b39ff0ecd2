"""What a rank sees on the GPU sites, as a model: the plan's device ids are Slurm's closest
binding (Frontier's map), each site's srun asks for GPUs as its PyTorch example does, and the
rank environment's LOCAL_RANK names a device the rank sees (rank-env.sh, run for real in a shell
with the variables srun gives each task). Reintroducing the old binding (one device per rank and
LOCAL_RANK=$SLURM_LOCALID) fails the rule the twins apply (tests/test_twins_2node.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpcenv.checks import rank_probe
from hpcenv.jobs.launchers import launch_argv
from hpcenv.jobs.placement import GPU_BIND_VAR, place
from hpcenv.jobs.render import step_script
from hpcenv.site import load_site


def test_frontier_plan_says_what_closest_binding_does() -> None:
    """OLCF frontier_user_guide.rst: rank i on cores 8i+1..8i+7 gets GCD 4,5,2,3,6,7,0,1."""
    p = place(load_site("frontier"), 1)
    assert [ids for ids in p.gpu_ids] == [(g,) for g in "45236701"]
    assert p.compute_cores[0] == (1, 2, 3, 4, 5, 6, 7)
    assert p.env[GPU_BIND_VAR] == "closest"
    assert "--gpu-bind=closest" in launch_argv(load_site("frontier"), p)


@pytest.mark.parametrize("name", ["perlmutter", "alps-clariden"])
def test_every_rank_sees_the_node_gpus_where_the_site_example_does(name: str) -> None:
    """NERSC's srun example (--gpus-per-node=4) and CSCS's PyTorch job (no per-task binding):
    every rank sees the node's GPUs and LOCAL_RANK picks one."""
    site = load_site(name)
    p = place(site, 2)
    argv = launch_argv(site, p)
    assert "--gpus-per-node=4" in argv
    assert not [a for a in argv if a.startswith(("--gpus-per-task", "--gpu-bind"))]
    assert GPU_BIND_VAR not in p.env
    torchrun = launch_argv(site, p, launcher="torchrun")
    assert {"--ntasks=2", "--ntasks-per-node=1", "--gpus-per-node=4"} <= set(torchrun)


def _rank_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    step = tmp_path / "rank-env.sh"
    step.write_text(step_script("rank_env") + "\n")
    out = subprocess.run(
        ["sh", str(step), "env"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _srun_task(local: int, rank: int, visible: str, bind: str | None) -> dict[str, str]:
    env = {
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local),
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": "0",
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_STEP_TASKS_PER_NODE": "8",
        "ROCR_VISIBLE_DEVICES": visible,
    }
    return {**env, GPU_BIND_VAR: bind} if bind else env


def _records(envs: list[dict[str, str]], cores: list[tuple[int, ...]]) -> list[dict[str, Any]]:
    return [
        {
            "host": "n",
            "env": e,
            "selected": rank_probe.selected(e),
            "cores": list(c),
            "master_resolves": True,
        }
        for e, c in zip(envs, cores, strict=True)
    ]


def test_local_rank_names_a_visible_device_on_frontier(tmp_path: Path) -> None:
    """Each of Frontier's 8 ranks sees one GCD (srun --gpus-per-task=1 --gpu-bind=closest);
    rank-env.sh gives LOCAL_RANK 0, as OLCF's example (rank % device_count) does, and the rule
    holds; the old LOCAL_RANK=$SLURM_LOCALID fails it on every rank but local rank 0."""
    site = load_site("frontier")
    p = place(site, 1)
    tasks = [_srun_task(i, i, p.gpu_ids[i][0], p.env[GPU_BIND_VAR]) for i in range(8)]
    now = [{**t, **_rank_env(tmp_path, t)} for t in tasks]
    assert {e["LOCAL_RANK"] for e in now} == {"0"}
    closest, cores = site.node.gpu_closest, site.node.cores
    records = _records(now, list(p.compute_cores))
    assert rank_probe.problems(records, gpu_closest=closest, cores=cores, world=8) == []
    old = [{**t, "RANK": t["SLURM_PROCID"], "LOCAL_RANK": t["SLURM_LOCALID"]} for t in tasks]
    records = _records(old, list(p.compute_cores))
    found = rank_probe.problems(records, gpu_closest=closest, cores=cores, world=8)
    assert len(found) == 7 and all("invalid device ordinal" in f for f in found), found


def test_local_rank_is_the_local_rank_where_every_device_is_visible(tmp_path: Path) -> None:
    """No HPCENV_GPU_BIND (every rank sees the node's GPUs, or a CPU job): LOCAL_RANK is
    SLURM_LOCALID whatever visible-device variable the environment carries."""
    got = _rank_env(tmp_path, _srun_task(3, 3, "0,1,2,3", None))
    assert got["LOCAL_RANK"] == "3"
    assert _rank_env(tmp_path, _srun_task(1, 1, "0", None))["LOCAL_RANK"] == "1"


def test_twins_keep_the_site_rules_and_drop_what_cannot_exist_here() -> None:
    """The twins (site-configs/*-twin.yaml) extend the real sites: the GPU rule is the
    site's; ``null`` in an extending file drops the base's value (Alps' EDF annotations on a
    podman stand-in), the field's default applies."""
    for name, visible in (("frontier", "rank"), ("perlmutter", "node"), ("alps-clariden", "node")):
        twin = load_site(f"{name}-twin")
        assert twin.gpu.visible == load_site(name).gpu.visible == visible
        assert twin.rendezvous == load_site(name).rendezvous
    assert load_site("alps-clariden-twin").runtime.annotations == {}
    assert load_site("frontier-twin").node.gpu_closest == [1, 0]  # gres.conf's, like OLCF's map


def test_probe_records_survive_lines_cut_and_interleaved_by_slurm() -> None:
    """Slurm forwards a task's output in 1,024-byte messages: a record is written in lines under
    that size, and ranks' lines interleaved line by line still parse back to every record."""
    big = {"env": {f"V{i}": "x" * 40 for i in range(60)}, "rank": 1}
    small = {"env": {}, "rank": 2}
    a = rank_probe.lines(big, "n1:7:aa")
    b = rank_probe.lines(small, "n1:7:bb")
    assert len(a) > 2 and all(len(line.encode()) <= rank_probe.CHUNK for line in a)
    mixed = [a[0], b[0], *a[1:]]
    text = "srun: noise\n" + "".join(mixed)
    assert sorted(r["rank"] for r in rank_probe.parse(text)) == [1, 2]
    with pytest.raises(ValueError, match="parts"):
        rank_probe.parse("".join(a[:-1]))


def test_horovods_pinning_line_is_checked_on_horovods_local_rank(tmp_path: Path) -> None:
    """A Horovod probe (``rank_probe.py --horovod``) applies ``set_device(hvd.local_rank())``:
    where every rank sees the node's devices (Perlmutter's and Alps' Horovod jobs) it holds;
    under one device per rank (``--gpus-per-task=1``) Horovod's local rank 1 names no device,
    whatever LOCAL_RANK rank-env.sh computed, and the rule says so; a Horovod rank or size
    that is not the job's is named."""

    def record(rank: int, local: int, visible: str, cores: list[int], **hvd: int) -> dict:
        env = {"RANK": str(rank), "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": visible}
        ranks = {"rank": rank, "local_rank": local, "size": 2, "local_size": 2} | hvd
        chosen = rank_probe.selected({**env, "LOCAL_RANK": str(ranks["local_rank"])})
        return {
            "host": "n",
            "env": env,
            "horovod": ranks,
            "selected": chosen,
            "cores": cores,
            "master_resolves": True,
        }

    every = [record(0, 0, "0,1", [0]), record(1, 1, "0,1", [1])]
    assert rank_probe.problems(every, gpu_closest=[0, 1], cores=2, world=2) == []
    one_each = [record(0, 0, "0", [0]), record(1, 1, "1", [1])]
    found = rank_probe.problems(one_each, gpu_closest=[0, 1], cores=2, world=2)
    assert found == [
        "rank 1 on n: set_device(hvd.local_rank()=1): invalid device ordinal: 1 of 1 visible (['1'])"
    ]
    wrong = [record(0, 0, "0,1", [0], size=1), record(1, 1, "0,1", [1])]
    found = rank_probe.problems(wrong, gpu_closest=[0, 1], cores=2, world=2)
    assert found == ["rank 0 on n: Horovod says rank 0 of 1"]


def test_closeness_is_checked_only_where_the_launch_binds_gpus_to_cores() -> None:
    """Perlmutter's documented launch binds no GPU to cores (``gpu.visible: node``): local rank
    0 on cores 0-15 uses GPU 0, which NERSC's map puts on NUMA 3. The probe's rule names that
    when the site binds (``bound=True``) and leaves it when the site's launch does not."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    record = {
        "host": "n",
        "env": env,
        "selected": rank_probe.selected(env),
        "cores": list(range(16)),
        "master_resolves": True,
    }
    closest = load_site("perlmutter").node.gpu_closest
    assert closest == [3, 2, 1, 0]
    found = rank_probe.problems([record], gpu_closest=closest, cores=64, world=1)
    assert found == [
        "rank 0 on n: device 0, but cores " + str(list(range(16))) + " are closest to {3}"
    ]
    assert rank_probe.problems([record], gpu_closest=closest, cores=64, world=1, bound=False) == []
