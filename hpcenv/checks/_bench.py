"""Shared helpers of the allreduce checks: message sizes, iteration counts, bandwidth, JSON out.

Bandwidth follows the nccl-tests convention: ``algbw = bytes / time`` and
``busbw = algbw * 2 (n - 1) / n`` for allreduce, in GB/s (1e9 bytes per second).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

MiB = 1 << 20


def sweep_parser(doc: str | None, factor: int, max_iters: int) -> argparse.ArgumentParser:
    """Options shared by the allreduce checks. Names avoid prefixes of launcher options
    (``--min``/``--max``/``--n`` are ambiguous to horovodrun's and torchrun's parsers)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--exact-n", type=int, default=1_000_003, help="elements of the exact checks")
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=64 * MiB)
    ap.add_argument("--factor", type=int, default=factor, help="size step of the sweep")
    ap.add_argument("--max-iters", type=int, default=max_iters, help="timed ops per size, at most")
    ap.add_argument(
        "--allow-single-rank",
        action="store_true",
        help="run with world size 1 (a collective over one rank moves no data: refused otherwise)",
    )
    return ap


def require_peers(world_size: int, allowed: bool) -> None:
    """Refuse a collective check that cannot fail: world size 1 moves nothing (busbw 0).

    Exits 2 with one line on stderr unless ``--allow-single-rank`` was given.
    """
    if world_size < 2 and not allowed:
        print(
            f"error: world size {world_size}: a collective check over one rank moves no data and "
            "cannot fail; launch at least 2 ranks (or pass --allow-single-rank)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def message_sizes(lo: int = 8, hi: int = 64 * MiB, factor: int = 4) -> list[int]:
    """Byte sizes ``lo, lo*factor, ...`` up to ``hi``; ``hi`` itself is always included."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"bad sweep {lo}..{hi} x{factor}")
    out = []
    size = lo
    while size < hi:
        out.append(size)
        size *= factor
    out.append(hi)
    return out


def iterations(nbytes: int, budget_bytes: int = 256 * MiB, lo: int = 5, hi: int = 1000) -> int:
    """Timed iterations for one size: about ``budget_bytes`` moved, clamped to ``[lo, hi]``."""
    return max(lo, min(hi, budget_bytes // max(nbytes, 1)))


def timed_reps(
    op: Callable[[], object],
    iters: int,
    barrier: Callable[[], object],
    slowest: Callable[[float], float],
    reps: int = 3,
) -> list[float]:
    """Seconds per op of each of ``reps`` timed loops of ``iters`` ops (two warm-up ops first);
    each loop counts as its slowest rank."""
    op()
    op()
    out = []
    for _ in range(reps):
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        out.append(slowest(time.perf_counter() - t0) / iters)
    return out


def seconds_per_op(
    op: Callable[[], object],
    iters: int,
    barrier: Callable[[], object],
    slowest: Callable[[float], float],
    reps: int = 3,
) -> float:
    """Best of ``reps`` timed loops: the cores are shared with other work, so the minimum is
    the least disturbed measurement (the spread is in :func:`bandwidth`'s ``reps`` fields)."""
    return min(timed_reps(op, iters, barrier, slowest, reps))


def bandwidth(
    nbytes: int, seconds_per_op: float, nranks: int, reps: list[float] | None = None
) -> dict[str, float]:
    """Per-op time and allreduce algorithm / bus bandwidth in GB/s (of the best loop); with
    ``reps`` (seconds per op of each loop) also min/median/max of time and bus bandwidth."""
    factor = 2 * (nranks - 1) / nranks

    def busbw(seconds: float) -> float:
        return nbytes / seconds / 1e9 * factor if seconds > 0 else float("inf")

    algbw = nbytes / seconds_per_op / 1e9 if seconds_per_op > 0 else float("inf")
    out = {
        "time_us": seconds_per_op * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor,
    }
    if reps and len(reps) > 1:
        ordered = sorted(reps)
        median = ordered[len(ordered) // 2]
        out |= {
            "reps": float(len(reps)),
            "time_us_min": ordered[0] * 1e6,
            "time_us_median": median * 1e6,
            "time_us_max": ordered[-1] * 1e6,
            "busbw_GBps_min": busbw(ordered[-1]),
            "busbw_GBps_median": busbw(median),
            "busbw_GBps_max": busbw(ordered[0]),
        }
    return out


def int_sum_expected(n: int, nranks: int) -> int:
    """Sum over all elements of the allreduced ``x_r[i] = r*n + i`` (closed form)."""
    return n * n * nranks * (nranks - 1) // 2 + nranks * n * (n - 1) // 2


def float_sum_expected(n: int, nranks: int) -> float:
    """Sum over all elements of the allreduced ``x_r[i] = (r + 1) + i/2`` (exact in float64)."""
    return n * nranks * (nranks + 1) / 2 + nranks * 0.5 * n * (n - 1) / 2


def platform_info() -> dict[str, Any]:
    """Where the check ran: host name, CPUs visible, Python."""
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def emit(doc: dict[str, Any]) -> None:
    """Print the check's result as one JSON line on stdout."""
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()
