"""Aurora: one tile per rank under ZE_FLAT_DEVICE_HIERARCHY=FLAT, as ALCF documents it (a model
check: PBS Pro and PALS cannot run here).

ALCF (argonne-lcf/user-guides @ 7d04a3f, docs/aurora/running-jobs-aurora.md, read 2026-11-28):
``mpiexec --gpu-bind=list`` has "several limitations ... (b) With a different device-discovery
hierarchy, ZE_FLAT_DEVICE_HIERARCHY=FLAT" (its FLAT example fails: "Failed to parse implicit GPU
selection"); the ``frameworks`` module sets FLAT ("treating each tile as a device"), ALCF
recommends not using ``gpu_tile_compact.sh`` (which needs COMPOSITE) with it, and binds a rank
to a device with ``ZE_AFFINITY_MASK=$gpu_id`` (``num_gpus=12``). The site's job exports FLAT
(site ``tuning``, as ALCF's container recipe does), so the launch carries no ``--gpu-bind`` and
the job's ``rank-env.sh`` sets each rank's ZE_AFFINITY_MASK; LOCAL_RANK is then 0, the one device
the rank sees.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hpcenv.jobs.placement import GPU_BIND_VAR, GPU_MASKS_VAR, place
from hpcenv.jobs.render import plan_job
from hpcenv.jobs.spec import JobSpec
from hpcenv.site import load_site


def _plan(**extra: object):  # type: ignore[no-untyped-def]
    job = JobSpec(
        name="ddp",
        command=["python3", "train.py"],
        nodes=2,
        recipe="torch-gpu",
        account="proj123",
        **extra,  # type: ignore[arg-type]
    )
    return plan_job(load_site("aurora"), job, "img.sif")


def _rank(tmp_path: Path, plan, local: int, rank: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    step = next(f for f in plan.files if f.name == "rank-env.sh")
    path = tmp_path / step.name
    path.write_text(step.text + "\n")
    env = {n: v for n, v in plan.env().items() if n in (GPU_BIND_VAR, GPU_MASKS_VAR)}
    env |= {
        "PALS_RANKID": str(rank),
        "PALS_LOCAL_RANKID": str(local),
        "PMI_SIZE": "24",
        "PMI_LOCAL_SIZE": "12",
    }
    out = subprocess.run(
        ["sh", str(path), "env"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_flat_hierarchy_binds_by_mask_not_by_gpu_bind_list(tmp_path: Path) -> None:
    plan = _plan()
    env = plan.env()
    assert env["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT"
    launch = plan.launch
    assert launch is not None
    assert not [a for a in launch.head if str(a).startswith("--gpu-bind")], launch.head
    assert env[GPU_BIND_VAR] == "mask"
    assert env[GPU_MASKS_VAR] == " ".join(str(t) for t in range(12))
    for local in range(12):
        got = _rank(tmp_path, plan, local, 12 + local)
        assert got["ZE_AFFINITY_MASK"] == str(local)  # FLAT device = tile 2g+t
        assert got["LOCAL_RANK"] == "0"  # torch.xpu.set_device(LOCAL_RANK): its one device
        assert (got["RANK"], got["WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]) == (
            str(12 + local),
            "24",
            "12",
        )


def test_plan_names_flat_devices_and_two_tiles_per_rank_get_two() -> None:
    site = load_site("aurora")
    p = place(site, 1)
    assert p.gpu_ids == tuple((str(t),) for t in range(12))
    six = place(site, 1, ranks_per_node=6, ccl_workers=0)
    assert six.env[GPU_MASKS_VAR] == "0,1 2,3 4,5 6,7 8,9 10,11"


def test_without_flat_the_launcher_list_stays() -> None:
    """A site whose jobs keep COMPOSITE (Aurora PE's default) binds by mpiexec's list of
    GPU.tile, which ALCF documents for that hierarchy."""
    site = load_site("aurora")
    composite = site.model_copy(
        update={"tuning": {k: v for k, v in site.tuning.items() if k != "ZE_FLAT_DEVICE_HIERARCHY"}}
    )
    p = place(composite, 1)
    assert p.gpu_bind == "list" and p.gpu_ids[1] == ("0.1",)
    assert GPU_MASKS_VAR not in p.env


def test_a_rank_beyond_the_masks_stops_with_one_line(tmp_path: Path) -> None:
    plan = _plan()
    step = next(f for f in plan.files if f.name == "rank-env.sh")
    path = tmp_path / step.name
    path.write_text(step.text + "\n")
    env = {
        "PATH": os.environ["PATH"],
        GPU_MASKS_VAR: "0 1",
        GPU_BIND_VAR: "mask",
        "PALS_RANKID": "5",
        "PALS_LOCAL_RANKID": "5",
        "PMI_SIZE": "6",
        "PMI_LOCAL_SIZE": "6",
    }
    proc = subprocess.run(["sh", str(path), "true"], env=env, capture_output=True, text=True)
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "local rank 5 has no device" in proc.stderr
