"""Like-for-like allreduce: one float32 buffer, in place, Sum, mpi4py or Horovod, one per process.

Run: ``mpirun -np 2 python allreduce_inplace.py --lib mpi4py`` (or ``--lib horovod``). Both
libraries get the same treatment: the buffer is allocated once, reduced in place
(``Allreduce(MPI.IN_PLACE, buf)`` / ``hvd.allreduce_(t)`` under one fixed name, so Horovod's
response cache is warm), two warm-up ops, then the best of ``--reps`` timed loops, each counted
as its slowest rank. Before timing, one in-place Sum of ``rank + 1`` is checked exactly. With
``--grads``, Horovod also times a training-step-shaped exchange: the gradients of the MNIST check's
CNN (8 tensors, 46,730 floats), each ``allreduce_async_`` (Average) then all synchronized.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _bench import MiB, bandwidth, emit, platform_info, seconds_per_op

# parameter shapes of mnist_horovod.model(): conv 16x1x5x5, conv 32x16x5x5, fc 64x512, fc 10x64
GRAD_SHAPES = [(16, 1, 5, 5), (16,), (32, 16, 5, 5), (32,), (64, 512), (64,), (10, 64), (10,)]


def _mpi4py(nbytes: int, iters: int, reps: int) -> dict[str, Any]:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    buf = np.full(nbytes // 4, rank + 1, dtype=np.float32)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    bad = comm.allreduce(int(np.count_nonzero(buf != size * (size + 1) / 2)))
    buf[:] = 0  # zeros stay zeros under repeated Sum: the timed loop never overflows
    per_op = seconds_per_op(
        lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
        iters,
        comm.Barrier,
        lambda t: comm.allreduce(t, op=MPI.MAX),
        reps=reps,
    )
    return {
        "rank": rank,
        "world_size": size,
        "mismatches": bad,
        "per_op": per_op,
        "library": MPI.Get_library_version().strip("\x00 \n").splitlines()[0],
    }


def _horovod(nbytes: int, iters: int, reps: int, grads: bool) -> dict[str, Any]:
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    size, rank = hvd.size(), hvd.rank()
    buf = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
    hvd.allreduce_(buf, op=hvd.Sum, name="inplace")
    bad = int(
        hvd.allreduce(
            torch.tensor(int((buf != size * (size + 1) / 2).sum())), op=hvd.Sum, name="bad"
        )
    )
    buf.zero_()

    def barrier() -> None:
        hvd.allreduce(torch.zeros(1), name="barrier")

    def slowest(t: float) -> float:
        return float(hvd.allreduce(torch.tensor([t]), op=hvd.Max, name="tmax"))

    per_op = seconds_per_op(
        lambda: hvd.allreduce_(buf, op=hvd.Sum, name="inplace"), iters, barrier, slowest, reps
    )
    doc: dict[str, Any] = {"rank": rank, "world_size": size, "mismatches": bad, "per_op": per_op}
    if grads:
        tensors = [torch.randn(s) for s in GRAD_SHAPES]

        def step() -> None:
            handles = [
                hvd.allreduce_async_(t, op=hvd.Average, name=f"grad.{i}")
                for i, t in enumerate(tensors)
            ]
            for h in handles:
                hvd.synchronize(h)

        doc["grads_step_ms"] = seconds_per_op(step, 50, barrier, slowest, reps) * 1e3
        doc["grads_floats"] = sum(t.numel() for t in tensors)
    hvd.shutdown()
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", choices=("mpi4py", "horovod"), required=True)
    ap.add_argument("--bytes", type=int, default=64 * MiB)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--grads", action="store_true", help="horovod: time a gradient-shaped step")
    args = ap.parse_args()
    if args.bytes < 4 or args.bytes % 4:
        raise SystemExit("--bytes must be a positive multiple of 4 (float32)")
    t0 = time.perf_counter()
    run: Callable[[], dict[str, Any]] = (
        (lambda: _mpi4py(args.bytes, args.iters, args.reps))
        if args.lib == "mpi4py"
        else (lambda: _horovod(args.bytes, args.iters, args.reps, args.grads))
    )
    doc = run()
    if doc.pop("rank") == 0:
        per_op = doc.pop("per_op")
        emit(
            {
                "check": "allreduce_inplace",
                "lib": args.lib,
                "bytes": args.bytes,
                "dtype": "float32",
                "in_place": True,
                "iters": args.iters,
                "reps": args.reps,
                "seconds": time.perf_counter() - t0,
                "platform": platform_info(),
                "env": {
                    k: v
                    for k, v in os.environ.items()
                    if k.startswith(("HOROVOD_", "OMPI_MCA_coll", "OMP_NUM"))
                },
            }
            | doc
            | bandwidth(args.bytes, per_op, doc["world_size"])
        )


if __name__ == "__main__":
    main()
