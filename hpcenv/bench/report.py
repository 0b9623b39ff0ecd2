"""The benchmark report: ratio math over sweeps, Markdown tables, report.md / report.json, plots.

Everything here is pure (no podman, no MPI) so it is unit-tested on its own. A report is a list of
sections; each section carries its raw data (what ``report.json`` keeps), Markdown tables and the
rows it contributes to the headline table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPORT_MD = "report.md"
REPORT_JSON = "report.json"

Row = Mapping[str, Any]


# -- numbers ---------------------------------------------------------------------------------
def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``; None when either is missing, not finite, or ``den`` is 0."""
    if num is None or den is None:
        return None
    if not (math.isfinite(num) and math.isfinite(den)) or den == 0:
        return None
    return num / den


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values; None when there are none."""
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fmt_ratio(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}x" if abs(value) >= 100 else f"{value:.{digits}f}x"


def fmt_num(value: float | None, digits: int = 3) -> str:
    """Significant-digit formatting that keeps small and large numbers readable."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def fmt_bytes(n: int | float) -> str:
    """``8 B``, ``32 KiB``, ``64 MiB``, ``1.5 GiB`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            text = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_mb(n: int | float | None) -> str:
    """Decimal megabytes, as ``podman images`` shows sizes."""
    return "n/a" if n is None else f"{n / 1e6:,.0f} MB"


# -- allreduce sweeps ------------------------------------------------------------------------
def by_size(rows: Iterable[Row]) -> dict[int, Row]:
    """Sweep rows keyed by message size in bytes."""
    return {int(r["bytes"]): r for r in rows}


def best_sweep(*runs: Sequence[Row]) -> list[dict[str, Any]]:
    """Merge repeated sweeps: per size, the row with the highest bus bandwidth.

    Repeats are interleaved with the runs they are compared against, so taking each side's best
    compares the least disturbed measurements of both (the machine is shared and noisy).
    """
    best: dict[int, dict[str, Any]] = {}
    for rows in runs:
        for row in rows:
            size = int(row["bytes"])
            if size not in best or row["busbw_GBps"] > best[size]["busbw_GBps"]:
                best[size] = dict(row)
    return [best[s] for s in sorted(best)]


def sweep_ratios(
    num: Sequence[Row], den: Sequence[Row], key: str = "busbw_GBps"
) -> dict[int, float | None]:
    """``num[key] / den[key]`` at every size both sweeps measured."""
    a, b = by_size(num), by_size(den)
    return {s: ratio(a[s][key], b[s][key]) for s in sorted(a.keys() & b.keys())}


def at_size(rows: Sequence[Row], size: int, key: str = "busbw_GBps") -> float | None:
    row = by_size(rows).get(size)
    return None if row is None else float(row[key])


def largest_common(*sweeps: Sequence[Row]) -> int | None:
    """The largest message size every sweep measured."""
    common: set[int] | None = None
    for rows in sweeps:
        sizes = set(by_size(rows))
        common = sizes if common is None else common & sizes
    return max(common) if common else None


# -- the report model ------------------------------------------------------------------------
@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""

    def markdown(self) -> str:
        return markdown_table(self.headers, self.rows)


@dataclass
class Headline:
    """One line of the headline table: what, the measured values, and the ratio that matters.

    With a ``goal`` (``">= 1.5"``, ``"<= 1.0"``, ``"< 4"``) and the ``value`` it applies to, the
    line is also a target: the report's targets table says whether this run met it. ``note``
    says what a reader must know to judge the row (why a target is not measured, what it ran on);
    the targets table prints it under the table. ``informational``: why this machine cannot
    judge the goal; such a row leaves the targets table for the informational one (its number
    is still measured and shown, not counted as met or missed).
    """

    measure: str
    values: str
    ratio: str
    goal: str = ""
    value: float | None = None
    note: str = ""
    informational: str = ""

    @property
    def met(self) -> bool | None:
        return goal_met(self.goal, self.value) if self.goal and not self.informational else None


_GOAL_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def goal_met(goal: str, value: float | None) -> bool | None:
    """Whether ``value`` meets ``goal`` (``">= 1.2"``); None when there is no value."""
    op, _, bound = goal.strip().partition(" ")
    if op not in _GOAL_OPS:
        raise ValueError(f"bad goal {goal!r}: want '<op> <number>' with op in {list(_GOAL_OPS)}")
    if value is None or not math.isfinite(value):
        return None
    return bool(_GOAL_OPS[op](value, float(bound)))


@dataclass
class Section:
    key: str
    title: str
    seconds: float = 0.0
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    headline: list[Headline] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class BenchReport:
    meta: dict[str, Any]
    sections: list[Section] = field(default_factory=list)

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)

    @property
    def headline(self) -> list[Headline]:
        return [h for s in self.sections for h in s.headline]

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "sections": [asdict(s) for s in self.sections]}


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; ``|`` inside cells is escaped; first column left, rest right."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in headers) + " |"]
    out.append("|" + "|".join([":---"] + ["---:"] * (len(headers) - 1)) + "|")
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns")
        out.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(out) + "\n"


_BANDWIDTH = ("busbw", "bandwidth")  # more is better, whatever else the measure names
_COST = r"(?<![-\w])(time|size|mpi_init|rebuild)\b"  # less is better
_RATE = ("allreduce", "physical limit")  # otherwise: a bandwidth comparison
_SUBJECTS = ("hpcenv", "daal4py")  # the side a reader is judging, when a ratio names it


def better_direction(measure: str) -> str:
    """Which way a headline ratio ``X / Y`` is better, in words: ``higher = hpcenv better``.

    The quantity decides the sign (time and size: less is better; bandwidth: more), the side
    the subject is on flips it: the subject is hpcenv or daal4py where named, else ``X``.
    """
    import re

    if " / " not in measure:
        return ""
    left, right = measure.rsplit(" / ", 1)
    low = measure.lower()
    cost = not any(w in low for w in _BANDWIDTH) and re.search(_COST, low) is not None
    if not cost and not any(w in low for w in (*_BANDWIDTH, *_RATE)):
        return ""
    left_plain = re.sub(r"\([^)]*\)", "", left).split(": ")[-1]
    subject = next((s for s in _SUBJECTS if s in right.lower()), None)
    on_left = subject is None
    if subject is None:
        subject = next((s for s in _SUBJECTS if s in left_plain.lower()), None)
    if subject is None:
        parts = [p.strip() for p in left_plain.split(",") if p.strip()]
        named = [p for p in parts if not re.search(_COST + r"|busbw|geomean", p.lower())]
        subject = (named or parts or [left_plain])[-1]
    higher = (not cost) == on_left
    return f"{'higher' if higher else 'lower'} = {subject} better"


def targets_table(report: BenchReport) -> str:
    """Every headline with a goal: the goal, the value this run measured, met or missed; the
    rows' notes (numbered) below the table."""
    rows, notes = [], []
    for h in report.headline:
        if not h.goal or h.informational:
            continue
        met = h.met
        mark = ""
        if h.note:
            notes.append(h.note)
            mark = f" [{len(notes)}]"
        rows.append(
            [
                h.measure + mark,
                h.goal,
                fmt_num(h.value),
                "met" if met else "MISSED" if met is False else "not measured",
            ]
        )
    if not rows:
        return ""
    table = markdown_table(["target", "goal", "this run", "result"], rows)
    return table + "".join(f"\n[{i}] {note}\n" for i, note in enumerate(notes, 1))


def informational_table(report: BenchReport) -> str:
    """The rows whose goal this machine cannot judge: the goal, this run's value, and why."""
    rows = [
        [h.measure, h.goal, fmt_num(h.value), h.informational]
        for h in report.headline
        if h.goal and h.informational
    ]
    if not rows:
        return ""
    return markdown_table(["measure", "goal elsewhere", "this run", "why not judged here"], rows)


def headline_table(report: BenchReport) -> str:
    rows = [
        [h.measure, h.values or h.note, h.ratio, better_direction(h.measure) if h.ratio else ""]
        for h in report.headline
    ]
    return markdown_table(["measure", "measured (same run)", "ratio", "better"], rows)


def render_markdown(report: BenchReport) -> str:
    meta = report.meta
    lines = [f"# hpcenv benchmarks ({meta.get('date', '?')})", ""]
    lines.append(
        f"Machine: {meta.get('machine', '?')}. Image: `{meta.get('image', '?')}`"
        f"{' (' + meta['image_id'] + ')' if meta.get('image_id') else ''}. "
        f"Mode: {'--quick (the headline ratios)' if meta.get('quick') else 'full'}; "
        f"total {meta.get('seconds', 0):.0f} s."
    )
    lines.append("")
    lines.append(
        "Every number below comes from this one run; the machine is shared and noisy, so the "
        "ratios (taken between measurements interleaved in the same run) are the result, the "
        "absolute numbers are context."
    )
    for note in meta.get("notes", []):
        lines += ["", f"- {note}"]
    targets = targets_table(report)
    if targets:
        lines += [
            "",
            "## Targets",
            "",
            "The goals of the benchmark rows (issues 12 and 21), checked against this run's "
            "numbers.",
            "",
            targets.rstrip(),
        ]
    info = informational_table(report)
    if info:
        lines += [
            "",
            "## Informational: goals this machine cannot judge",
            "",
            "Measured and shown, not counted as met or missed (issue 39 retired them from the "
            "targets): each row says why.",
            "",
            info.rstrip(),
        ]
    lines += ["", "## Headline", "", headline_table(report)]
    for section in report.sections:
        lines += [f"## {section.title}", "", f"_{section.seconds:.0f} s_", ""]
        if section.error:
            lines += [f"**Section failed:** {section.error}", ""]
        for para in section.text:
            lines += [para, ""]
        for table in section.tables:
            if table.title:
                lines += [f"**{table.title}**", ""]
            lines.append(table.markdown())
            if table.note:
                lines += [table.note, ""]
        for plot in section.plots:
            lines += [f"![{Path(plot).stem}]({plot})", ""]
    return "\n".join(lines).rstrip() + "\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | tuple):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_report(report: BenchReport, out: Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.json`` into ``out``; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / REPORT_MD, out / REPORT_JSON
    md.write_text(render_markdown(report), encoding="utf-8")
    js.write_text(
        json.dumps(report.to_json(), indent=2, sort_keys=True, default=_json_default) + "\n",
        encoding="utf-8",
    )
    return md, js


# -- plots -----------------------------------------------------------------------------------
def plot_bars(values: Mapping[str, float], path: Path, *, title: str, xlabel: str) -> Path | None:
    """Horizontal bars (e.g. MNIST step time per launch variant); None without data."""
    values = {k: v for k, v in values.items() if v is not None and math.isfinite(v)}
    if not values:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.45 * len(values) + 1.2), constrained_layout=True)
    names = list(values)
    ax.barh(names, [values[n] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def readme_section(report: BenchReport, report_link: str = "docs/bench-latest.md") -> str:
    """The README's "Benchmarks" section: how to run, date, machine, the headline table."""
    meta = report.meta
    return (
        "## Benchmarks\n\n"
        "`make bench` (or `hpcenv bench --site local --out results/bench [--quick]`) measures, in "
        "one run, the container tax on allreduce (bare host vs image), Horovod/gloo vs raw MPI, "
        "the memory-copy ceiling, hpcenv's launch tuning vs a naive launch, daal4py vs "
        "scikit-learn K-Means, build cost vs a naive single-stage and an hpccm build, and CLI "
        "speed. It writes `results/bench/report.md` (tables with ratios), `report.json` and PNG "
        f"plots. Latest full report: [{report_link}]({report_link}).\n\n"
        f"Latest run: {meta.get('date', '?')} on {meta.get('machine', '?')} (shared and noisy: "
        f"read the ratios, taken in the same run), image `{meta.get('image', '?')}`, "
        f"{meta.get('seconds', 0) / 60:.1f} min in total.\n\n" + headline_table(report)
    )


def report_from_json(doc: Mapping[str, Any]) -> BenchReport:
    """A BenchReport back from its ``report.json`` (the inverse of ``to_json``)."""
    sections = []
    for s in doc.get("sections", []):
        s = dict(s)
        s["tables"] = [Table(**t) for t in s.get("tables", [])]
        s["headline"] = [Headline(**h) for h in s.get("headline", [])]
        sections.append(Section(**s))
    return BenchReport(dict(doc.get("meta", {})), sections)


def publish(results: Path, docs: Path, name: str = "bench-latest") -> Path:
    """Copy a finished report into the docs: ``docs/NAME.md`` + ``docs/NAME/`` (plots, files).

    Links to plots are rewritten to the folder; the Dockerfiles and rules file the report names
    go along, so the page stays true on its own.
    """
    import re
    import shutil

    folder = docs / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for item in sorted(results.iterdir()):
        if item.is_file() and item.suffix in (".png", ".Dockerfile", ".conf", ".rules", ".json"):
            shutil.copy2(item, folder / item.name)
    text = (results / REPORT_MD).read_text(encoding="utf-8")
    text = re.sub(r"\]\(([^)/]+\.png)\)", rf"]({name}/\1)", text)
    page = docs / f"{name}.md"
    page.write_text(text, encoding="utf-8")
    return page


if __name__ == "__main__":
    # python -m hpcenv.bench.report readme results/bench   -> the README section on stdout
    # python -m hpcenv.bench.report publish results/bench docs
    import sys

    cmd, results = sys.argv[1], Path(sys.argv[2])
    report = report_from_json(json.loads((results / REPORT_JSON).read_text(encoding="utf-8")))
    if cmd == "readme":
        print(readme_section(report), end="")
    elif cmd == "publish":
        print(publish(results, Path(sys.argv[3])))
    else:
        raise SystemExit(f"unknown command {cmd!r}: readme RESULTS | publish RESULTS DOCS")
