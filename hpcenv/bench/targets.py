"""Section ``targets``: issue 21's goals that one bench run cannot measure, kept in the Targets
table with their goal, "not measured" and why, so a missing measurement shows instead of
vanishing.

* The collective floor over three runs: the tuning section's floor ("no size where hpcenv's
  default launch is consistently slower than naive by more than 5 %") must hold in three full
  runs, not one lucky one. Each full run's verdict (the sizes it found consistently slower) is
  appended to a small history in hpcenv's cache (``bench/floor-history-SITE.jsonl``); the row
  judges the last three of the same image tag, measured tuning and kind of run (a full run's 16
  rounds or ``--quick``'s 8: the rounds decide how likely noise flags a size, so a full run is
  judged with full runs, as issue 39 asks, and a quick run with quick runs), and says how many are
  recorded until there are three.
* Set-up time on a fresh machine: not measurable in a run of this bench (it runs on a machine
  already set up). ``scripts/fresh-setup-time.sh`` measures it (README's two commands on a fresh
  clone with an empty podman storage and cache) and appends the result to
  ``bench/setup-history.jsonl`` in hpcenv's cache; the row reports the latest record, or says
  why there is none.
* The public training benchmark: measured by the ``training`` section
  (:mod:`hpcenv.bench.training`); when it did not run in this bench run (or failed), its row
  stays here as "not measured".

The goals of the two unmeasured rows are issue 21's (one place to change each).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hpcenv.bench.context import BenchContext
from hpcenv.bench.report import Headline, Section, fmt_bytes, fmt_num
from hpcenv.reads import json_lines
from hpcenv.safe import CONTROL

FLOOR_RUNS = 3
FLOOR_GOAL = "<= 0"  # no size consistently slower in any of the three runs
HISTORY_KEEP = 20  # entries kept per file (the row reads the last FLOOR_RUNS)
# Issue 21's goals: "Fresh machine: `make smoke-test` + `make test` in <= 35 min together";
# "hpcenv >= 1.2x naive and never slower than the project's documented launch" (samples/s).
SETUP_GOAL = "<= 2100"
# "Goal: geomean >= 1.5x over the 13 sizes on two machine kinds, never below the floor"
COLLECTIVES_GOAL = ">= 1.5"
TRAINING_GOAL = ">= 1.2"  # hpcenv default / naive launch
DOCUMENTED_GOAL = ">= 1.0"  # hpcenv default / the project's documented launch


def _history(name: str) -> Path:
    from hpcenv.paths import cache_dir

    return cache_dir() / "bench" / name


def floor_history_path(site: str) -> Path:
    return _history(f"floor-history-{site}.jsonl")


def setup_history_path() -> Path:
    """Where ``scripts/fresh-setup-time.sh`` appends its results."""
    return _history("setup-history.jsonl")


_SETUP_INTS = ("smoke_test_s", "smoke_test_rc", "test_s", "test_rc")
_COMMIT = re.compile(r"[0-9a-f]{4,40}")


def read_setup_history(path: Path) -> list[dict[str, Any]]:
    """The script's records, oldest first; a line with a missing or non-integer time or exit
    code, or a negative time, is skipped (a torn or hand-edited line), the rest kept."""

    def keep(doc: Any) -> bool:
        return (
            isinstance(doc, dict)
            and all(type(doc.get(k)) is int for k in _SETUP_INTS)
            and doc["smoke_test_s"] >= 0
            and doc["test_s"] >= 0
        )

    return json_lines(path, keep)


def _plain(value: Any, limit: int = 120) -> str:
    """A string from the history as one line of report text: no control characters, capped."""
    text = str(value) if value is not None else "?"
    return CONTROL.sub(" ", text)[:limit] or "?"


def read_history(path: Path) -> list[dict[str, Any]]:
    """The recorded runs, oldest first; unreadable lines are skipped (a torn write)."""
    return json_lines(path, lambda d: isinstance(d, dict) and isinstance(d.get("losses"), list))


def append_history(path: Path, entry: Mapping[str, Any]) -> None:
    """Append one run's floor verdict, keeping the last :data:`HISTORY_KEEP`."""
    kept = [*read_history(path), dict(entry)][-HISTORY_KEEP:]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in kept), encoding="utf-8")
    tmp.replace(path)


def run_kind(entry: Mapping[str, Any]) -> str:
    """The kind of run a history entry records, the floor being judged within one kind: full or
    quick, with its rounds of full sweeps and of short latency-bound launches."""
    name = "quick" if entry.get("quick") else "full"
    latency = entry.get("latency_rounds")
    short = f" + {latency} short" if latency else ""
    return f"{name} ({entry.get('rounds', '?')} rounds{short})"


def floor_over_runs(entries: Sequence[Mapping[str, Any]], where: str, kind: str = "") -> Headline:
    """The floor target over the last :data:`FLOOR_RUNS` recorded runs (of one ``kind``): the
    number of sizes consistently slower in any of them (goal: none); not measured until there
    are three."""
    last = list(entries)[-FLOOR_RUNS:]
    runs = f"{kind} bench runs" if kind else "bench runs"
    measure = (
        f"Tuning floor over the last {FLOOR_RUNS} {runs}: sizes where hpcenv default is "
        "consistently slower than naive by more than 5 % in any of them (goal: none)"
    )
    if len(last) < FLOOR_RUNS:
        return Headline(
            measure,
            "",
            "",
            FLOOR_GOAL,
            None,
            f"Floor over {FLOOR_RUNS} runs not measured: {len(last)} run(s) of this image and "
            f"kind recorded so far in {where} with the measured tuning in force (each run with "
            "the tuning section adds one; `make bench` and `hpcenv bench --quick` count apart).",
        )
    lost = sorted({int(s) for e in last for s in e["losses"]})
    per_run = "; ".join(
        f"{e.get('date', '?')}: " + (", ".join(fmt_bytes(int(s)) for s in e["losses"]) or "none")
        for e in last
    )
    return Headline(
        measure,
        ", ".join(fmt_bytes(s) for s in lost) or "none",
        str(len(lost)),
        FLOOR_GOAL,
        float(len(lost)),
        f"Floor over {FLOOR_RUNS} runs, from {where}: {per_run}.",
    )


SETUP_MEASURE = "Set-up time on a fresh machine: `make smoke-test` + `make test`, seconds"


def setup_time_row(entries: Sequence[Mapping[str, Any]], where: str) -> Headline:
    """The set-up target from the latest record of ``scripts/fresh-setup-time.sh``; not measured
    when there is none, or when that run failed (a failed run's time says nothing)."""
    if not entries:
        return Headline(
            SETUP_MEASURE,
            "",
            "",
            SETUP_GOAL,
            None,
            "Set-up time not measured: it needs a fresh machine (no podman storage, no hpcenv "
            "cache, no base image), and this bench runs on one already set up; "
            "scripts/fresh-setup-time.sh measures it (a fresh clone, an empty podman storage and "
            "cache) and records it for this row.",
        )
    last = entries[-1]
    commit = _plain(last.get("commit"), 40)
    run = f"scripts/fresh-setup-time.sh on {_plain(last.get('date'), 40)} at commit " + (
        commit if _COMMIT.fullmatch(commit) else "?"
    )
    if last["smoke_test_rc"] != 0 or last["test_rc"] != 0:
        return Headline(
            SETUP_MEASURE,
            "",
            "",
            SETUP_GOAL,
            None,
            f"Set-up time not measured: the latest run ({run}, in {where}) failed: make "
            f"smoke-test exit {last['smoke_test_rc']}, make test "
            + (f"exit {last['test_rc']}" if last["test_rc"] >= 0 else "not run")
            + "; its logs are in the script's work folder.",
        )
    smoke, test = last["smoke_test_s"], last["test_s"]
    return Headline(
        SETUP_MEASURE,
        f"smoke-test {fmt_num(smoke / 60)} min + test {fmt_num(test / 60)} min",
        f"{smoke + test} s",
        SETUP_GOAL,
        float(smoke + test),
        f"Set-up time from {where}: {run} ({_plain(last.get('pytest'))}); a fresh clone, an "
        "empty podman storage and cache; the system packages `make host` installs were already "
        "there (their install is not counted).",
    )


def training_not_measured() -> Headline:
    """The public training benchmark's row when the ``training`` section did not run."""
    return Headline(
        "Public training benchmark: samples/s, hpcenv default launch / the project's documented "
        "launch",
        "",
        "",
        DOCUMENTED_GOAL,
        None,
        "Public training benchmark not measured: the `training` section (pytorch/examples "
        "minGPT-DDP through a user recipe) did not run in this bench run, or failed (see "
        "its section); the MNIST step against its compute alone is a smoke reference "
        "(mnist_horovod.step_per_compute in `hpcenv smoke`).",
    )


def unmeasured_rows(training: bool = False) -> list[Headline]:
    """Issue 21's targets this bench run did not measure, with why; ``training``: the training
    section ran, and its rows replace the public training benchmark's."""
    return [setup_time_row([], "")] + ([] if training else [training_not_measured()])


def targets_section(ctx: BenchContext) -> Section:
    """Record this run's floor verdict (a run whose tuning section judged it: full or --quick),
    then the rows of this module. The floor over three runs is judged on runs of the same
    image, the same measured tuning (a new measurement starts a new count) and the same kind
    of run as this one (:func:`run_kind`)."""
    sec = Section("targets", "Targets one run cannot measure")
    path = floor_history_path(ctx.site.name)
    floor = ctx.shared.get("floor")
    tuning = ctx.measured.date if ctx.measured is not None else None
    entry = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "image": ctx.image,
        "tuning": tuning,
        "quick": ctx.quick,
        **(floor or {}),
    }
    if floor is not None:
        append_history(path, entry)
    same = [
        e for e in read_history(path) if e.get("image") == ctx.image and e.get("tuning") == tuning
    ]
    # without a verdict of its own (no tuning section), the run reports the latest kind recorded
    kind = run_kind(entry if floor is not None or not same else same[-1])
    entries = [e for e in same if run_kind(e) == kind]
    sec.data = {"floor_history": str(path), "floor_kind": kind, "floor_runs": entries[-FLOOR_RUNS:]}
    sec.headline.append(floor_over_runs(entries, str(path), kind))
    setup = setup_history_path()
    sec.headline.append(setup_time_row(read_setup_history(setup), str(setup)))
    if not ctx.shared.get("training"):
        sec.headline.append(training_not_measured())
    sec.text.append(
        "Targets of issue 21 that need more than one run of this bench (the floor over three "
        "runs, kept in a history in hpcenv's cache) or something it does not do; their rows "
        "are in the Targets table, each with a note saying why."
    )
    return sec
