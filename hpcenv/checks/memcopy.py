"""numpy copy bandwidth: ``np.copyto`` of one buffer into another, best of ``--reps``.

Run: ``python memcopy.py [--bytes 67108864] [--reps 20]``. Prints one JSON line. ``GBps`` counts
the bytes copied once (1e9 bytes per second); the memory traffic is twice that (read + write).
This is the single-core ceiling a shared-memory allreduce of the same buffer can approach: an
allreduce on one node moves every byte through memory at least once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bytes", type=int, default=64 << 20)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    src = np.ones(args.bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault in both buffers before timing
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    if not np.array_equal(dst[:: 1 << 12], src[:: 1 << 12]):
        raise SystemExit("copy mismatch")
    best = min(times)
    doc = {
        "check": "memcopy",
        "bytes": args.bytes,
        "reps": args.reps,
        "best_s": best,
        "median_s": statistics.median(times),
        "GBps": args.bytes / best / 1e9,
        "median_GBps": args.bytes / statistics.median(times) / 1e9,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
