"""The smoke report: per-test outcome and numbers, as JSON, a rich table and a bandwidth plot."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

PLOT_NAME = "allreduce_bandwidth.png"
REPORT_NAME = "report.json"
# Metrics that are context rather than headline numbers in the summary table.
_NOT_KEY = {"command", "flavor", "import_error", "wall_seconds"}


@dataclass(frozen=True)
class TestResult:
    """One smoke test: its outcome (passed/failed/skipped/error), time, message and metrics."""

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    outcome: str
    duration: float
    metrics: dict[str, Any] = field(default_factory=dict)
    message: str | None = None

    @property
    def name(self) -> str:
        return self.nodeid.split("::", 1)[-1]


@dataclass
class SmokeReport:
    """A finished smoke run against one target."""

    image: str
    backend: str
    host: str
    started: str
    seconds: float
    pytest_exit_code: int
    tests: list[TestResult]
    results_dir: Path
    files: dict[str, str] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)
    references: list[dict[str, Any]] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(t.outcome for t in self.tests))

    @property
    def ok(self) -> bool:
        """No test failed or errored, and pytest itself finished normally."""
        return self.pytest_exit_code == 0 and not any(
            t.outcome in ("failed", "error", "unknown") for t in self.tests
        )

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["results_dir"] = str(self.results_dir)
        doc["counts"] = self.counts
        doc["ok"] = self.ok
        return doc


def load_results(path: Path) -> list[TestResult]:
    """The per-test entries the smoke suite's ``--smoke-json`` wrote."""
    raw = json.loads(Path(path).read_text())
    return [
        TestResult(
            nodeid=t["nodeid"],
            outcome=t["outcome"],
            duration=float(t["duration"]),
            metrics=dict(t.get("metrics") or {}),
            message=t.get("message"),
        )
        for t in raw["tests"]
    ]


def write_report(report: SmokeReport, path: Path | None = None) -> Path:
    """Write ``report.json`` (default: in the report's results folder)."""
    path = path or report.results_dir / REPORT_NAME
    path.write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
    return path


def allreduce_series(tests: list[TestResult]) -> dict[str, list[dict[str, float]]]:
    """Sweeps recorded by the allreduce tests (metrics ``flavor`` + ``sweep``), by flavour."""
    series: dict[str, list[dict[str, float]]] = {}
    for test in tests:
        sweep, flavor = test.metrics.get("sweep"), test.metrics.get("flavor")
        if flavor and isinstance(sweep, list) and sweep:
            series[str(flavor)] = sorted(sweep, key=lambda row: row["bytes"])
    return series


def plot_allreduce(
    tests: list[TestResult], path: Path, title: str = "", *, image: str = "", ranks: int = 2
) -> Path | None:
    """Bus bandwidth and time per op vs message size for every flavour; None without data."""
    from hpcenv.plots import machine_caption, plot_sweeps

    caption = f"{machine_caption()}; {ranks} ranks, one node" + (
        f"; image {image}" if image else ""
    )
    return plot_sweeps(
        allreduce_series(tests), path, title=title or f"allreduce, {ranks} ranks", caption=caption
    )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6) and math.isfinite(value):
            return f"{value:.2e}"
        return f"{value:.4g}"
    return str(value)


def key_numbers(test: TestResult) -> str:
    """The scalar metrics of a test as ``name=value`` pairs (lists and context left out)."""
    return ", ".join(
        f"{k}={_fmt(v)}"
        for k, v in test.metrics.items()
        if k not in _NOT_KEY and isinstance(v, int | float | str) and len(_fmt(v)) <= 40
    )


def summary_table(report: SmokeReport) -> Table:
    """A rich table: test, outcome, seconds and key numbers (or the skip/failure reason)."""
    from rich.markup import escape
    from rich.table import Table

    styles = {"passed": "green", "failed": "red", "error": "red", "skipped": "yellow"}
    counts = ", ".join(f"{n} {o}" for o, n in sorted(report.counts.items()))
    table = Table(title=f"smoke {report.image} ({report.seconds:.0f} s: {counts})")
    table.add_column("test")
    table.add_column("outcome")
    table.add_column("s", justify="right")
    table.add_column("numbers / reason", overflow="fold")
    for test in report.tests:
        detail = key_numbers(test)
        if test.outcome != "passed" and test.message:
            reason = test.message.strip().splitlines()[0]
            detail = f"{reason}; {detail}" if detail else reason
        style = styles.get(test.outcome, "")
        table.add_row(
            escape(test.name),
            f"[{style}]{test.outcome}[/]" if style else test.outcome,
            f"{test.duration:.1f}",
            escape(detail),
        )
    return table


def references_table(report: SmokeReport) -> Table | None:
    """Figures vs the site's references and vs the history median; None without figures."""
    if not report.references:
        return None
    from rich.markup import escape
    from rich.table import Table

    styles = {
        "regression": "red",
        "improvement": "green",
        "pass": "green",
        "inconclusive": "yellow",
    }
    table = Table(title="performance: references and history")
    columns = ("figure", "value", "reference (bounds)", "verdict", "history median", "vs history")
    for col in (*columns, "ranks' CPU"):
        table.add_column(col, overflow="fold")
    for v in report.references:
        bounds = v["bounds"]
        ref = (
            f"{_fmt(v['reference'])} ({_fmt(bounds[0])}..{_fmt(bounds[1])})"
            if v["reference"] is not None and bounds
            else ""
        )
        hist = (
            ""
            if v["history_median"] is None
            else f"{_fmt(v['history_median'])} ({v['history_runs']} runs)"
        )
        verdict, hv = v["verdict"], v["history_verdict"]
        table.add_row(
            escape(v["figure"]),
            f"{_fmt(v['value'])} {v['unit']}",
            ref,
            f"[{styles[verdict]}]{verdict}[/]" if verdict in styles else verdict,
            hist,
            f"[{styles[hv]}]{hv}[/]" if hv in styles else hv,
            escape(v.get("reason") or cpu_text(v.get("load"))),
        )
    return table


def cpu_text(load: Any) -> str:
    """The CPU a figure's ranks got, short: worst rank's run-queue wait per CPU second and the
    share of the time with CPU pressure (hpcenv.smoke.load.summary)."""
    if not isinstance(load, dict):
        return ""
    parts = []
    if isinstance(load.get("wait_per_run_max"), int | float):
        parts.append(f"wait/run {load['wait_per_run_max']:.2f}")
    if isinstance(load.get("psi_some"), int | float):
        parts.append(f"pressure {load['psi_some']:.0%}")
    return ", ".join(parts)
