"""Which MPI does each rank really run? One JSON line per rank.

``MPI_Get_library_version()``, the MPI libraries mapped into the process (from /proc/self/maps),
the host name, the image it runs in (the SIF apptainer names, or "podman"), and an allreduce of
known values (rank r contributes r+1; the exact sum is size*(size+1)/2), so a test can tell the
site MPI from the image's and a working job from N unconnected copies.
"""

import json
import os
import socket

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
with open("/proc/self/maps") as maps:
    libs = sorted({ln.split()[-1] for ln in maps if "libmpi" in ln and "/" in ln})
send = np.full(1024, comm.rank + 1.0)
recv = np.empty_like(send)
comm.Allreduce(send, recv)
print(
    "mpi-identity "
    + json.dumps(
        {
            "rank": comm.rank,
            "size": comm.size,
            "host": socket.gethostname(),
            "container": os.environ.get("APPTAINER_CONTAINER")
            or ("podman" if os.path.exists("/run/.containerenv") else None),
            "library": MPI.Get_library_version().splitlines()[0].strip(),
            "maps": libs,
            "allreduce": float(recv[0]),
            "allreduce_exact": bool(np.all(recv == comm.size * (comm.size + 1) / 2)),
        }
    ),
    flush=True,
)
