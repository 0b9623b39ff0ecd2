"""What one rank sees, as a user's first lines would: run it as the job's command.

Prints one record per rank, ``rank-probe {json}``, in lines of at most ``CHUNK`` bytes
(``rank-probe ID PART/PARTS TEXT``): Slurm forwards a task's output in 1,024-byte messages, so
a longer line from one rank can be cut by another rank's line in the job's output file. The
record holds torch.distributed's env:// names (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), the
device variables every GPU runtime reads (``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``,
``HIP_VISIBLE_DEVICES``, ``GPU_DEVICE_ORDINAL``, ``ZE_AFFINITY_MASK``), the device that
``torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))`` would select (the line of nearly every
DDP script, pytorch/examples minGPT-DDP's ``self.gpu_id = int(os.environ["LOCAL_RANK"])``
included), the rank's CPU affinity, whether ``MASTER_ADDR`` resolves, and which of the job's
folders exist and are writable here (the job's ``HPCENV_*`` folders, the site's cache folders
named in ``HPCENV_CACHES``, and each ``--folder NAME=PATH``).

Standard library only: it runs in any image with a ``python3``. :func:`problems` is the rule the
tests apply to every rank's line (a CPU run cannot call ``set_device``; this applies the same rule
to what the rank was given).

    python3 rank_probe.py [--folder NAME=PATH ...] [--horovod]

``--horovod``: run ``hvd.init()`` first and apply Horovod's own pinning line,
``torch.cuda.set_device(hvd.local_rank())`` (its documented PyTorch usage), instead of
``LOCAL_RANK``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

TAG = "rank-probe"
CHUNK = 900  # bytes per output line, under Slurm's 1,024-byte I/O message
RANK_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# In the order the frameworks read them: CUDA (torch.cuda), then ROCm's, then Level Zero's.
DEVICE_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ZE_AFFINITY_MASK",
)
JOB_FOLDERS = (
    "HPCENV_WORKDIR",
    "HPCENV_CHDIR",
    "HPCENV_NODE_LOCAL",
    "HPCENV_DATA",
    "HPCENV_OUTPUT",
)


def visible(env: Mapping[str, str]) -> list[str] | None:
    """The devices the rank sees, by the first device variable set (None: none is set, the
    rank sees whatever the node has)."""
    for name in DEVICE_NAMES:
        value = env.get(name)
        if value is not None:
            return [v for v in value.split(",") if v]
    return None


def selected(env: Mapping[str, str]) -> dict[str, Any]:
    """What ``set_device(int(os.environ["LOCAL_RANK"]))`` selects: the index, the physical
    device it names, or why it fails as torch would ("invalid device ordinal")."""
    devices = visible(env)
    raw = env.get("LOCAL_RANK")
    if raw is None or not raw.isdigit():
        return {"index": raw, "device": None, "error": "LOCAL_RANK is not a number"}
    index = int(raw)
    if devices is None:
        return {"index": index, "device": None, "error": "no device variable set"}
    if index >= len(devices):
        return {
            "index": index,
            "device": None,
            "error": f"invalid device ordinal: {index} of {len(devices)} visible ({devices})",
        }
    return {"index": index, "device": devices[index], "error": None}


def folder(path: str) -> dict[str, Any]:
    """Whether ``path`` exists and a file can be made in it (access() can say yes on a
    read-only bind)."""
    if not os.path.isdir(path):
        return {"path": path, "exists": False, "writable": False}
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".rank-probe-"):
            pass
    except OSError:
        return {"path": path, "exists": True, "writable": False}
    return {"path": path, "exists": True, "writable": True}


def folders(env: Mapping[str, str], extra: Sequence[str]) -> dict[str, dict[str, Any]]:
    named = {name: env[name] for name in JOB_FOLDERS if env.get(name)}
    for name in env.get("HPCENV_CACHES", "").split():
        if env.get(name):
            named[name] = env[name]
    for item in extra:
        name, _, path = item.partition("=")
        named[name] = os.path.expandvars(path)
    return {name: folder(path) for name, path in named.items()}


def _resolves(host: str | None) -> bool | None:
    if not host:
        return None
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


def horovod_ranks() -> dict[str, int]:
    """Horovod's own view of this rank, after ``hvd.init()`` (its controller, MPI or Gloo,
    decides ``local_rank``, not the job's ``LOCAL_RANK``)."""
    import horovod.torch as hvd

    hvd.init()
    try:
        return {
            "rank": hvd.rank(),
            "local_rank": hvd.local_rank(),
            "size": hvd.size(),
            "local_size": hvd.local_size(),
        }
    finally:
        hvd.shutdown()


def probe(
    env: Mapping[str, str], extra: Sequence[str] = (), *, horovod: bool = False
) -> dict[str, Any]:
    hvd = horovod_ranks() if horovod else None
    # Horovod's examples pin with torch.cuda.set_device(hvd.local_rank()): the same rule on
    # Horovod's local rank
    chosen = selected({**env, "LOCAL_RANK": str(hvd["local_rank"])} if hvd else env)
    return {
        "host": socket.gethostname(),
        "env": {n: env.get(n) for n in (*RANK_NAMES, *DEVICE_NAMES)},
        "slurm": {n: env.get(n) for n in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID")},
        "horovod": hvd,
        "visible": visible(env),
        "selected": chosen,
        "cores": sorted(os.sched_getaffinity(0)),
        "master_resolves": _resolves(env.get("MASTER_ADDR")),
        "folders": folders(env, extra),
    }


def closest(gpu_closest: Sequence[int], cores: int, core: int) -> int:
    """The GPU closest to ``core`` of a node with ``cores`` cores (the site's
    ``node.gpu_closest``; empty: GPU i is closest to the i-th group of cores)."""
    order = list(gpu_closest)
    return order[core * len(order) // cores]


def problems(
    records: Sequence[Mapping[str, Any]],
    *,
    gpu_closest: Sequence[int],
    cores: int,
    world: int,
    bound: bool = True,
) -> list[str]:
    """What a DDP script would hit, per rank: ``set_device(LOCAL_RANK)`` names no device the
    rank sees; the device is not one closest to the rank's cores; ranks repeat or are missing;
    ``MASTER_ADDR`` does not resolve; two ranks of a node use the same device. For a Horovod
    probe the rule is Horovod's ``set_device(hvd.local_rank())``, and Horovod's rank and size
    must be the job's. ``bound=False``: the site's launch binds no GPU to the ranks' cores
    (every rank sees the node's GPUs and picks one by its local rank, ``gpu.visible: node``),
    so closeness is not a promise it makes and is not checked."""
    out: list[str] = []
    ranks = sorted(int(r["env"]["RANK"]) for r in records)
    if ranks != list(range(world)):
        out.append(f"ranks {ranks}, not 0..{world - 1} once each")
    used: dict[tuple[str, str], str] = {}
    for r in records:
        who = f"rank {r['env']['RANK']} on {r['host']}"
        hvd = r.get("horovod")
        if hvd and (str(hvd["rank"]), hvd["size"]) != (r["env"]["RANK"], world):
            out.append(f"{who}: Horovod says rank {hvd['rank']} of {hvd['size']}")
        sel = r["selected"]
        if sel["error"]:
            rule = "hvd.local_rank()" if hvd else "LOCAL_RANK"
            out.append(f"{who}: set_device({rule}={sel['index']}): {sel['error']}")
            continue
        device = str(sel["device"])
        near = {closest(gpu_closest, cores, c) for c in r["cores"]}
        if bound and int(device) not in near:
            out.append(f"{who}: device {device}, but cores {r['cores']} are closest to {near}")
        if (r["host"], device) in used:
            out.append(f"{who}: device {device} also used by {used[(r['host'], device)]}")
        used[(r["host"], device)] = who
        if r["master_resolves"] is not True:
            out.append(f"{who}: MASTER_ADDR {r['env']['MASTER_ADDR']!r} does not resolve")
    return out


def lines(record: Mapping[str, Any], ident: str) -> list[str]:
    """``record`` as output lines of at most :data:`CHUNK` bytes each, ``ident`` naming the rank."""
    text = json.dumps(record, sort_keys=True, ensure_ascii=True)
    head = len(f"{TAG} {ident} 999/999 \n")
    step = max(CHUNK - head, 1)
    parts = [text[i : i + step] for i in range(0, len(text), step)] or [""]
    return [f"{TAG} {ident} {n}/{len(parts)} {part}\n" for n, part in enumerate(parts, 1)]


def parse(text: str) -> list[dict[str, Any]]:
    """Every rank's record in a job's output, its parts put back together in order; a record
    with a part missing is an error (a rank that printed half a line did not finish)."""
    parts: dict[str, dict[int, str]] = {}
    totals: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith(TAG + " "):
            continue
        fields = line.split(" ", 3)
        if len(fields) != 4 or "/" not in fields[2]:
            raise ValueError(f"not a rank-probe line: {line[:120]!r}")
        ident, (num, total) = fields[1], fields[2].split("/", 1)
        parts.setdefault(ident, {})[int(num)] = fields[3]
        totals[ident] = int(total)
    records = []
    for ident, got in parts.items():
        if sorted(got) != list(range(1, totals[ident] + 1)):
            raise ValueError(f"rank-probe {ident}: parts {sorted(got)} of {totals[ident]}")
        records.append(json.loads("".join(got[n] for n in sorted(got))))
    return records


def main(argv: Sequence[str]) -> int:
    extra = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--folder"]
    # Ranks in their own PID namespaces may share a PID and a host name.
    ident = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
    # One write per line, each under Slurm's message size: every node's ranks append to the
    # same job output file.
    for line in lines(probe(os.environ, extra, horovod="--horovod" in argv), ident):
        os.write(1, line.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
