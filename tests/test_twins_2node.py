"""The GPU sites' twins under the two-node rehearsal's real Slurm: what every rank sees.

Each twin (site-configs/frontier-twin.yaml, perlmutter-twin.yaml, alps-clariden-twin.yaml)
extends the real site and overrides only what cannot exist here (each override named in its
file); the rehearsal's nodes carry two GRES GPUs each from null device files, with gres.conf
affinity GPU 1 on core 0 and GPU 0 on core 1 (scripts/slurm-2node-up.sh), and
TaskPlugin=task/affinity, so Slurm computes every task's CUDA_VISIBLE_DEVICES /
ROCR_VISIBLE_DEVICES and ``--gpu-bind=closest`` as on the site. The job is the site's
torch-gpu-shaped job (one rank per GPU, the site's flags, rendezvous and rank environment), with
the local CPU image standing in for the GPU image (said why in each twin's file), and its command
is hpcenv/checks/rank_probe.py: on every rank, ``set_device(LOCAL_RANK)`` must name a device the
rank sees, the one closest to the rank's cores by the site's map, on a device no other rank of
its node uses; ranks unique and complete; MASTER_ADDR resolves; and for the site's launcher the
plan's JSON device ids are the ones Slurm gave. Default launcher and ``--launcher torchrun``.

Kept short for CI: six jobs of a few seconds on the session's two-node cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from requirements import need_file

from hpcenv.checks import rank_probe
from hpcenv.paths import cache_dir
from hpcenv.site import load_site

if TYPE_CHECKING:
    from services import TwoNodeInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600), pytest.mark.alongside]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
SCRATCH = Path("/var/tmp/hpcenv-scratch/twin-tests")
TWINS = ("frontier-twin", "perlmutter-twin", "alps-clariden-twin")
# Where the site runs SIFs (Frontier: Apptainer), its twin runs there too: the local SIF
SIF_TWINS = ("frontier-twin-sif",)
# the real cache's (`make images` builds it), named before the tests' private cache is set
SIF_IMAGE = cache_dir(create=False) / "sif" / "horovod-cpu-local.sif"


@pytest.fixture
def image(request: pytest.FixtureRequest, twin: str) -> str:
    """The image the twin's runtime runs: the local podman image, or the local SIF."""
    if twin in SIF_TWINS:
        need_file(SIF_IMAGE, "the local SIF", f"{twin} runs its ranks in it")
        return str(SIF_IMAGE)
    return str(request.getfixturevalue("local_image"))


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder both nodes see (each has its own /tmp), with the job records' cache in it."""
    path = SCRATCH / uuid.uuid4().hex[:8]
    (path / "work").mkdir(parents=True)
    (path / "cache").mkdir()
    shutil.copy(rank_probe.__file__, path / "work" / "rank_probe.py")
    monkeypatch.setenv("HPCENV_CACHE", str(path / "cache"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("SLURM_CONF", None)  # the site file names its own cluster
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd
    )


def _submit(site: str, launcher: list[str], wd: Path, image: str, *extra: str) -> list[str]:
    return [
        "submit",
        "--site",
        site,
        *launcher,
        "--account",
        "twin",
        "--image",
        image,
        "--nodes",
        "2",
        "--workdir",
        str(wd),
        "--json",
        *extra,
        "--",
        "/opt/venv/bin/python3",
        "{workdir}/rank_probe.py",
        "--folder",
        "scratch=/var/tmp/hpcenv-scratch",
    ]


@pytest.mark.parametrize("launcher", ["site", "torchrun"])
@pytest.mark.parametrize(
    "twin", [*TWINS, *(pytest.param(t, marks=pytest.mark.apptainer) for t in SIF_TWINS)]
)
def test_every_rank_sees_the_device_its_local_rank_names(
    two_node: TwoNodeInfo, image: str, shared: Path, twin: str, launcher: str
) -> None:
    site = load_site(twin)
    flag = ["--launcher", "torchrun"] if launcher == "torchrun" else []
    wd = shared / "work"
    dry = _cli(shared, *_submit(twin, flag, wd, image, "--dry-run"))
    assert dry.returncode == 0, dry.stderr
    placement = json.loads(dry.stdout)["plan"]["placement"]
    proc = _cli(shared, *_submit(twin, flag, wd, image, "--wait", "--timeout", "240"))
    job = json.loads(proc.stdout)["job_id"] if proc.stdout.strip() else None
    log = _cli(shared, "logs", job).stdout if job else ""
    assert proc.returncode == 0, f"{proc.stderr}\n{log[-4000:]}"
    records = rank_probe.parse(log)
    node = site.node
    world = 2 * placement["ranks_per_node"]
    assert len(records) == world, log[-4000:]
    found = rank_probe.problems(
        records,
        gpu_closest=node.gpu_closest or list(range(node.gpus)),
        cores=node.cores,
        world=world,
        bound=site.gpu.visible == "rank",
    )
    assert found == [], "\n".join(found)
    for r in records:
        assert r["folders"]["HPCENV_WORKDIR"]["writable"], r  # the job's folder, in the image
        assert r["host"] in ("node1", "node2")
    if launcher == "site":
        # The plan's device ids are what Slurm gave each local rank.
        for r in records:
            local = int(r["slurm"]["SLURM_LOCALID"])
            assert [r["selected"]["device"]] == list(placement["gpu_ids"][local]), (r, placement)


@pytest.mark.parametrize(
    "twin", [t for t in TWINS if "horovod-gpu" in load_site(t.removesuffix("-twin")).recipes]
)
def test_a_horovod_job_pins_the_device_its_local_rank_names(
    two_node: TwoNodeInfo, local_image: str, shared: Path, twin: str
) -> None:
    """One Horovod job where the site allows Horovod (Perlmutter and Alps list horovod-gpu;
    Frontier refuses it): ``hvd.init()`` on every rank, then Horovod's own pinning line,
    ``torch.cuda.set_device(hvd.local_rank())``, must name a device the rank sees, the closest
    one, and Horovod's rank and size must be the job's."""
    site = load_site(twin)
    wd = shared / "work"
    argv = _submit(twin, [], wd, local_image, "--wait", "--timeout", "240")
    proc = _cli(shared, *argv, "--horovod")
    job = json.loads(proc.stdout)["job_id"] if proc.stdout.strip() else None
    log = _cli(shared, "logs", job).stdout if job else ""
    assert proc.returncode == 0, f"{proc.stderr}\n{log[-4000:]}"
    records = rank_probe.parse(log)
    world = 2 * site.node.gpus
    assert len(records) == world and all(r["horovod"] for r in records), log[-4000:]
    found = rank_probe.problems(
        records,
        gpu_closest=site.node.gpu_closest or list(range(site.node.gpus)),
        cores=site.node.cores,
        world=world,
        bound=site.gpu.visible == "rank",
    )
    assert found == [], "\n".join(found)
