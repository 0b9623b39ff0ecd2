"""Plots and report tables: byte-unit ticks, caption, legend outside, spreads, better-direction."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcenv.bench.report import better_direction
from hpcenv.checks._bench import bandwidth
from hpcenv.plots import byte_ticks, format_bytes, plot_sweeps


def test_byte_units() -> None:
    assert [format_bytes(n) for n in (8, 1024, 1536, 64 << 20, 3 << 30)] == [
        "8 B",
        "1 KiB",
        "1.5 KiB",
        "64 MiB",
        "3 GiB",
    ]
    ticks = byte_ticks(8, 64 << 20)
    assert ticks[0] == 8 and ticks[-1] == 64 << 20 and len(ticks) <= 10
    assert [format_bytes(t) for t in ticks][:3] == ["8 B", "32 B", "256 B"]


def test_spread_fields_from_repeated_loops() -> None:
    row = bandwidth(1 << 20, 0.001, 2, [0.002, 0.001, 0.0015])
    assert row["time_us"] == pytest.approx(1000) and row["time_us_max"] == pytest.approx(2000)
    assert row["time_us_median"] == pytest.approx(1500)
    assert row["busbw_GBps_max"] == pytest.approx(row["busbw_GBps"])
    assert row["busbw_GBps_min"] == pytest.approx(row["busbw_GBps"] / 2)
    assert "time_us_min" not in bandwidth(8, 1e-6, 2)


def test_plot_has_byte_ticks_caption_and_legend_below(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        bandwidth(n, n / 1e9 + 1e-6, 2, [n / 1e9 + 1e-6, n / 0.8e9 + 1e-6, n / 0.9e9 + 1e-6])
        | {"bytes": n}
        for n in (8, 512, 32768, 1 << 21, 64 << 20)
    ]
    figures = []
    real_savefig = plt.Figure.savefig

    def keep(fig, *args, **kwargs):  # type: ignore[no-untyped-def]
        figures.append(fig)
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    out = plot_sweeps(
        {"image mpi4py": rows},
        tmp_path / "p.png",
        title="allreduce, 2 ranks",
        caption="box, 2 cores; 2 ranks, one node; image x:y",
    )
    assert out is not None and out.stat().st_size > 10_000
    fig = figures[0]
    bw_ax = fig.axes[0]
    labels = [t.get_text() for t in bw_ax.get_xticklabels()]
    assert labels[0] == "8 B" and labels[-1] == "64 MiB"
    texts = [t.get_text() for t in fig.texts]
    assert any("image x:y" in t and "band: slowest to fastest loop" in t for t in texts)
    assert bw_ax.get_legend() is None and fig.legends  # the legend sits under the plots
    assert bw_ax.collections  # the spread band


@pytest.mark.parametrize(
    ("measure", "better"),
    [
        (
            "Container tax: mpi4py allreduce 64 MiB busbw, image / bare host",
            "higher = image better",
        ),
        ("Container tax: mpi4py allreduce 8 B time, image / bare host", "lower = image better"),
        (
            "Tuning: mpi4py allreduce 64 MiB, hpcenv launch + per-size rules / naive",
            "higher = hpcenv better",
        ),
        (
            "Tuning: Horovod MNIST step time, naive / adjacent hpcenv-launch runs (speed-up)",
            "higher = hpcenv better",
        ),
        ("Build (daal4py): image size, naive / hpcenv", "higher = hpcenv better"),
        (
            "Build (daal4py): hpcenv warm rebuild after a last-layer change / cold",
            "lower = hpcenv better",
        ),
        (
            "K-Means float32: scikit-learn / daal4py batch, time per iteration (speed-up)",
            "higher = daal4py better",
        ),
        ("CLI: `hpcenv --help`", ""),
    ],
)
def test_headline_ratios_say_which_way_is_better(measure: str, better: str) -> None:
    assert better_direction(measure) == better
