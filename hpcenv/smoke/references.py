"""Performance references for the smoke suite's figures, ReFrame-style, and their history.

A site may carry ``references:`` (``hpcenv.site.Reference``: value, lower/upper bounds as
fractions of the value, unit, and whether higher or lower is better). After a smoke run each
figure (:func:`figures`) is compared with its reference and with the median of the earlier runs
of the same image and backend kept in ``<results parent>/smoke-history/<slug>.jsonl``; each
comparison is ``pass``, ``regression`` or ``improvement`` (``no reference`` / ``no history``
when there is nothing to compare with). ``hpcenv smoke --check-references`` exits 1 when a
figure regresses beyond its reference's tolerance.

Two kinds of figure. Absolute ones (GB/s, us, ms) are kept for the history; on a shared 2-core
machine they move 3x between a quiet and a busy hour, so a reference on them must be so wide that
only a 5-10x breakage fails. Ratios to a baseline measured in the same run (unit ``x``) cancel
most of that load, and are what site references should hold (issue 21):

* ``allreduce.mpi4py.busbw_per_copy``: bus bandwidth at 64 MiB over the bandwidth of every rank
  copying the same buffer at the same time, timed loops interleaved (``copy_baseline`` of
  ``allreduce_mpi.py``): the physical ceiling taken by the same ranks under the same load;
* ``allreduce.F.busbw_64MiB_per_memcopy``: bus bandwidth at 64 MiB over one core's memory copy
  bandwidth measured right before the sweep (outside the launcher). Measured here it did not
  cancel load: a busy hour slows two synchronised ranks far more than one copying core;
* ``allreduce.F.busbw_64MiB_per_mpi4py``: a flavour over mpi4py at the same size, like for like;
* ``mnist_horovod.step_per_compute``: a training step over the same step with no Horovod, timed
  on all ranks at once in the same job (what communication costs);
* ``kmeans.sklearn_per_batch`` / ``kmeans.sklearn_per_spmd``: stock scikit-learn's time per
  iteration over daal4py's, same data and centroids in the same process.

A 2x slowdown of the measured thing halves the higher-is-better ratios and doubles the
lower-is-better one (more than doubles it where communication is only part of the step).

Verdicts that know when they cannot judge (issue 40): two ranks that must run at the same time
suffer from a shared CPU far more than their same-run baseline, so on a busy machine a ratio can
leave its band with nothing wrong in the image. Every figure carries the CPU its ranks got
(:mod:`hpcenv.smoke.load`); a figure outside its band on the bad side while the ranks were
starved is ``inconclusive`` with the measured reason, not a ``regression``. It is run again like
a regression (:func:`run_confirmed`) and never fails the run; a figure inside its band passes
whatever the load, and one outside it with the ranks given their cores regresses as before.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hpcenv.reads import json_lines
from hpcenv.smoke.load import starved
from hpcenv.smoke.report import SmokeReport, TestResult

HISTORY_KEEP = 10  # compare with the median of the last N runs
# Without a reference, history verdicts use these bounds (fractions of the median).
HISTORY_LOWER, HISTORY_UPPER = -0.5, 1.0
MiB = 1 << 20
RATIO_UNIT = "x"  # a figure over a baseline measured in the same run


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    better: str  # "higher" or "lower"
    cpu: Mapping[str, Any] | None = None  # what the ranks got (hpcenv.smoke.load.summary)


@dataclass(frozen=True)
class Verdict:
    figure: str
    value: float
    unit: str
    reference: float | None
    bounds: tuple[float, float] | None
    verdict: str
    history_median: float | None
    history_runs: int
    history_verdict: str
    load: Mapping[str, Any] | None = None  # the CPU the ranks got while measuring it
    reason: str | None = None  # why an out-of-band figure is inconclusive

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _at(sweep: list[dict[str, Any]], size: int, key: str) -> float | None:
    for row in sweep:
        if int(row["bytes"]) == size:
            return float(row[key])
    return None


def _ratio(num: Any, den: Any) -> float | None:
    if num is None or den is None or float(den) <= 0:
        return None
    return round(float(num) / float(den), 4)


def _add_ratio(out: dict[str, Figure], name: str, value: float | None, better: str) -> None:
    if value is not None:
        out[name] = Figure(value, RATIO_UNIT, better)


def figures(tests: Iterable[TestResult]) -> dict[str, Figure]:
    """The figures a smoke run measured (passed tests only), by stable name: absolute ones and
    the same-run ratios (unit ``x``) computed from them."""
    out: dict[str, Figure] = {}
    big: dict[str, float] = {}  # flavour -> busbw at 64 MiB
    for test in tests:
        if test.outcome != "passed":
            continue
        m = test.metrics
        mine = _figures_of(m, big)
        cpu = m.get("cpu") if isinstance(m.get("cpu"), Mapping) else None
        out.update({k: replace(f, cpu=cpu) for k, f in mine.items()})
    if "mpi4py" in big:
        for flavor, bw in big.items():
            if flavor != "mpi4py":
                per_mpi = _ratio(bw, big["mpi4py"])
                _add_ratio(out, f"allreduce.{flavor}.busbw_64MiB_per_mpi4py", per_mpi, "higher")
    return out


def _figures_of(m: Mapping[str, Any], big: dict[str, float]) -> dict[str, Figure]:
    """The figures of one test's metrics; each flavour's 64 MiB busbw also goes into ``big``."""
    out: dict[str, Figure] = {}
    flavor, sweep = m.get("flavor"), m.get("sweep")
    if flavor and isinstance(sweep, list):
        for size, label in ((64 * MiB, "64MiB"), (512 << 10, "512KiB")):
            bw = _at(sweep, size, "busbw_GBps")
            if bw is not None:
                out[f"allreduce.{flavor}.busbw_{label}"] = Figure(bw, "GB/s", "higher")
        bw64 = _at(sweep, 64 * MiB, "busbw_GBps")
        if bw64 is not None:
            big[flavor] = bw64
            per_copy = _ratio(bw64, m.get("memcopy_GBps"))
            _add_ratio(out, f"allreduce.{flavor}.busbw_64MiB_per_memcopy", per_copy, "higher")
        base = m.get("copy_baseline")
        if isinstance(base, dict):
            per = _ratio(base.get("busbw_GBps"), base.get("copy_GBps"))
            _add_ratio(out, f"allreduce.{flavor}.busbw_per_copy", per, "higher")
        lat = _at(sweep, 8, "time_us")
        if lat is not None:
            out[f"allreduce.{flavor}.time_8B"] = Figure(lat, "us", "lower")
    if "step_ms" in m:
        out["mnist_horovod.step_ms"] = Figure(float(m["step_ms"]), "ms", "lower")
        per_compute = _ratio(m["step_ms"], m.get("compute_step_ms"))
        _add_ratio(out, "mnist_horovod.step_per_compute", per_compute, "lower")
    if "step_ms_ccl" in m:
        out["mnist_horovod_ccl.step_ms"] = Figure(float(m["step_ms_ccl"]), "ms", "lower")
        per_compute = _ratio(m["step_ms_ccl"], m.get("compute_step_ms_ccl"))
        _add_ratio(out, "mnist_horovod_ccl.step_per_compute", per_compute, "lower")
    for key in ("spmd_ms_per_iteration", "batch_ms_per_iteration"):
        if key in m:
            out[f"kmeans.{key}"] = Figure(float(m[key]), "ms", "lower")
    skl = m.get("sklearn_ms_per_iteration")
    for key, name in (("batch", "sklearn_per_batch"), ("spmd", "sklearn_per_spmd")):
        daal = m.get(f"{key}_ms_per_iteration")
        _add_ratio(out, f"kmeans.{name}", _ratio(skl, daal), "higher")
    return out


# The smoke test behind each figure, by the figure's first name part (``kmeans.x`` -> kmeans).
FIGURE_TESTS = {
    "allreduce": "test_allreduce",
    "mnist_horovod": "(test_mnist_horovod and not ccl)",
    "mnist_horovod_ccl": "test_mnist_horovod_ccl",
    "kmeans": "test_kmeans_daal4py",
}


def _tests_behind(name: str) -> set[str]:
    """An allreduce figure names its flavour (``allreduce.mpi4py.x``): only that flavour's test
    runs again (a ``_per_mpi4py`` ratio also needs mpi4py's); others map by their first part."""
    head, _, rest = name.partition(".")
    flavor = rest.split(".", 1)[0]
    if head != "allreduce" or not flavor:
        return {FIGURE_TESTS[head]}
    out = {f"({FIGURE_TESTS[head]} and {flavor})"}
    if name.endswith("_per_mpi4py"):
        out.add(f"({FIGURE_TESTS[head]} and mpi4py)")
    return out


def checks_behind(names: Iterable[str]) -> str:
    """A pytest ``-k`` expression selecting the smoke tests that produce these figures."""
    picked = sorted(set().union(*(_tests_behind(n) for n in names)))
    if not picked:
        raise ValueError("no figures named")
    return " or ".join(picked)


def regressed(verdicts: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The verdicts (``Verdict.to_dict()``) that regress beyond their reference, by figure."""
    return {v["figure"]: v for v in verdicts if v["verdict"] == "regression"}


def unsettled(verdicts: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The verdicts outside their band on the bad side: regressions and inconclusive ones."""
    return {v["figure"]: v for v in verdicts if v["verdict"] in ("regression", "inconclusive")}


@dataclass
class Confirmed:
    """Every report of a ``--check-references`` run and what its figures came to: ``failed``
    regressed in every run that could judge them (at least one: starved runs neither confirm
    nor clear); ``inconclusive`` were outside their band in every run and starved in all
    (the latest verdict, with its measured reason)."""

    reports: list[SmokeReport]
    failed: dict[str, Mapping[str, Any]]
    inconclusive: dict[str, Mapping[str, Any]]


def run_confirmed(
    run: Callable[[Path, str | None], SmokeReport],
    results: Path,
    select: str | None,
    retries: int,
    note: Callable[[str], None],
) -> Confirmed:
    """``run(results, select)``, then up to ``retries`` runs of only the checks behind its
    regressed or inconclusive figures (ReFrame's ``--max-retries``), each beside ``results`` so
    that they share its history. A figure that comes back inside its band in any run passes."""
    reports = [run(results, select)]
    pending = unsettled(reports[-1].references)
    for attempt in range(1, retries + 1):
        if not pending or not reports[-1].ok:
            break
        again = checks_behind(pending)
        kinds = " or ".join(sorted({v["verdict"] for v in pending.values()}))
        note(
            f"{', '.join(pending)} {kinds}; running {again} again to confirm "
            f"(retry {attempt} of {retries})"
        )
        reports.append(run(results.with_name(f"{results.name}-retry-{attempt}"), again))
        latest = unsettled(reports[-1].references)
        pending = {k: _later(v, latest[k]) for k, v in pending.items() if k in latest}
    failed = {k: v for k, v in pending.items() if v["verdict"] == "regression"}
    inconclusive = {k: v for k, v in pending.items() if v["verdict"] == "inconclusive"}
    return Confirmed(reports, failed, inconclusive)


def _later(before: Mapping[str, Any], now: Mapping[str, Any]) -> Mapping[str, Any]:
    """A figure's standing after another unsettled run: a starved run keeps the judged
    regression before it; otherwise the latest verdict stands."""
    if now["verdict"] == "inconclusive" and before["verdict"] == "regression":
        return before
    return now


def outcome_lines(confirmed: Confirmed) -> list[str]:
    """One line per figure that failed (``regression: ...``) or could not be judged
    (``inconclusive: ... ; <measured reason>``)."""
    lines = []
    for word, found in (("regression", confirmed.failed), ("inconclusive", confirmed.inconclusive)):
        for v in found.values():
            line = f"{word}: {v['figure']} = {v['value']:.4g} {v['unit']}"
            if v.get("bounds"):
                line += f", outside {v['bounds'][0]:.4g}..{v['bounds'][1]:.4g}"
            if word == "inconclusive" and v.get("reason"):
                line += f"; {v['reason']}"
            lines.append(line)
    return lines


def judge(value: float, ref: float, lower: float, upper: float | None, better: str) -> str:
    """ReFrame's rule: inside ``[ref*(1+lower), ref*(1+upper)]`` passes; outside on the bad
    side is a regression, on the good side an improvement."""
    lo = ref * (1 + lower)
    hi = ref * (1 + upper) if upper is not None else float("inf")
    if better == "higher":
        return "regression" if value < lo else "improvement" if value > hi else "pass"
    return "regression" if value > hi else "improvement" if value < lo else "pass"


def history_path(results_dir: Path, slug: str) -> Path:
    return results_dir.parent / "smoke-history" / f"{slug}.jsonl"


def read_history(path: Path) -> list[dict[str, Any]]:
    docs = json_lines(path, lambda d: isinstance(d, dict) and isinstance(d.get("figures"), dict))
    return docs[-HISTORY_KEEP:]


def append_history(path: Path, entry: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def compare(
    figs: Mapping[str, Figure], references: Mapping[str, Any], history: list[dict[str, Any]]
) -> list[Verdict]:
    """One verdict per figure: against the site's reference and against the history median."""
    out = []
    for name, fig in sorted(figs.items()):
        ref = references.get(name)
        verdict, bounds, value_ref, reason = "no reference", None, None, None
        if ref is not None:
            value_ref = float(ref.value)
            verdict = judge(fig.value, value_ref, ref.lower, ref.upper, ref.better)
            if verdict == "regression":
                reason = starved(fig.cpu)
                verdict = "inconclusive" if reason else verdict
            hi = value_ref * (1 + ref.upper) if ref.upper is not None else float("inf")
            bounds = (value_ref * (1 + ref.lower), hi)
        past = [float(h["figures"][name]) for h in history if name in h["figures"]]
        median = statistics.median(past) if past else None
        if median is None:
            hist = "no history"
        else:
            lower = ref.lower if ref is not None else HISTORY_LOWER
            upper = ref.upper if ref is not None and ref.upper is not None else HISTORY_UPPER
            hist = judge(fig.value, median, lower, upper, fig.better)
        out.append(
            Verdict(
                name,
                fig.value,
                fig.unit,
                value_ref,
                bounds,
                verdict,
                median,
                len(past),
                hist,
                fig.cpu,
                reason,
            )
        )
    return out
