"""One rank of tests/test_mpi_abi_image.py: an exact allreduce with mpi4py, and what this process
runs on: the MPI library's own name, the ABI version it reports, the host and every
libmpi_abi mapped."""

import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1, op=MPI.SUM)
with open("/proc/self/maps") as f:
    maps = sorted({line.split()[-1] for line in f if "libmpi_abi" in line})
major, minor = MPI.Get_abi_version()
lib = MPI.Get_library_version().splitlines()[0].strip()
print(
    f"ABI-RANK rank={rank} size={size} sum={total} expect={size * (size + 1) // 2} "
    f"abi={major}.{minor} host={socket.gethostname()} maps={';'.join(maps)}; lib={lib}",
    flush=True,
)
