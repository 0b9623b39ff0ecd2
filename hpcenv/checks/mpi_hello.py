"""mpi4py world check: every rank's machine, the MPI library, and an exact integer allreduce.

Run: ``mpirun -np 2 python mpi_hello.py``. Prints one JSON document on rank 0. Cheap on purpose:
it is the check that proves an image runs where it is meant to (under emulation too: the
machine each rank reports is the image's architecture, e.g. aarch64 under qemu-user-static).
"""

from __future__ import annotations

import json
import platform

import mpi4py
from mpi4py import MPI


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    machines = comm.gather(platform.machine(), root=0)
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    if rank == 0:
        doc = {
            "world_size": size,
            "machines": machines,
            "rank_sum": total,
            "mpi4py": mpi4py.__version__,
            "library": MPI.Get_library_version().strip().splitlines()[0],
            "python": platform.python_version(),
        }
        print(json.dumps(doc), flush=True)


if __name__ == "__main__":
    main()
