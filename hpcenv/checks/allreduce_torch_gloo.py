"""torch.distributed all_reduce (SUM) on CPU tensors: exact sums, then a bandwidth sweep.

Run: ``torchrun --standalone --nproc-per-node 2 allreduce_torch_gloo.py``; under ``mpirun`` the
Open MPI / PMI rank variables are mapped to torch's env:// ones. ``torch_ccl.py`` reuses
``run_allreduce`` with the ``ccl`` backend.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
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

_RANK_VARS = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)


def env_from_launcher() -> None:
    """Fill RANK/WORLD_SIZE/MASTER_* from an MPI launcher when torchrun did not set them."""
    if "RANK" in os.environ:
        return
    for rank, size, local in _RANK_VARS:
        if rank in os.environ:
            os.environ["RANK"] = os.environ[rank]
            os.environ["WORLD_SIZE"] = os.environ[size]
            os.environ["LOCAL_RANK"] = os.environ.get(local, os.environ[rank])
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29511")
            return


def exact_checks(n: int) -> list[dict[str, Any]]:
    """all_reduce of int64 ``r*n + i`` and float64 ``(r+1) + i/2``; observed totals."""
    rank, size = dist.get_rank(), dist.get_world_size()
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
    for dtype, buf, expected in cases:
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        bad = torch.tensor(int((buf != expected).sum()))
        dist.all_reduce(bad)
        out.append(
            {"dtype": dtype, "n": n, "observed_total": buf.sum().item(), "mismatches": int(bad)}
        )
    return out


def sweep(sizes: list[int], max_iters: int) -> list[dict[str, Any]]:
    """Time in-place all_reduce (SUM) of float32 tensors; every result is checked."""
    rank, size = dist.get_rank(), dist.get_world_size()
    rows = []
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        buf = torch.empty(count, dtype=torch.float32)
        iters = iterations(nbytes, hi=max_iters)

        def slowest(t: float) -> float:
            x = torch.tensor([t], dtype=torch.float64)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            return float(x)

        reps = timed_reps(lambda b=buf: dist.all_reduce(b), iters, dist.barrier, slowest)
        buf.fill_(rank + 1)
        dist.all_reduce(buf)
        bad = torch.tensor(int((buf != size * (size + 1) / 2).sum()))
        dist.all_reduce(bad)
        rows.append(
            {"bytes": count * 4, "iters": iters, "mismatches": int(bad)}
            | bandwidth(count * 4, min(reps), size, reps)
        )
    return rows


def run_allreduce(backend: str, argv: list[str] | None = None) -> dict[str, Any] | None:
    """Initialise ``backend``, run the checks; the result document on rank 0, else None."""
    ap = sweep_parser(__doc__, factor=4, max_iters=300)
    args = ap.parse_args(argv)
    env_from_launcher()
    torch.set_num_threads(1)
    dist.init_process_group(backend)
    require_peers(dist.get_world_size(), args.allow_single_rank)
    try:
        exact = exact_checks(args.exact_n)
        rows = sweep(message_sizes(args.min_bytes, args.max_bytes, args.factor), args.max_iters)
        if dist.get_rank() != 0:
            return None
        return {
            "check": f"allreduce_torch_{backend}",
            "flavor": f"torch-{backend}",
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "torch": torch.__version__,
            "exact": exact,
            "sweep": rows,
            "platform": platform_info(),
        }
    finally:
        dist.destroy_process_group()


def main() -> None:
    doc = run_allreduce("gloo")
    if doc is not None:
        emit(doc)


if __name__ == "__main__":
    main()
