"""Horovod allreduce (op=Sum) on torch CPU tensors: exact sums, then bandwidth at a few sizes.

Run over MPI: ``mpirun -np 2 python allreduce_horovod.py``; over Gloo:
``horovodrun -np 2 -H localhost:2 --gloo python allreduce_horovod.py``. The JSON on rank 0 says
which controller Horovod used; with ``--ops-timeline PATH`` also which operations ran the exact
checks (Horovod's timeline: ``CCL_ALLREDUCE``, ``MPI_ALLREDUCE``, ``GLOO_ALLREDUCE``).
"""

from __future__ import annotations

import os
from typing import Any

import horovod
import horovod.torch as hvd
import torch
from _bench import (
    bandwidth,
    emit,
    iterations,
    message_sizes,
    platform_info,
    require_peers,
    sweep_parser,
    timed_reps,
)
from _hvd_ops import OpsProbe, enable_dynamic_timeline


def controller() -> str:
    """The controller Horovod runs with (what ``hvd.init()`` picked, not what was asked)."""
    if hvd.gloo_enabled():
        return "gloo"
    if hvd.mpi_enabled():
        return "mpi"
    return "unknown"


def exact_checks(n: int) -> list[dict[str, Any]]:
    """Sum of int64 ``r*n + i`` and float64 ``(r+1) + i/2`` across ranks; observed totals."""
    rank, size = hvd.rank(), hvd.size()
    i = torch.arange(n, dtype=torch.int64)
    cases = [
        ("int64", rank * n + i, n * size * (size - 1) // 2 + size * i),
        (
            "float64",
            (rank + 1) + i.to(torch.float64) / 2,
            size * (size + 1) / 2 + size * i.to(torch.float64) / 2,
        ),
    ]
    out = []
    for dtype, send, expected in cases:
        recv = hvd.allreduce(send, op=hvd.Sum, name=f"exact.{dtype}")
        bad = hvd.allreduce(torch.tensor(int((recv != expected).sum())), op=hvd.Sum, name="bad")
        out.append(
            {"dtype": dtype, "n": n, "observed_total": recv.sum().item(), "mismatches": int(bad)}
        )
    return out


def sweep(sizes: list[int], max_iters: int) -> list[dict[str, Any]]:
    """Time ``hvd.allreduce`` (Sum) of float32 tensors; every result is checked."""
    size = hvd.size()
    rows = []
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        send = torch.full((count,), float(hvd.rank() + 1), dtype=torch.float32)
        name = f"bw.{count}"
        result: list[torch.Tensor] = []

        def op(send: torch.Tensor = send, name: str = name, result: list = result) -> None:
            result[:] = [hvd.allreduce(send, op=hvd.Sum, name=name)]

        iters = iterations(nbytes, hi=max_iters)
        reps = timed_reps(
            op,
            iters,
            lambda: hvd.allreduce(torch.zeros(1), name="barrier"),
            lambda t: float(hvd.allreduce(torch.tensor([t]), op=hvd.Max, name="tmax")),
        )
        bad = int((result[0] != size * (size + 1) / 2).sum())
        bad = int(hvd.allreduce(torch.tensor(bad), op=hvd.Sum, name="bad"))
        rows.append(
            {"bytes": count * 4, "iters": iters, "mismatches": bad}
            | bandwidth(count * 4, min(reps), size, reps)
        )
    return rows


def main() -> None:
    ap = sweep_parser(__doc__, factor=16, max_iters=100)
    ap.add_argument("--ops-timeline", default="", help="record the exact checks' operations here")
    args = ap.parse_args()
    if args.ops_timeline:
        enable_dynamic_timeline()
    hvd.init()
    require_peers(hvd.size(), args.allow_single_rank)
    torch.set_num_threads(1)
    probe = OpsProbe(hvd, args.ops_timeline) if args.ops_timeline else None
    if probe:
        probe.start()
    exact = exact_checks(args.exact_n)
    if probe:
        probe.stop()
    rows = sweep(message_sizes(args.min_bytes, args.max_bytes, args.factor), args.max_iters)
    doc: dict[str, Any] = {}
    if hvd.rank() == 0:
        doc = {
            "check": "allreduce_horovod",
            "flavor": f"horovod-{controller()}",
            "controller": controller(),
            "requested": {
                k: os.environ.get(k)
                for k in ("HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS")
                if os.environ.get(k)
            },
            "built": {"mpi": hvd.mpi_built(), "gloo": hvd.gloo_built(), "ccl": hvd.ccl_built()},
            "world_size": hvd.size(),
            "horovod": horovod.__version__,
            "torch": torch.__version__,
            "exact": exact,
            "sweep": rows,
            "platform": platform_info(),
        }
    rank = hvd.rank()
    hvd.shutdown()
    if rank == 0:
        if probe:
            doc["ops_seen"] = probe.seen()
        emit(doc)


if __name__ == "__main__":
    main()
