"""Issue 22's site audit, one test per real site x recipe: the rendered ``submit`` job carries
what the site documents for the recipe its users get (docs/sites/NAME.md, read 2026-11-24).

For every real site and every recipe in its ``recipes:``, ``hpcenv submit --dry-run --json``
(the installed command, as a user runs it) must show:

- which GPUs each rank sees inside the runtime: the launcher's per-rank binding, and a runtime
  that passes the launcher's per-rank visibility variable into the container;
- the collective library's environment the site documents, complete (:data:`COLLECTIVE`);
- the framework caches the site documents (:data:`CACHES`), made where they must exist;
- the env:// rendezvous the site documents (:data:`RENDEZVOUS`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcenv.recipe import load_recipe
from hpcenv.site import load_site

HPCENV = Path(sys.executable).with_name("hpcenv")
REAL_SITES = ("frontier", "perlmutter", "aurora", "summit", "alps-clariden", "generic-slurm")

# The collective library's environment as each site documents it (complete, docs/sites/NAME.md).
COLLECTIVE: dict[str, dict[str, str]] = {
    # OLCF pytorch_frontier.rst "RCCL Environment Variables" (NCCL_NET_PLUGIN: the module's;
    # hsn0 alone per OLCF's note on hangs) and "Alternative Rendezvous Protocol".
    "frontier": {
        "NCCL_SOCKET_IFNAME": "hsn0",
        "NCCL_CROSS_NIC": "1",
        "NCCL_NET_GDR_LEVEL": "PHB",
        "HSA_FORCE_FINE_GRAIN_PCIE": "1",
        "FI_MR_CACHE_MONITOR": "kdreg2",
        "FI_CXI_DISABLE_HOST_REGISTER": "1",
        "FI_CXI_DEFAULT_CQ_SIZE": "131072",
        "FI_CXI_RDZV_PROTO": "alt_read",
        "FI_CXI_RDZV_EAGER_SIZE": "0",
        "FI_CXI_RDZV_THRESHOLD": "0",
        "FI_CXI_RDZV_GET_MIN": "0",
        "FI_CXI_DEFAULT_TX_SIZE": "2048",
        "FI_CXI_RX_MATCH_MODE": "hybrid",
    },
    # podman-hpc's nccl module sets NERSC's list inside the container (checked as the flag).
    "perlmutter": {},
    # ALCF oneCCL.md "Minimal set"; test_container.sh's device hierarchy inside Apptainer.
    "aurora": {
        "CCL_PROCESS_LAUNCHER": "pmix",
        "CCL_ATL_TRANSPORT": "mpi",
        "FI_MR_CACHE_MONITOR": "userfaultfd",
        "CCL_KVS_MODE": "mpi",
        "ZE_FLAT_DEVICE_HIERARCHY": "FLAT",
        "ONEAPI_DEVICE_SELECTOR": "level_zero:gpu",
    },
    "summit": {"OMPI_MCA_pml": "ob1"},
    # The aws-ofi-nccl hook sets NCCL's and CXI's; pytorch.md's EDF [env] the rest.
    "alps-clariden": {
        "CUDA_CACHE_DISABLE": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "MPICH_GPU_SUPPORT_ENABLED": "0",
    },
    "generic-slurm": {},
}

# Framework caches: variable -> (value, made per rank on the node?).
CACHES: dict[str, dict[str, tuple[str, bool]]] = {
    "frontier": {
        "MIOPEN_USER_DB_PATH": ("/tmp/$USER-miopen-cache-$HPCENV_JOB_ID", True),
        "MIOPEN_CUSTOM_CACHE_DIR": ("/tmp/$USER-miopen-cache-$HPCENV_JOB_ID", True),
        "HF_DATASETS_CACHE": ("$MEMBERWORK/$HPCENV_PROJECT/.cache/huggingface/datasets", False),
    },
    "alps-clariden": {
        "HF_HOME": ("$SCRATCH/huggingface", False),
        "TRITON_HOME": ("/tmp/$USER-triton", True),
    },
}

# MASTER_ADDR's expression and MASTER_PORT as each site documents them (None: derived).
RENDEZVOUS: dict[str, tuple[str, str | None]] = {
    "frontier": ("hostname -i", "3442"),
    "perlmutter": ("scontrol show hostnames", "29500"),
    "aurora": (".hsn.cm.aurora.alcf.anl.gov", "2345"),
    "summit": ("jsrun -n1", None),
    "alps-clariden": ("scontrol show hostnames", "29500"),
    "generic-slurm": ("scontrol show hostnames", None),
}

# The per-rank GPU binding on the launcher line, and the runtime's way of passing it inside.
GPU_BINDING: dict[str, tuple[str, ...]] = {
    "frontier": ("--gpus-per-task=1", "--gpu-bind=closest"),
    # NERSC's and CSCS's PyTorch examples: every rank sees the node's GPUs (docs/sites/NAME.md,
    # "What a rank sees"); LOCAL_RANK picks one.
    "perlmutter": ("--gpus-per-node=4",),
    # Tiles as FLAT devices: no launcher flag, rank-env.sh sets ZE_AFFINITY_MASK per rank
    # (ALCF: --gpu-bind=list fails under FLAT; tests/test_aurora_tiles.py).
    "aurora": (),
    "summit": ("-g", "6"),  # one resource set per node: every rank sees all 6 (ibm-wml-ce.rst)
    "alps-clariden": ("--gpus-per-node=4",),
    "generic-slurm": (),
}

CASES = [(s, r) for s in REAL_SITES for r in load_site(s).recipes]


def _plan(site: str, recipe: str, tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "train.py").write_text("print('hi')\n")
    out = subprocess.run(
        [str(HPCENV), "submit", "--site", site, "--recipe", recipe, "--dry-run", "--json"]
        + ["-A", "csc300", "-N", "2", "--", "python3", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def test_every_real_site_has_a_case() -> None:
    assert {s for s, _ in CASES} == set(REAL_SITES)
    assert all(site in COLLECTIVE and site in RENDEZVOUS for site in REAL_SITES)


@pytest.mark.parametrize(("site", "recipe"), CASES, ids=[f"{s}-{r}" for s, r in CASES])
def test_rendered_job_carries_what_the_site_documents(
    site: str, recipe: str, tmp_path: Path
) -> None:
    data = _plan(site, recipe, tmp_path)
    plan = data["plan"]
    env = {v["name"]: v for v in plan["environment"]}
    launch = plan["launch"]
    script = data["script"]

    # Collective library: every documented variable, with its documented value.
    for name, value in COLLECTIVE[site].items():
        assert name in env, f"{site}/{recipe}: {name} not exported"
        assert env[name]["value"] == value, f"{site}/{recipe}: {name}={env[name]['value']}"
    if site == "perlmutter":
        assert "--nccl" in launch["container_prefix"]

    # Rendezvous: the documented address and port, and the per-rank names.
    addr, port = RENDEZVOUS[site]
    assert addr in env["MASTER_ADDR"]["value"]
    assert env["MASTER_ADDR"]["source"] == "rendezvous"
    if port is None:
        assert "HPCENV_JOB_ID" in env["MASTER_PORT"]["value"]
    else:
        assert env["MASTER_PORT"]["value"] == port
    assert any("rank-env.sh" in str(a) for a in launch["rank_step"])

    # GPUs per rank: the launcher binds, the runtime lets the rank's binding in; a recipe with
    # no GPU stack asks for none (it would hold them unused).
    site_model = load_site(site)
    head = " ".join(launch["launcher_argv"])
    gpu_recipe = load_recipe(recipe).accelerator != "none"
    for flag in GPU_BINDING[site]:
        held = flag in launch["launcher_argv"] or flag in head
        assert held == gpu_recipe, f"{site}/{recipe}: {flag} {'not ' * gpu_recipe}in {head}"
    prefix = [str(a) for a in launch["container_prefix"]]
    assert "--cleanenv" not in prefix and "--containall" not in prefix
    if site_model.runtime.kind in ("podman", "podman-hpc") and site_model.node.gpus and gpu_recipe:
        from hpcenv.jobs.runtimes.base import gpu_visibility

        assert f"--env={gpu_visibility(site_model)}" in prefix

    # Caches: exported in the site-cache layer; node ones made by the rank step, shared ones
    # made before the launch and bound into the container.
    caches = CACHES.get(site, {})
    node = sorted(n for n, (_, per_node) in caches.items() if per_node)
    for name, (value, per_node) in caches.items():
        assert env[name]["value"] == value and env[name]["source"] == "site-cache"
        if not per_node:
            assert value in plan["cache_dirs"]
            assert f'mkdir -p -- "{value}"' in script
            # bound: on the runtime's line, or among the EDF's mounts (written ``${VAR}``)
            edf = re.sub(r"\$\{(\w+)\}", r"$\1", script)
            assert any(value in a for a in prefix) or f"{value}:{value}" in edf
    if node:
        assert sorted(env["HPCENV_CACHES"]["value"].split()) == node
    else:
        assert "HPCENV_CACHES" not in env


def test_rank_step_makes_the_node_cache_folders(tmp_path: Path) -> None:
    """rank-env.sh, run as srun runs it, makes each folder $HPCENV_CACHES names, then execs."""
    from hpcenv.jobs.render import _env

    step = tmp_path / "rank-env.sh"
    step.write_text(_env().get_template("jobs/rank_env.sh.j2").render())
    folder = tmp_path / "miopen" / "db"
    env = {
        "PATH": "/usr/bin:/bin",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_NODEID": "1",
        "HPCENV_CACHES": "MIOPEN_USER_DB_PATH",
        "MIOPEN_USER_DB_PATH": str(folder),
    }
    out = subprocess.run(
        ["sh", str(step), "sh", "-c", 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["3", "1", "4", "2"]
    assert folder.is_dir()
