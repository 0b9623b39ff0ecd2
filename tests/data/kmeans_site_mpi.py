"""daal4py SPMD K-Means (the image's own check, small) plus which libmpi each rank mapped.

Run per rank: ``python kmeans_site_mpi.py``. Rank 0 prints the check's JSON result
(``world_size``, SPMD vs batch centroid difference); every rank prints
``d4p-maps {"maps": [...]}`` with the MPI libraries in its /proc/self/maps.
"""

import json
import socket
import sys

sys.path.insert(0, "/opt/hpcenv/checks")
import kmeans_daal4py  # noqa: E402

sys.argv = [sys.argv[0], "--rows", "20000", "--iters", "5", *sys.argv[1:]]
kmeans_daal4py.main()
with open("/proc/self/maps") as maps:
    libs = sorted({ln.split()[-1] for ln in maps if "libmpi" in ln and "/" in ln})
print("d4p-maps " + json.dumps({"host": socket.gethostname(), "maps": libs}), flush=True)
