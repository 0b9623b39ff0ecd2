"""Plots shared by the smoke report and the benchmarks (matplotlib, Agg, imported lazily)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]


def plot_sweeps(
    series: Mapping[str, Sequence[Row]],
    path: Path,
    *,
    title: str,
    hlines: Mapping[str, float] | None = None,
) -> Path | None:
    """Log-log bus bandwidth vs message size, one line per series; None without data."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bw_ax, t_ax) = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    for name, rows in series.items():
        sizes = [r["bytes"] for r in rows]
        bw_ax.plot(sizes, [r["busbw_GBps"] for r in rows], marker="o", ms=3, label=name)
        t_ax.plot(sizes, [r["time_us"] for r in rows], marker="o", ms=3, label=name)
    for name, value in (hlines or {}).items():
        bw_ax.axhline(value, linestyle="--", color="grey", linewidth=1)
        bw_ax.annotate(name, (0.01, value), xycoords=("axes fraction", "data"), va="bottom",
                       fontsize=8, color="grey")  # fmt: skip
    for ax, ylabel in ((bw_ax, "bus bandwidth (GB/s)"), (t_ax, "time per allreduce (µs)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
