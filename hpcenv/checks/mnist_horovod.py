"""Data-parallel MNIST with Horovod: small CNN, sharded IDX data, held-out accuracy.

Run: ``mpirun -np 2 python mnist_horovod.py /data/mnist`` (or under ``horovodrun``). Each rank
trains on its contiguous shard of the training images with ``hvd.DistributedOptimizer`` (LR scaled
by ``hvd.size()``, parameters and optimizer state broadcast from rank 0), then the held-out split is
evaluated across ranks. Rank 0 prints accuracy, train time and every rank's parameter checksum.

After each epoch every rank, at the same time, times its share of ``--compute-steps`` steps of
the same model, batches and threads with a plain optimizer and no Horovod: the step's compute
alone, measured under the same load as that epoch, so ``train step / compute step`` is what
communication costs (a ratio the smoke references can hold tightly on a shared machine, where
absolute step times move 3x). Both are reported per epoch and as medians over the epochs: one
compute window after the whole training let a moment of load elsewhere move the ratio by 30 %.
"""

from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the process's own start, near enough

import argparse  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import horovod  # noqa: E402
import horovod.torch as hvd  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from _bench import emit, platform_info  # noqa: E402
from _hvd_ops import OpsProbe, enable_dynamic_timeline  # noqa: E402
from _idx import read_idx  # noqa: E402
from torch import nn  # noqa: E402

T_IMPORTED = time.time()

MEAN, STD = 0.1307, 0.3081


def load(directory: Path, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised images ``(N, 1, 28, 28)`` and int64 labels of ``train`` or ``t10k``."""
    images = read_idx(directory / f"{part}-images-idx3-ubyte").astype(np.float32) / 255.0
    labels = read_idx(directory / f"{part}-labels-idx1-ubyte").astype(np.int64)
    if images.shape[1:] != (28, 28) or len(images) != len(labels):
        raise SystemExit(f"{directory}: {part} images {images.shape} vs labels {labels.shape}")
    return torch.from_numpy((images - MEAN) / STD).unsqueeze(1), torch.from_numpy(labels)


def shard(n: int, rank: int, size: int) -> slice:
    """Contiguous block of rank ``rank`` (the files interleave classes, so blocks stay balanced)."""
    return slice(n * rank // size, n * (rank + 1) // size)


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(512, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def param_checksum(net: nn.Module) -> dict[str, Any]:
    """sha256 of all parameters' float32 bytes, their float64 sum and count."""
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    return {
        "sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest(),
        "sum": float(flat.double().sum()),
        "count": int(flat.numel()),
    }


def compute_alone(
    net: nn.Module, xs: torch.Tensor, ys: torch.Tensor, args: Any, n: int, rank: int, hvd: Any
) -> float:
    """Seconds per step for ``n`` training steps of a copy of ``net`` with plain SGD (no
    allreduce), all ranks at once (started together by an allreduce); the slowest rank's."""
    if n <= 0:
        return 0.0
    plain = model()
    plain.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(plain.parameters(), lr=args.lr, momentum=0.9)
    order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(99 + rank))
    hvd.allreduce(torch.tensor(0.0), name="compute.start")
    t0 = time.perf_counter()
    for step in range(n):
        idx = order[step * args.batch_size : (step + 1) * args.batch_size]
        opt.zero_grad()
        nn.functional.cross_entropy(plain(xs[idx]), ys[idx]).backward()
        opt.step()
    took = torch.tensor((time.perf_counter() - t0) / n)
    return float(hvd.allreduce(took, op=hvd.Max, name="compute.t"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("data", type=Path, nargs="?", default=Path("/data/mnist"))
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by hvd.size()")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="0: cores / local ranks")
    ap.add_argument("--ops-timeline", default="", help="record the first epoch's operations here")
    ap.add_argument("--compute-steps", type=int, default=100, help="steps of the compute baseline")
    args = ap.parse_args()

    if args.ops_timeline:
        enable_dynamic_timeline()
    hvd.init()
    t_init = time.time()
    rank, size = hvd.rank(), hvd.size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed + rank)  # deliberately different: the broadcast must fix it

    x, y = load(args.data, "train")
    xt, yt = load(args.data, "t10k")
    part = shard(len(x), rank, size)
    xs, ys = x[part], y[part]
    steps = int(hvd.allreduce(torch.tensor(len(xs) // args.batch_size), op=hvd.Min, name="steps"))

    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr * size, momentum=0.9)
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters(), op=hvd.Average)
    initial = param_checksum(net)

    losses = []
    t_first_step = 0.0
    probe = OpsProbe(hvd, args.ops_timeline) if args.ops_timeline else None
    if probe:
        probe.start()
    compute_n = min(steps, -(-args.compute_steps // max(1, args.epochs)))  # per epoch
    epoch_s: list[float] = []
    compute_by_epoch: list[float] = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        net.train()
        order = torch.randperm(
            len(xs), generator=torch.Generator().manual_seed(epoch * 1000 + rank)
        )
        total = 0.0
        for step in range(steps):
            idx = order[step * args.batch_size : (step + 1) * args.batch_size]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach())
            if not t_first_step:
                t_first_step = time.time()
        losses.append(float(hvd.allreduce(torch.tensor(total / steps), name=f"loss.{epoch}")))
        epoch_s.append(time.perf_counter() - t0)
        if probe and epoch == 0:
            probe.stop()
        compute_by_epoch.append(compute_alone(net, xs, ys, args, compute_n, rank, hvd))
    epoch_max = hvd.allreduce(torch.tensor(epoch_s, dtype=torch.float64), op=hvd.Max, name="t")
    epoch_s = [float(t) for t in epoch_max]
    train_s = sum(epoch_s)
    compute_s = statistics.median(compute_by_epoch) if compute_by_epoch else 0.0

    net.eval()
    tpart = shard(len(xt), rank, size)
    with torch.no_grad():
        pred = net(xt[tpart]).argmax(1)
    counts = hvd.allreduce(
        torch.tensor([int((pred == yt[tpart]).sum()), len(pred)]), op=hvd.Sum, name="acc"
    )
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    spread = hvd.allreduce(flat, op=hvd.Max, name="pmax") - hvd.allreduce(
        flat, op=hvd.Min, name="pmin"
    )
    checksums = hvd.allgather_object(param_checksum(net) | {"rank": rank})
    # Time to the first training step, slowest rank; from the launcher's start when the launch
    # line exported HPCENV_LAUNCH_T0 (``date +%s.%N`` right before mpirun), else from import.
    launch_t0 = float(os.environ.get("HPCENV_LAUNCH_T0") or T_START)
    marks = {
        "imports": T_IMPORTED - T_START,
        "hvd_init": t_init - T_IMPORTED,
        "first_step_from_process": t_first_step - T_START,
        "first_step_from_launch": t_first_step - launch_t0,
    }
    startup = {
        k: float(hvd.allreduce(torch.tensor(v), op=hvd.Max, name=f"startup.{k}"))
        for k, v in marks.items()
    }
    startup["from_launcher"] = "HPCENV_LAUNCH_T0" in os.environ
    initial_all = hvd.allgather_object(initial["sha256"])

    doc: dict[str, Any] = {}
    if rank == 0:
        doc = {
            "check": "mnist_horovod",
            "world_size": size,
            "controller": "gloo" if hvd.gloo_enabled() else "mpi",
            "horovod": horovod.__version__,
            "torch": torch.__version__,
            "threads_per_rank": threads,
            "train_samples": len(x),
            "test_samples": int(counts[1]),
            "samples_per_rank": [
                shard(len(x), r, size).stop - shard(len(x), r, size).start for r in range(size)
            ],
            "epochs": args.epochs,
            "steps_per_epoch": steps,
            "batch_size_per_rank": args.batch_size,
            "lr": args.lr * size,
            "epoch_loss": losses,
            "train_seconds": train_s,
            "samples_per_second": steps * args.batch_size * size * args.epochs / train_s,
            "epoch_seconds": epoch_s,
            "step_seconds_median": statistics.median(epoch_s) / steps,
            "compute_step_seconds": compute_s,
            "compute_step_seconds_by_epoch": compute_by_epoch,
            "compute_steps_per_epoch": compute_n,
            "correct": int(counts[0]),
            "test_accuracy": int(counts[0]) / int(counts[1]),
            "initial_param_sha256": initial_all,
            "param_checksums": checksums,
            "param_max_spread": float(spread.max()),
            "startup_seconds": startup,
            "platform": platform_info(),
            "cpu_operations": os.environ.get("HOROVOD_CPU_OPERATIONS", "(build default)"),
        }
    hvd.shutdown()
    if rank == 0:
        if probe:
            doc["ops_seen"] = probe.seen()
        emit(doc)


if __name__ == "__main__":
    main()
