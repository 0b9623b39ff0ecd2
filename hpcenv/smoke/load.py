"""How much CPU the smoke checks' ranks got, and whether that was too little to judge a figure.

Each check runs through ``hpcenv/checks/_cpu.py``: every rank writes its own run-queue delay
(``/proc/self/task/*/schedstat``) and the machine's CPU pressure (``/proc/pressure/cpu``) over
its life. The rank measures itself because the ranks run in a podman container, in a SIF through
Apptainer (here inside a helper container) or under a scheduler: their PIDs are not the host's
to look up, their ``/proc/self`` always is theirs. An image whose checks predate the wrapper
still gets the host's CPU pressure around each check (:func:`host_psi_total`).

The verdict uses the worst rank's ``wait / run`` (seconds waiting on a run queue per second on a
CPU) where the ranks reported it: that is their own starvation. PSI ``some`` counts any task of
the machine that waited; two busy-polling ranks on two cores make every other task wait behind
them, so it is high when the ranks themselves had their cores (measured: see
``starved.yaml``). It decides only for checks that could not report schedstat.

The limits are data with their reason and measurements: ``starved.yaml`` beside this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hpcenv.checks._cpu import CPU_DIR_ENV, psi_some_total

LIMITS_FILE = Path(__file__).with_name("starved.yaml")
__all__ = ["CPU_DIR_ENV", "Limits", "host_psi_total", "limits", "rank_docs", "starved", "summary"]


class Limits(BaseModel):
    """When the ranks count as starved (``starved.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wait_per_run: float = Field(gt=0, description="worst rank's run-queue wait per CPU second")
    psi_some: float = Field(gt=0, le=1, description="share of the window with CPU pressure")
    reason: str
    measured: dict[str, str] = Field(default={})


@cache
def limits() -> Limits:
    from hpcenv.yamlsrc import validate_file

    return validate_file(Limits, LIMITS_FILE)


def host_psi_total() -> int | None:
    """``some total`` of this machine's ``/proc/pressure/cpu`` (microseconds); None without PSI."""
    return psi_some_total()


def _number(doc: Mapping[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def rank_docs(text: str) -> list[dict[str, Any]]:
    """The ranks' records: JSON objects one after the other, as ``cat`` of ``_cpu.py``'s files
    prints them (with or without whitespace between them); text that does not parse and
    records without the schedstat fields are left out."""
    decoder = json.JSONDecoder()
    out, at = [], text.find("{")
    while at != -1:
        try:
            doc, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        at = text.find("{", end)
        if not isinstance(doc, dict):
            continue
        run, wait = _number(doc, "run_ns"), _number(doc, "wait_ns")
        if run is not None and wait is not None and run > 0:
            out.append(doc)
    return out


def summary(
    ranks: Iterable[Mapping[str, Any]], psi_us: float | None, window_s: float
) -> dict[str, Any]:
    """What the ranks of one smoke test got: worst and total ``wait / run`` over the ranks (of
    every check the test ran) and the share of the test's check time with CPU pressure."""
    ratios, run, wait = [], 0.0, 0.0
    for doc in ranks:
        r, w = _number(doc, "run_ns"), _number(doc, "wait_ns")
        if r is None or w is None or r <= 0:
            continue
        ratios.append(w / r)
        run, wait = run + r, wait + w
    psi = None
    if psi_us is not None and window_s > 0:
        psi = round(min(1.0, psi_us / 1e6 / window_s), 3)
    return {
        "ranks": len(ratios),
        "run_s": round(run / 1e9, 2),
        "wait_s": round(wait / 1e9, 2),
        "wait_per_run": round(wait / run, 3) if run else None,
        "wait_per_run_max": round(max(ratios), 3) if ratios else None,
        "psi_some": psi,
        "window_s": round(window_s, 1),
    }


def starved(cpu: Mapping[str, Any] | None) -> str | None:
    """Why the ranks were too starved for their figures to be judged; None when they were not
    (or nothing was measured)."""
    if not isinstance(cpu, Mapping):
        return None
    lim = limits()
    worst = cpu.get("wait_per_run_max")
    psi = cpu.get("psi_some")
    pressure = f"; CPU pressure on {psi:.0%} of the time" if isinstance(psi, float) else ""
    if isinstance(worst, int | float) and not isinstance(worst, bool):
        if worst <= lim.wait_per_run:
            return None
        return (
            f"ranks starved: the worst of {cpu.get('ranks')} ranks waited {worst:.2f} s on a run "
            f"queue per CPU second (schedstat; limit {lim.wait_per_run:g}){pressure}"
        )
    if isinstance(psi, float) and psi > lim.psi_some:
        return (
            f"machine busy: CPU pressure on {psi:.0%} of the check's {cpu.get('window_s')} s "
            f"(/proc/pressure/cpu some; limit {lim.psi_some:.0%}; the ranks reported no schedstat)"
        )
    return None
