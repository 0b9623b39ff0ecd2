"""``hpcenv bench --quick`` (issue 39): the headline ratios, the tuning floor judged on every
round of a full run, and a measured tuning that is slower at no size of its confirming rounds.

The real test runs the installed ``hpcenv`` on ``local`` with its own tuning folder and cache
(the measured tuning it makes, and the floor history it appends to, are its own)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_image

from hpcenv.bench.comm import LATENCY_MAX_BYTES, LATENCY_ROUNDS_QUICK, TUNING_ROUNDS_QUICK
from hpcenv.bench.runner import QUICK_SECTIONS, SECTION_NAMES
from hpcenv.naming import image_tag
from hpcenv.sweep.measure import CONFIRM_ROUNDS_QUICK, consistently_slower

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def test_quick_runs_the_headline_sections_only() -> None:
    assert set(QUICK_SECTIONS) <= set(SECTION_NAMES)
    for headline in ("allreduce", "tuning", "mnist", "training", "targets"):
        assert headline in QUICK_SECTIONS
    for full_only in ("mpi-impl", "kmeans", "two-node", "build", "rebuild", "sif", "ccl"):
        assert full_only not in QUICK_SECTIONS
    # the order of a full run is kept (the targets section reads what the others left)
    assert list(QUICK_SECTIONS) == [n for n in SECTION_NAMES if n in QUICK_SECTIONS]


@pytest.mark.podman
@pytest.mark.timeout(900)
def test_real_quick_bench_judges_the_floor_and_confirms_the_rules(tmp_path: Path) -> None:
    need_image(image_tag(recipe="horovod-cpu", site="local"), "the bench measures in it")
    cache, tuning = tmp_path / "cache", tmp_path / "tuning"
    from hpcenv.datasets import prepare_mnist

    prepare_mnist(cache / "data" / "mnist")
    env = {**os.environ, "HPCENV_CACHE": str(cache), "HPCENV_TUNING_DIR": str(tuning)}
    out = tmp_path / "out"
    sections = ["startup", "allreduce", "tuning", "targets"]
    proc = subprocess.run(
        [HPCENV, "bench", "--quick", *[a for s in sections for a in ("--section", s)]]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=840,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "report.json").read_text())
    assert [s["key"] for s in doc["sections"]] == sections
    assert not any(s.get("error") for s in doc["sections"])
    by_key = {s["key"]: s for s in doc["sections"]}

    # the tuning section ran --quick's rounds (half a full run's) over every size and judged the
    # floor; the latency-bound sizes from their own short launches
    paired = by_key["tuning"]["data"]["paired_vs_naive"]["hpcenv default"]
    assert len(paired) == 13
    for size, ratios in paired.items():
        short = int(size) <= LATENCY_MAX_BYTES
        assert len(ratios) == (LATENCY_ROUNDS_QUICK if short else TUNING_ROUNDS_QUICK), size
    floor = next(h for h in by_key["tuning"]["headline"] if "consistently" in h["measure"])
    losses = [int(s) for s, v in paired.items() if consistently_slower(v)]
    assert floor["value"] == float(len(losses))  # judged, and from the rounds shown
    # ... and the run is in the floor history, marked --quick, with the tuning it ran
    history = cache / "bench" / "floor-history-local.jsonl"
    (entry,) = [json.loads(line) for line in history.read_text().splitlines()]
    assert entry["quick"] is True and entry["rounds"] == TUNING_ROUNDS_QUICK
    assert entry["latency_rounds"] == LATENCY_ROUNDS_QUICK
    assert entry["tuning"] and sorted(entry["losses"]) == sorted(losses)

    # the measured tuning the bench made: every rule it kept gained in the median of its
    # confirming rounds, and no size without a rule lost consistently under the file
    (saved,) = list(tuning.rglob("*.json"))
    measured = json.loads(saved.read_text())
    om = measured["measurements"]["openmpi"]
    kept = {int(r["min_bytes"]) for r in measured["collective_rules"] if r["algorithm"]}
    confirm = om["verification"].get("rules_over_default")
    if confirm is None:  # no candidate beat the default by the margin: nothing to confirm
        assert not kept
    else:
        # one set of confirming rounds, or two when the first vetoed the file (a veto stands
        # only if the second set vetoes at the same size)
        assert {len(v) for v in confirm.values()} <= {
            CONFIRM_ROUNDS_QUICK,
            2 * CONFIRM_ROUNDS_QUICK,
        }
        for size in kept:
            assert statistics.median(confirm[str(size)]) >= 1.0
        if kept:
            assert om["verification"]["vetoed_by"] == []
    md = (out / "report.md").read_text()
    assert "Mode: --quick (the headline ratios)" in md and "## Targets" in md
