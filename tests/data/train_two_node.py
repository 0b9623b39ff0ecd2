"""Horovod MNIST across the rehearsal's nodes: the image's own check, plus where each rank ran.

Run per rank: ``python train_two_node.py DATA OUTPUT [--epochs N]``. Every rank prints
``rank-on {"rank", "host", "data", "container"}`` (host = the node's UTS name; container = the SIF
apptainer runs, or "podman"); rank 0 writes the check's JSON
result (per-rank parameter checksums, accuracy) to OUTPUT/mnist.json and prints it.
"""

import contextlib
import io
import json
import os
import socket
import sys

sys.path.insert(0, "/opt/hpcenv/checks")
import horovod.torch as hvd  # noqa: E402
import mnist_horovod  # noqa: E402

data, output, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
hvd.init()
files = sorted(os.listdir(data))
# Which image the rank runs in: the SIF apptainer names, or a podman container.
container = os.environ.get("APPTAINER_CONTAINER") or (
    "podman" if os.path.exists("/run/.containerenv") else None
)
print(
    "rank-on "
    + json.dumps(
        {
            "rank": hvd.rank(),
            "host": socket.gethostname(),
            "data": data,
            "files": files,
            "container": container,
        }
    ),
    flush=True,
)
sys.argv = [sys.argv[0], data, *rest]
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    mnist_horovod.main()
if buf.getvalue().strip():
    result = buf.getvalue().strip().splitlines()[-1]
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "mnist.json"), "w") as f:
        f.write(result + "\n")
    print("mnist-result " + result, flush=True)
