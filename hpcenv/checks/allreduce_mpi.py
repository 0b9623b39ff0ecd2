"""mpi4py Allreduce: exact sums checked against closed forms, then a bandwidth sweep.

Run: ``mpirun -np 2 python allreduce_mpi.py [--min 8] [--max 67108864] [--factor 4]``.
Prints one JSON document on rank 0 (sizes in bytes, bandwidth in GB/s).

``copy_baseline``: at the largest size, every rank copies its buffer (``np.copyto``) at the same
time, in timed loops interleaved with the allreduce's; best GB/s of each. The copy is the
physical ceiling of a one-node allreduce, measured by the same ranks, cores and load at the same
moments, so ``busbw / copy`` holds on a shared machine where either alone moves 3x.
"""

from __future__ import annotations

from typing import Any

import numpy as np
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
from mpi4py import MPI


def exact_checks(comm: Any, n: int) -> list[dict[str, Any]]:
    """Allreduce(SUM) of int64 ``r*n + i`` and float64 ``(r+1) + i/2``; observed totals."""
    rank = comm.Get_rank()
    i = np.arange(n, dtype=np.int64)
    out = []
    for dtype, send in (
        ("int64", rank * n + i),
        ("float64", (rank + 1) + i.astype(np.float64) / 2),
    ):
        recv = np.empty_like(send)
        comm.Allreduce(send, recv, op=MPI.SUM)
        size = comm.Get_size()
        expected = (
            n * size * (size - 1) // 2 + size * i
            if dtype == "int64"
            else size * (size + 1) / 2 + size * i.astype(np.float64) / 2
        )
        out.append(
            {
                "dtype": dtype,
                "n": n,
                "observed_total": recv.sum().item(),
                "mismatches": int(comm.allreduce(int(np.count_nonzero(recv != expected)))),
            }
        )
    return out


def sweep(comm: Any, sizes: list[int], max_iters: int) -> list[dict[str, Any]]:
    """Time Allreduce(SUM) of float32 buffers; every result is checked (= n(n+1)/2)."""
    nranks, rank = comm.Get_size(), comm.Get_rank()
    rows = []
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        send = np.full(count, rank + 1, dtype=np.float32)
        recv = np.empty_like(send)
        iters = iterations(nbytes, hi=max_iters)
        reps = timed_reps(
            lambda s=send, r=recv: comm.Allreduce(s, r, op=MPI.SUM),
            iters,
            comm.Barrier,
            lambda t: comm.allreduce(t, op=MPI.MAX),
        )
        bad = comm.allreduce(int(np.count_nonzero(recv != nranks * (nranks + 1) / 2)))
        rows.append(
            {"bytes": count * 4, "iters": iters, "mismatches": bad}
            | bandwidth(count * 4, min(reps), nranks, reps)
        )
    return rows


def copy_baseline(comm: Any, nbytes: int, max_iters: int, rounds: int = 3) -> dict[str, Any]:
    """Concurrent per-rank copies of ``nbytes`` interleaved with allreduces of the same size."""
    count = max(1, nbytes // 4)
    send = np.full(count, comm.Get_rank() + 1, dtype=np.float32)
    recv = np.empty_like(send)
    iters = iterations(nbytes, hi=max_iters)
    copies, reduces = [], []
    for _ in range(rounds):
        slowest = lambda t: comm.allreduce(t, op=MPI.MAX)  # noqa: E731
        copies += timed_reps(lambda: np.copyto(recv, send), iters, comm.Barrier, slowest, 1)
        reduces += timed_reps(
            lambda: comm.Allreduce(send, recv, op=MPI.SUM), iters, comm.Barrier, slowest, 1
        )
    return {
        "bytes": count * 4,
        "iters": iters,
        "rounds": rounds,
        "copy_GBps": count * 4 / min(copies) / 1e9,
        "busbw_GBps": bandwidth(count * 4, min(reduces), comm.Get_size())["busbw_GBps"],
    }


def main() -> None:
    ap = sweep_parser(__doc__, factor=4, max_iters=1000)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    require_peers(comm.Get_size(), args.allow_single_rank)
    exact = exact_checks(comm, args.exact_n)
    rows = sweep(comm, message_sizes(args.min_bytes, args.max_bytes, args.factor), args.max_iters)
    baseline = copy_baseline(comm, args.max_bytes, args.max_iters)
    if comm.Get_rank() == 0:
        emit(
            {
                "check": "allreduce_mpi",
                "flavor": "mpi4py",
                "world_size": comm.Get_size(),
                "mpi_library": MPI.Get_library_version().strip("\x00 \n").splitlines()[0],
                "mpi4py": __import__("mpi4py").__version__,
                "exact": exact,
                "sweep": rows,
                "copy_baseline": baseline,
                "platform": platform_info(),
            }
        )


if __name__ == "__main__":
    main()
