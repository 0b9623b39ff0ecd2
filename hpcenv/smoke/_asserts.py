"""Assertions shared by the smoke tests (expected values computed here, not trusted)."""

from __future__ import annotations

import math
from typing import Any

from hpcenv.checks._bench import float_sum_expected, int_sum_expected


def assert_exact(doc: dict[str, Any], ranks: int) -> None:
    """Every exact case matches its closed-form total with zero mismatching elements."""
    assert doc["world_size"] == ranks
    cases = {case["dtype"]: case for case in doc["exact"]}
    assert set(cases) == {"int64", "float64"}
    for dtype, case in cases.items():
        n = case["n"]
        want = int_sum_expected(n, ranks) if dtype == "int64" else float_sum_expected(n, ranks)
        assert case["observed_total"] == want, f"{dtype}: {case['observed_total']} != {want}"
        assert case["mismatches"] == 0, f"{dtype}: {case['mismatches']} wrong elements"


def assert_sweep(doc: dict[str, Any], smallest: int, largest: int) -> list[dict[str, Any]]:
    """The sweep spans ``smallest..largest`` bytes, every result was right, every rate finite."""
    rows = doc["sweep"]
    sizes = [row["bytes"] for row in rows]
    assert sizes == sorted(sizes) and sizes[0] == smallest and sizes[-1] == largest, sizes
    for row in rows:
        assert row["mismatches"] == 0, f"{row['bytes']} B: {row['mismatches']} wrong elements"
        assert row["iters"] >= 1 and row["time_us"] > 0
        assert math.isfinite(row["busbw_GBps"]) and row["busbw_GBps"] > 0
    return [
        {k: row[k] for k in ("bytes", "time_us", "algbw_GBps", "busbw_GBps", "iters")}
        for row in rows
    ]


def sweep_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Headline numbers: latency of the smallest message, peak and largest-message busbw."""
    return {
        "latency_us": round(rows[0]["time_us"], 2),
        "peak_busbw_GBps": round(max(r["busbw_GBps"] for r in rows), 3),
        "busbw_largest_GBps": round(rows[-1]["busbw_GBps"], 3),
    }


def allreduce_ops(doc: dict[str, Any]) -> list[str]:
    """The allreduce operations Horovod's timeline shows (``CCL_ALLREDUCE``, ...), from a check
    run with ``--ops-timeline``."""
    return [op for op in doc["ops_seen"] if op.endswith("_ALLREDUCE")]
