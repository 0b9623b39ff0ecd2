"""Training code hpcenv's authors did not write, through a user recipe, on both rehearsal nodes.

What a user does, with public code (tests/data/third_party/README.md: sources, commits, dates,
licenses): a project folder holding pytorch/examples' minGPT-DDP (its requirements.txt:
hydra-core, boto3, requests, aiohttp; the CPU patch applied to the copy) and Horovod's
``examples/adasum/adasum_small_model.py``, and a recipe that extends ``horovod-cpu`` with those
requirements. ``hpcenv build --site local-2node --recipe recipe.yaml --format both`` makes the
podman image and its SIF (one build: the user layers are late, the matched stack's layers come
from the cache); then, from the project folder (the job runs where ``submit`` was called),
``hpcenv submit -N 2 -- python3 train_probe.py SCRIPT ARGS``:

- Horovod (adasum_small_model.py) under the site's srun launch, Horovod over MPI;
- torch DDP (minGPT) under srun with env:// rendezvous (rank-env.sh);
- the same under ``--launcher torchrun`` (one per node, c10d), given as torchrun users type it,
  ``-- train_probe.py SCRIPT ARGS``: torchrun runs the script with the image's Python (issue
  35; tests/test_rehearsal_2node.py runs the program form, ``-- /opt/venv/bin/python3 ...``);

each in the podman image (site ``local-2node``) and in the SIF (site ``local-2node-sif``). The
checks are numbers from the job's output: the loss falls on every rank, and the parameters'
SHA-256 (tests/data/train_probe.py, which runs the script unchanged) is the same on every rank.

torchvision is not part of this: PyPI's torchvision is built against PyPI's torch, not the
image's ``+cpu`` torch (the recipe is refused, docs/recipes.md), and download.pytorch.org,
where the matching build lives, is not reachable here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from requirements import need_tool

if TYPE_CHECKING:
    from services import TwoNodeInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.podman, pytest.mark.timeout(900)]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
DATA = Path(__file__).parent / "data"
THIRD = DATA / "third_party"
SCRATCH = Path("/var/tmp/hpcenv-scratch/rehearsal-tests")  # shared by both nodes
RECIPE = """\
name: thirdparty-train
extends: horovod-cpu
user:
  requirements: [requirements.txt]
"""
# minGPT made small through its own hydra configuration: 0.5 % of tiny Shakespeare (about 40
# steps per rank and epoch; 1 % took 90 s a job), 2 layers of width 64, 3 epochs, no AMP (CPU),
# no loader workers.
MINGPT_ARGS = [
    "data_config.path=data/input.txt",
    "data_config.truncate=0.005",
    "data_config.block_size=32",
    "gpt_config.n_layer=2",
    "gpt_config.n_head=2",
    "gpt_config.n_embd=64",
    "trainer_config.max_epochs=3",
    "trainer_config.batch_size=64",
    "trainer_config.data_loader_workers=0",
    "trainer_config.use_amp=false",
    "trainer_config.save_every=3",
]
SUMMARY_LINE = re.compile(r"1\.0 Average 0\.1 (\d+) (\d+)\s")
LOSS_LINE = re.compile(r"\[RANK(\d+)\] Epoch (\d+) \| Iter (\d+) \| (Train|Eval) Loss (\d+\.\d+)")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Job records on shared disk (each node has its own /tmp)."""
    path = SCRATCH / f"cache-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    monkeypatch.setenv("HPCENV_CACHE", str(path))
    yield
    shutil.rmtree(path, ignore_errors=True)


def _cli(
    *args: str, cwd: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("SLURM_CONF", None)  # the site file names its own cluster
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    """The user's project folder, on the shared filesystem: the third-party code as fetched
    (minGPT with its CPU patch applied), the probe, and the user's recipe."""
    need_tool("git", why="applies the vendored CPU patch (git apply)")
    path = SCRATCH / f"thirdparty-{uuid.uuid4().hex[:6]}"
    shutil.copytree(THIRD / "pytorch-examples-mingpt-ddp", path)
    applied = subprocess.run(
        ["git", "apply", "cpu.patch"], cwd=path, capture_output=True, text=True, timeout=60
    )
    assert applied.returncode == 0, applied.stderr
    shutil.copy(THIRD / "horovod-adasum" / "adasum_small_model.py", path)
    shutil.copy(DATA / "train_probe.py", path)
    (path / "recipe.yaml").write_text(RECIPE)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class Built:
    recipe: Path
    sif: Path
    seconds: float


@pytest.fixture(scope="module")
def built(project: Path, local_image: str) -> Built:
    """``hpcenv build --site local-2node --recipe recipe.yaml --format both``: the podman image
    ``localhost/hpcenv/thirdparty-train:local-2node`` and its SIF (local_image: the matched
    stack's layers are cached from the local image's build)."""
    recipe = project / "recipe.yaml"
    start = time.monotonic()
    proc = _cli(
        "build", "--site", "local-2node", "--recipe", str(recipe), "--format", "both", "--json"
    )
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"user recipe build (podman + SIF): {seconds:.0f} s")
    doc = json.loads(proc.stdout)
    sifs = [Path(p) for p in _find(doc, "sif") if str(p).endswith(".sif")]
    assert sifs, proc.stdout
    return Built(recipe, sifs[0], seconds)


def _find(doc: Any, key: str) -> list[Any]:
    """Every value under ``key`` anywhere in a JSON document."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key and isinstance(v, str):
                found.append(v)
            found += _find(v, key)
    elif isinstance(doc, list):
        for v in doc:
            found += _find(v, key)
    return found


@pytest.fixture(params=["podman", pytest.param("sif", marks=pytest.mark.apptainer)])
def where(request: pytest.FixtureRequest, built: Built) -> list[str]:
    """The submit options that run the user's image: by its recipe on ``local-2node`` (podman),
    or its SIF on ``local-2node-sif``."""
    if request.param == "podman":
        return ["--site", "local-2node", "--recipe", str(built.recipe)]
    request.getfixturevalue("site_apptainer")  # the nodes' `apptainer` command is installed
    return ["--site", "local-2node-sif", "--image", str(built.sif)]


def _submit(project: Path, where: list[str], *args: str) -> str:
    """Submit from the project folder (no --chdir: the job runs there), wait, return the log."""
    for old in project.glob("probe-*.json"):  # an earlier job's probes are not this one's
        old.unlink()
    proc = _cli(
        "submit",
        *where,
        "--name",
        f"tp2n-{uuid.uuid4().hex[:6]}",
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--wait",
        "--timeout",
        "600",
        "--json",
        *args,
        cwd=project,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sub = json.loads(proc.stdout)
    log = _cli("logs", sub["job_id"]).stdout
    print(f"job {sub['job_id']}: {sub['status'].get('raw', {}).get('RunTime')}")
    return log


def _probes(project: Path, log: str) -> list[dict[str, Any]]:
    """Each rank's probe, from the file it wrote in the job's folder (whole, unlike its line in
    the shared output file, where two ranks' long lines may interleave)."""
    ranks = [json.loads(p.read_text()) for p in sorted(project.glob("probe-*.json"))]
    ranks.sort(key=lambda r: r["rank"])
    assert [(r["rank"], r["host"]) for r in ranks] == [(0, "node1"), (1, "node2")], log
    assert len({r["params_sha256"] for r in ranks}) == 1, ranks  # identical on every rank
    return ranks


@pytest.mark.timeout(1800)  # the first to use `built`: the user build and its SIF count here
def test_horovod_adasum_example_trains_on_both_nodes(
    two_node: TwoNodeInfo, project: Path, where: list[str]
) -> None:
    """horovod/horovod examples/adasum/adasum_small_model.py, unchanged: Horovod over MPI
    under the site's srun launch; its gradients are averaged with hvd.allreduce."""
    log = _submit(project, where, "--", "python3", "train_probe.py", "adasum_small_model.py")
    # Rank 0's own line: x_max, op, learning rate, Horovod's size, steps taken. Searched, not
    # matched at a line's start: srun forwards each task's output in pieces, so the line can land
    # inside the other rank's line in the one output file (CI, stop 24).
    summary = SUMMARY_LINE.search(log)
    assert summary and summary[1] == "2", log
    for r in _probes(project, log):
        losses = r["losses"]
        assert len(losses) >= 10, r
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert last < 0.05 * first, (first, last)


@pytest.mark.parametrize("launcher", ["site", "torchrun"])
def test_pytorch_mingpt_ddp_example_trains_on_both_nodes(
    two_node: TwoNodeInfo, project: Path, where: list[str], launcher: str
) -> None:
    """pytorch/examples distributed/minGPT-ddp (CPU patch only): torch DDP with env://
    rendezvous under srun (rank-env.sh), and under --launcher torchrun, given the script as
    torchrun users type it (torchrun runs it with the image's Python, no ``--no-python``); its
    own hydra configuration, its own requirements (hydra-core ...) from the user's recipe."""
    if launcher == "torchrun":
        launch = ["--launcher", "torchrun", "--", "train_probe.py"]
    else:
        launch = ["--", "python3", "train_probe.py"]
    # Each rank keeps its own snapshot (both are local rank 0, both save), named for this test
    # so that no later run resumes from it; OmegaConf reads RANK when the job runs.
    snap = f"trainer_config.snapshot_path=snap-{uuid.uuid4().hex[:6]}-${{oc.env:RANK}}.pt"
    log = _submit(project, where, *launch, "main.py", *MINGPT_ARGS, snap)
    losses: dict[tuple[int, str], list[float]] = {}
    for m in LOSS_LINE.finditer(log):  # found anywhere: a rank's output may land mid-line
        losses.setdefault((int(m[1]), m[4]), []).append(float(m[5]))
    for rank in (0, 1):
        train, evals = losses[(rank, "Train")], losses[(rank, "Eval")]
        assert len(train) >= 3 and len(evals) == 3, losses
        assert train[-1] < 0.8 * train[0], train  # 4.1 (ln 58 classes) -> about 2.9
        assert evals[-1] < evals[0], evals
    ranks = _probes(project, log)
    assert all(r["model"] in ("GPT", "DistributedDataParallel") for r in ranks), ranks
    snaps = sorted(p.name for p in project.glob(snap.split("=")[1].split("$")[0] + "*.pt"))
    assert len(snaps) == 2, snaps  # saved by each rank in the folder submit was called from
