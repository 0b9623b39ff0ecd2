"""Plots shared by the smoke report and the benchmarks (matplotlib, Agg, imported lazily).

Sizes are labelled in bytes units (8 B ... 64 MiB), the machine, ranks and image go in a
caption under the axes, the legend sits below the plots (never over a line), and where the
checks timed repeated loops the spread (slowest to fastest loop) is a shaded band around the
line of the best loop.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: float) -> str:
    """``8 B``, ``4 KiB``, ``64 MiB``: binary units, no decimals for exact powers."""
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def byte_ticks(lo: float, hi: float, most: int = 9) -> list[int]:
    """Powers of two from ``lo`` to ``hi``, evenly thinned to about ``most``; the largest is
    always a tick, the smallest too unless it would crowd the next one."""
    import math

    first, last = math.ceil(math.log2(max(lo, 1))), math.floor(math.log2(max(hi, 1)))
    powers = list(range(first, last + 1))
    step = max(1, math.ceil(len(powers) / most))
    chosen = powers[::-1][::step][::-1]  # ends at the largest size
    if powers and chosen[0] - powers[0] >= 2:  # and starts at the smallest when there is room
        chosen.insert(0, powers[0])
    return [1 << p for p in chosen]


def machine_caption() -> str:
    """This machine in a few words: CPU model, cores, memory, OS."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), model
            )
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        memory = f", {mem:.0f} GiB"
    except (ValueError, OSError):
        memory = ""
    return f"{model}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}"


def plot_sweeps(
    series: Mapping[str, Sequence[Row]],
    path: Path,
    *,
    title: str,
    hlines: Mapping[str, float] | None = None,
    caption: str | None = None,
) -> Path | None:
    """Bus bandwidth and time per allreduce vs message size, one line per series (log-log);
    None without data. ``caption`` names the machine, ranks and image (below the plots)."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    fig, (bw_ax, t_ax) = plt.subplots(1, 2, figsize=(12, 5.4))
    spreads = False
    for name, rows in series.items():
        sizes = [r["bytes"] for r in rows]
        (line,) = bw_ax.plot(sizes, [r["busbw_GBps"] for r in rows], marker="o", ms=3, label=name)
        t_ax.plot(sizes, [r["time_us"] for r in rows], marker="o", ms=3, color=line.get_color())
        if all("busbw_GBps_min" in r and "time_us_max" in r for r in rows):
            spreads = True
            bw_ax.fill_between(
                sizes,
                [r["busbw_GBps_min"] for r in rows],
                [r["busbw_GBps_max"] for r in rows],
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
            )
            t_ax.fill_between(
                sizes,
                [r["time_us_min"] for r in rows],
                [r["time_us_max"] for r in rows],
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
            )
    for name, value in (hlines or {}).items():
        bw_ax.axhline(value, linestyle="--", color="grey", linewidth=1, label=name)
    every = [r["bytes"] for rows in series.values() for r in rows]
    ticks = byte_ticks(min(every), max(every))
    for ax, ylabel, better in (
        (bw_ax, "bus bandwidth (GB/s)", "higher is better"),
        (t_ax, "time per allreduce (µs)", "lower is better"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_bytes(x)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_xlabel("message size")
        ax.set_ylabel(ylabel)
        ax.set_title(better, fontsize=9, color="dimgrey")
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = bw_ax.get_legend_handles_labels()
    ncol = min(len(labels), 3)
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=ncol,
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )
    rows_of_legend = -(-len(labels) // ncol)
    notes = [caption or machine_caption()]
    if spreads:
        notes.append("line: best of the repeated timed loops; band: slowest to fastest loop")
    fig.text(
        0.5,
        0.045 * rows_of_legend + 0.02,
        "\n".join(notes),
        ha="center",
        va="bottom",
        fontsize=8,
        color="dimgrey",
    )
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.045 * rows_of_legend + 0.02 + 0.03 * len(notes), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
