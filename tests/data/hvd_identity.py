"""Which MPI does Horovod really use in each rank? One JSON line per rank.

Horovod's own view (``mpi_built``/``mpi_enabled``/``gloo_enabled``, rank, size), the MPI library
Horovod's MPI ops loaded (``MPI_Get_library_version`` called through the already-loaded
``libmpi_abi.so.1`` or ``libmpi.so.12``, and every MPI library in /proc/self/maps), and allreduces of known values:
rank r contributes r+1 (exact sum size*(size+1)/2) in float32 and float64, and a 1 MiB float64
tensor whose sum is exact, so a test tells the site MPI from the image's and a working job
from N unconnected copies.
"""

import ctypes
import json
import os
import socket

import horovod.torch as hvd
import torch

hvd.init()
rank, size = hvd.rank(), hvd.size()
want = size * (size + 1) / 2
small = {
    str(dt): float(
        hvd.allreduce(torch.full((1024,), rank + 1.0, dtype=dt), op=hvd.Sum, name=f"small.{dt}")[0]
    )
    for dt in (torch.float32, torch.float64)
}
# 131072 float64 values i*(rank+1): the sum over ranks is i*want, exact in float64.
big = torch.arange(131072, dtype=torch.float64) * (rank + 1)
big_sum = hvd.allreduce(big, op=hvd.Sum, name="big")
big_exact = bool(torch.equal(big_sum, torch.arange(131072, dtype=torch.float64) * want))


def _loaded(*names: str) -> ctypes.CDLL:
    """Horovod's own MPI library: the first of ``names`` already loaded (MPI-5 ABI image:
    libmpi_abi.so.1; MPICH ABI: libmpi.so.12)."""
    for name in names:
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
    raise OSError(f"none of {names} is loaded")


libmpi = _loaded("libmpi_abi.so.1", "libmpi.so.12")
buf = ctypes.create_string_buffer(8192)
length = ctypes.c_int(0)
libmpi.MPI_Get_library_version(buf, ctypes.byref(length))
with open("/proc/self/maps") as maps:
    libs = sorted({ln.split()[-1] for ln in maps if "libmpi" in ln and "/" in ln})
print(
    "hvd-identity "
    + json.dumps(
        {
            "rank": rank,
            "size": size,
            "host": socket.gethostname(),
            "mpi_built": bool(hvd.mpi_built()),
            "mpi_enabled": bool(hvd.mpi_enabled()),
            "gloo_enabled": bool(hvd.gloo_enabled()),
            "library": buf.value.decode(errors="replace").splitlines()[0].strip(),
            "maps": libs,
            "allreduce": small,
            "allreduce_exact": all(v == want for v in small.values()) and big_exact,
        }
    ),
    flush=True,
)
hvd.shutdown()
