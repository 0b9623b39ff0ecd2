"""The sweep behind ``hpcenv tune --measure``: run each collective choice the image offers and
keep what beats the library's own default, per message size.

Runs in one container of the site's image (one exec per launch, :mod:`hpcenv.shells`),
with the image's ``mpirun`` and the placement's binding (``hpcenv tune``'s launcher flags for
the layout), the same way ``smoke`` and ``bench`` launch. What it sweeps comes from
:file:`collectives.yaml` and the image's own lock (``/opt/hpcenv/stack.lock.json``): Open MPI
coll_tuned allreduce algorithms and segment sizes (per message size, 8 B..64 MiB), then Horovod's
fusion threshold and cycle time with the chosen rules in force. Choices for libraries the
image lacks (MPICH/Intel MPI CVARs, NCCL without a GPU) are written down as "rendered only" with
the reason.

Noise control (the machine may be shared): every candidate runs in ``rounds`` interleaved
rounds and keeps its best per size; a candidate replaces the default at a size only when it is
``MARGIN`` faster there; then the resulting rules file and the default run again in
``CONFIRM_ROUNDS`` interleaved rounds, and the file is kept only where it is slower at no size
(:func:`confirm`: a rule that did not gain goes; a size without a rule that the file made
consistently slower takes the whole file with it). Transports (one choice for every size) run
``TRANSPORT_ROUNDS`` rounds, each paired
with the defaults of its own round, and are judged per size on the median of those ratios and
on a sign test (:func:`consistently_slower`). The whole sweep stops starting new runs after
``budget_s`` seconds.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from hpcenv.errors import EnvironmentProblem, HpcenvError
from hpcenv.shells import OMPI_ROOT_ENV, Result
from hpcenv.tuning.apply import RULES_MOUNT, RULES_NAME, environment
from hpcenv.tuning.model import Layout, MeasuredTuning, Rule, coll_tuned_rules, collectives

CHECKS = "/opt/hpcenv/checks"
LOCK_IN_IMAGE = "/opt/hpcenv/stack.lock.json"
MARGIN = 1.10
KEEP_WITHIN = 0.95
TRANSPORT_GAIN = 1.03  # geomean over all sizes: a smaller gain than MARGIN, but at every size
# Two launches that move small messages the same way (Open MPI's defaults bound to cores vs a
# naive unbound launch) differ per size by an interquartile range of 4-15 % between paired runs
# on this 2-core machine (8 rounds, 8 B..2 KiB, 2026-11-22), so a median of 3 rounds reads a
# candidate that cannot touch a size (the vader eager limit below 4 KiB) as "5 % slower" there
# now and then, and once let UCX pass with a real 7-10 % loss at 8-128 B. Eight rounds (a sweep
# takes ~2 s), and a loss must also be a consistent one (:func:`consistently_slower`).
TRANSPORT_ROUNDS = 8
# Of the rounds, per size: 7 or more of 8 (noise alone: 9/256 = 3.5 %), 4 of 5 (19 %), 3 of 3
# (12.5 %): fewer rounds (--quick, a spent budget) make the sign test much weaker.
CONSISTENT_SHARE = 0.8
# A guard band between choosing and judging: the bench's floor calls a size a loss at a median
# below KEEP_WITHIN in CONSISTENT_SHARE of the rounds, so what hpcenv applies by default must
# clear a stricter bar when it is chosen, or a loss at the edge of the noise passes the
# selection in one run and is judged a loss in the next. bench --quick, 2026-11-28: UCX over
# shared memory, chosen with its worst size at 0.95x (32 B, slower in 5 of 8 rounds), ran
# 0.90x against naive at 128 B (7 of 8) in the bench that followed.
SELECT_WITHIN = 0.97
SELECT_SHARE = 0.6
HOROVOD_MARGIN = 1.10
# Rules and the default sweep alternately this many times before a rules file is kept
# (:func:`confirm`): one sweep of each is ~2.5 s here; 3 rounds judge a loss only when it shows
# in all three (the sign test's 80 %), so --quick confirms less strictly.
CONFIRM_ROUNDS = 6
CONFIRM_ROUNDS_QUICK = 3
MiB = 1 << 20

Runner = Callable[[str, Mapping[str, str], float], Result]


@dataclass
class Plan:
    """What a sweep will run and what it will only write down (with the reason)."""

    mpi: str
    openmpi: list[tuple[int, int]] = field(default_factory=list)
    transports: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    horovod: list[dict[str, str]] = field(default_factory=list)
    rendered_only: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"MPI in the image: {self.mpi}"]
        if self.transports:
            out.append(
                "measure Open MPI transports: defaults vs "
                + ", ".join(
                    f"{name} ({' '.join(f'{k}={v}' for k, v in env.items())})"
                    for name, env in self.transports
                )
            )
        if self.openmpi:
            names = collectives()["openmpi"]["algorithms"]
            out.append(
                "measure Open MPI coll_tuned allreduce: default (0) vs "
                + ", ".join(
                    f"{a} {names[a]}" + (f" seg {s // 1024} KiB" if s else "")
                    for a, s in self.openmpi
                )
            )
        if self.horovod:
            out.append(
                "measure Horovod: defaults vs "
                + ", ".join(" ".join(f"{k}={v}" for k, v in c.items()) for c in self.horovod)
            )
        for key, cands in self.rendered_only.items():
            out.append(f"rendered only ({key}): {len(cands)} candidate(s)")
        out += [f"why: {r}" for r in self.reasons]
        return out


def plan(lock: Mapping[str, Any], site: Any, layout: Layout, gpu_visible: bool) -> Plan:
    """What to sweep for an image with ``lock`` on ``site`` (pure: no process is started)."""
    comps = lock.get("components", {})
    mpi = str(comps.get("mpi", {}).get("implementation") or site.mpi.name)
    kb = collectives()
    p = Plan(mpi=mpi)
    family = "openmpi" if mpi in ("openmpi", "spectrum-mpi") else mpi
    if family == "openmpi":
        p.openmpi = [(int(a), int(s)) for a, s in kb["openmpi"]["candidates"]]
        p.transports = [
            (str(t["name"]), {str(k): str(v) for k, v in t["env"].items()})
            for t in kb["openmpi"].get("transports", [])
        ]
        p.reasons.append(f"Open MPI coll_tuned candidates: {kb['openmpi']['source']}")
        if p.transports:
            p.reasons.append(f"Open MPI transports: {kb['openmpi']['transports_source']}")
    else:
        p.reasons.append(f"{mpi}: no coll_tuned; its CVARs are swept where the image runs it")
    for other in ("mpich", "intel-mpi"):
        if other != family:
            var = kb[other]["variable"]
            p.rendered_only[f"{other} (not the image's MPI)"] = [
                {var: str(c)} for c in kb[other]["candidates"]
            ]
    if family in ("mpich", "intel-mpi"):
        var = kb[family]["variable"]
        p.rendered_only[f"{family} (no MPICH-ABI allreduce sweep in this version of hpcenv)"] = [
            {var: str(c)} for c in kb[family]["candidates"]
        ]
    hvd = comps.get("horovod")
    ops = str((hvd or {}).get("options", {}).get("operations", ""))
    if hvd and "mpi" in ops.split(","):
        p.horovod = [dict(c) for c in kb["horovod"]["candidates"]]
        if layout.nodes > 1:
            p.horovod += [dict(c) for c in kb["horovod"]["multi_node_only"]]
        else:
            p.rendered_only["horovod hierarchical (needs more than one node)"] = [
                dict(c) for c in kb["horovod"]["multi_node_only"]
            ]
        p.reasons.append(f"Horovod knobs: {kb['horovod']['source']}")
    elif hvd:
        p.reasons.append(f"Horovod without MPI operations ({ops}): its knobs are not swept")
    if site.gpu.vendor == "nvidia" or "nccl" in comps:
        why = (
            "GPU visible, but hpcenv has no NCCL sweep check yet"
            if gpu_visible
            else ("no GPU visible in the container")
        )
        p.rendered_only[f"nccl ({why})"] = [dict(c) for c in kb["nccl"]["candidates"]]
    return p


def best_per_size(runs: list[list[dict[str, Any]]]) -> dict[int, float]:
    """Best bus bandwidth per message size over several sweeps of one candidate."""
    best: dict[int, float] = {}
    for rows in runs:
        for row in rows:
            size, bw = int(row["bytes"]), float(row["busbw_GBps"])
            best[size] = max(best.get(size, 0.0), bw)
    return best


def choose(
    default: Mapping[int, float],
    candidates: Mapping[tuple[int, int], Mapping[int, float]],
    margin: float = MARGIN,
) -> dict[int, tuple[int, int]]:
    """Per size, the candidate that beats the default by ``margin`` (else ``(0, 0)``)."""
    out: dict[int, tuple[int, int]] = {}
    for size, base in sorted(default.items()):
        best, best_bw = (0, 0), base * margin
        for cand, bws in candidates.items():
            bw = bws.get(size, 0.0)
            if bw >= best_bw and (best == (0, 0) or bw > best_bw):
                best, best_bw = cand, bw
        out[size] = best
    return out


def to_rules(choice: Mapping[int, tuple[int, int]]) -> list[Rule]:
    """Per-size choices as rules (from each size up); empty when every size keeps the default."""
    if all(c == (0, 0) for c in choice.values()):
        return []
    return [Rule(min_bytes=s, algorithm=a, segsize=g) for s, (a, g) in sorted(choice.items())]


T = TypeVar("T")


def round_order(items: Sequence[T], r: int) -> list[T]:
    """The order of round ``r`` in an interleaved comparison: the items rotated so round r starts
    with item r (mod their number). None always runs first, so a machine that warms up (or slows
    down) during a round does not favour one of them in every round."""
    k = r % len(items) if items else 0
    return [*items[k:], *items[:k]]


def paired_ratio_rounds(
    default_runs: list[list[dict[str, Any]]], cand_runs: list[list[dict[str, Any]]]
) -> dict[int, list[float]]:
    """Per size, candidate / default busbw of every round, each round's candidate against the
    default run of the same round (the k-th run of each; a budget cut only drops later rounds,
    so the k-th runs stay in the same round)."""
    per: dict[int, list[float]] = {}
    for d_rows, c_rows in zip(default_runs, cand_runs, strict=False):
        d = {int(r["bytes"]): float(r["busbw_GBps"]) for r in d_rows}
        for r in c_rows:
            size = int(r["bytes"])
            if d.get(size, 0.0) > 0:
                per.setdefault(size, []).append(float(r["busbw_GBps"]) / d[size])
    return dict(sorted(per.items()))


def medians(rounds: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """Per size, the median of the rounds' ratios (:func:`paired_ratio_rounds`). One disturbed
    run (or one lucky default run) moves a best-of comparison at that size; it cannot move the
    median of three or more rounds."""
    return {s: statistics.median(v) for s, v in rounds.items() if v}


def rounds_slower(ratios: Sequence[float]) -> int:
    """In how many rounds the candidate was slower than what it was paired with."""
    return sum(r < 1.0 for r in ratios)


def consistently_slower(
    ratios: Sequence[float], floor: float = KEEP_WITHIN, share: float = CONSISTENT_SHARE
) -> bool:
    """A real loss at one size, not noise: the median of the rounds' ratios is below ``floor``
    and the candidate was slower than the default in at least ``CONSISTENT_SHARE`` of the
    rounds (a sign test per size: in 7 or more of 8 rounds, noise alone does that with
    probability 9/256, 3.5 %; over 13 sizes the sign part alone would flag some size of an
    identical configuration up to 37 % of the time, which is why the median must also be below
    ``floor``). UCX at 32 B (8 rounds here, 2026-11-22): slower in 8 of 8, median 0.91."""
    if not ratios:
        return False
    return statistics.median(ratios) < floor and rounds_slower(ratios) >= slower_rounds_needed(
        len(ratios), share
    )


def slower_rounds_needed(rounds: int, share: float = CONSISTENT_SHARE) -> int:
    """In how many of ``rounds`` a candidate must be slower to count as consistently slower."""
    return math.ceil(share * rounds)


def sign_test(k: int, n: int) -> float:
    """The chance that noise alone (a fair coin per round) makes a candidate slower in ``k`` or
    more of ``n`` rounds."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def loses_when_chosen(ratios: Sequence[float]) -> bool:
    """The selection's bar (:data:`SELECT_WITHIN`, :data:`SELECT_SHARE`): stricter than the
    floor's :func:`consistently_slower`, so that what is chosen stays clear of it."""
    return consistently_slower(ratios, SELECT_WITHIN, SELECT_SHARE)


def choose_transport(
    candidates: Mapping[str, Mapping[int, Sequence[float]]],
    gain: float = TRANSPORT_GAIN,
) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """The transport with the best geometric mean of busbw / default over the sizes
    (``candidates`` are, per size, each round's ratio to the default: :func:`paired_ratio_rounds`;
    the mean is taken over the per-size medians), among those at least ``gain`` better on that
    mean and losing at no size by the selection's bar (:func:`loses_when_chosen`; a job runs
    one transport for every message size, so one slow size vetoes it). None: keep the defaults. Also returns, per
    candidate, its geomean, its worst size and median ratio there, the consistently slow
    sizes, and whether it qualified.
    """
    stats: dict[str, dict[str, Any]] = {}
    best, best_g = None, 0.0
    for name, rounds in candidates.items():
        ratios = medians(rounds)
        if not ratios or min(ratios.values()) <= 0:
            stats[name] = {"geomean": 0.0, "qualified": False}
            continue
        g = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
        worst = min(ratios, key=lambda s: ratios[s])
        slow = [s for s, v in rounds.items() if loses_when_chosen(v)]
        ok = g >= gain and not slow
        stats[name] = {
            "geomean": g,
            "worst_bytes": worst,
            "worst_ratio": ratios[worst],
            "worst_rounds_slower": rounds_slower(rounds[worst]),
            "rounds": len(rounds[worst]),
            "slow_sizes": slow,
            "qualified": ok,
        }
        if ok and g > best_g:
            best, best_g = name, g
    return best, stats


def confirm(
    choice: dict[int, tuple[int, int]], rounds: Mapping[int, Sequence[float]]
) -> tuple[dict[int, tuple[int, int]], list[int], list[int]]:
    """Keep a rules file only where it is slower at no size across the confirming rounds.

    ``rounds``: per size, rules / default busbw of each confirming round, the two interleaved
    with the order rotating (:func:`paired_ratio_rounds`). A rule whose size did not gain in
    the median of those rounds goes (a default applied without asking must never lose, and a
    rule only exists to win). A size that keeps Open MPI's own decision can still lose to the
    file: with dynamic rules on, every allreduce goes through the rules lookup, so if such a
    size is :func:`consistently_slower` (the floor's own evidence: such a size runs the same
    algorithm, only through the lookup, so the guard band that chooses a transport would veto
    the file on noise; measured 2026-11-28, 6 rounds: 128 B read 0.54-1.92x, median 0.80,
    slower in 4 of 6) the whole file goes.
    Returns the confirmed choice, the sizes whose rule was dropped, and the sizes that vetoed
    the file (empty when it stands). ``measure_openmpi`` takes a veto only when a second set of
    confirming rounds vetoes at the same size (a loss that is real shows again; one size of
    13 losing to noise rarely does twice)."""
    dropped, vetoed = rules_without_gain(choice, rounds), vetoing_sizes(choice, rounds)
    return without(choice, dropped, vetoed), dropped, vetoed


def rules_without_gain(
    choice: Mapping[int, tuple[int, int]], rounds: Mapping[int, Sequence[float]]
) -> list[int]:
    """The sizes whose rule did not gain in the median of the confirming rounds."""
    return [
        s
        for s, c in choice.items()
        if c != (0, 0) and (not rounds.get(s) or statistics.median(rounds[s]) < 1.0)
    ]


def vetoing_sizes(
    choice: Mapping[int, tuple[int, int]], rounds: Mapping[int, Sequence[float]]
) -> list[int]:
    """The sizes without a rule that ran consistently slower with the rules file in force."""
    return [s for s, c in choice.items() if c == (0, 0) and consistently_slower(rounds.get(s, ()))]


def without(
    choice: Mapping[int, tuple[int, int]], dropped: Sequence[int], vetoed: Sequence[int]
) -> dict[int, tuple[int, int]]:
    """``choice`` less the dropped rules; no rule at all when a size vetoed the file."""
    return {s: ((0, 0) if vetoed or s in dropped else c) for s, c in choice.items()}


class Sweep:
    """One measuring session: a runner into the image, a layout, a time budget and progress."""

    def __init__(
        self,
        run: Runner,
        mpirun: str,
        work: Path,
        layout: Layout,
        budget_s: float,
        echo: Callable[[str], None],
        quick: bool = False,
        rules_mount: str = RULES_MOUNT,
    ) -> None:
        self.run, self.mpirun, self.work, self.layout = run, mpirun, work, layout
        self.rules_path = f"{rules_mount}/{RULES_NAME}"
        self.budget_s, self.echo, self.quick = budget_s, echo, quick
        self.t0 = time.monotonic()
        self.skipped: list[str] = []
        self.log: list[dict[str, Any]] = []

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def over_budget(self, what: str) -> bool:
        if self.elapsed > self.budget_s:
            self.skipped.append(what)
            self.echo(f"  budget of {self.budget_s:.0f} s spent: skip {what}")
            return True
        return False

    def check(self, script: str, args: str, env: Mapping[str, str], label: str) -> dict[str, Any]:
        line = f"{self.mpirun} python3 {CHECKS}/{script} {args}"
        res = self.run(line, OMPI_ROOT_ENV | dict(env), 300)
        doc = res.doc if res.ok else None
        if doc is None:
            tail = (res.stderr or res.stdout).strip().splitlines()[-2:]
            raise HpcenvError(
                f"tune: {label}: `{line}` failed (exit {res.returncode}): " + " / ".join(tail)
            )
        self.log.append({"label": label, "env": dict(env), "seconds": round(res.seconds, 2)})
        return doc

    def sweep_mpi(self, env: Mapping[str, str], label: str) -> list[dict[str, Any]]:
        # the sweep `hpcenv bench` compares launches with (its exact checks of 1,000,003
        # elements included: with 1,000 here, UCX read 6/8 rounds slower at 32 B where the
        # bench's sweep read 8/8, 2026-11-22)
        args = f"--min-bytes 8 --max-bytes {64 * MiB} --factor 4"
        doc = self.check("allreduce_mpi.py", args, env, label)
        bad = sum(int(r["mismatches"]) for r in doc["sweep"]) + sum(
            int(e.get("mismatches", 0)) for e in doc.get("exact", [])
        )
        if bad:
            raise HpcenvError(f"tune: {label}: {bad} wrong allreduce results")
        return list(doc["sweep"])


def _alg_env(alg: int, seg: int) -> dict[str, str]:
    env = {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": str(alg),
    }
    if seg:
        env["OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize"] = str(seg)
    return env


def _fmt(size: int) -> str:
    return (
        f"{size // MiB} MiB"
        if size >= MiB
        else f"{size // 1024} KiB"
        if size >= 1024
        else f"{size} B"
    )  # noqa: E501


def measure_transport(
    sw: Sweep, p: Plan, base_env: Mapping[str, str], rounds: int
) -> tuple[dict[str, str], list[list[dict[str, Any]]], dict[str, Any], list[str]]:
    """Open MPI's defaults vs each transport candidate, interleaved; returns the chosen
    transport's environment ({} for the defaults), its sweeps, the measurements and reasons."""
    labels = ["Open MPI's defaults", *(name for name, _ in p.transports)]
    envs = {"Open MPI's defaults": {}, **dict(p.transports)}
    runs: dict[str, list[list[dict[str, Any]]]] = {label: [] for label in labels}
    unavailable: dict[str, str] = {}  # a candidate this image cannot run (no UCX, wrong sums)
    total, n = rounds * len(labels), 0
    for r in range(rounds):
        if r and sw.over_budget(f"transport rounds {r + 1}-{rounds}"):
            break  # the defaults alone would pair with nothing
        for label in round_order(labels, r):
            if label in unavailable:
                continue
            if label != labels[0] and sw.over_budget(f"round {r + 1} transport {label}"):
                continue
            n += 1
            t = time.monotonic()
            try:
                rows = sw.sweep_mpi(dict(base_env) | envs[label], f"transport: {label}")
            except HpcenvError as err:
                if label == labels[0]:
                    raise
                unavailable[label] = str(err)
                runs[label] = []
                sw.echo(f"  [{n}/{total}] transport {label}: not available here ({err})")
                continue
            runs[label].append(rows)
            sw.echo(
                f"  [{n}/{total}] transport {label}: 64 MiB {rows[-1]['busbw_GBps']:.2f} GB/s,"
                f" 8 B {rows[0]['time_us']:.2f} µs ({time.monotonic() - t:.1f} s)"
            )
    default = best_per_size(runs[labels[0]])
    cands = {label: best_per_size(r) for label, r in runs.items() if label != labels[0] and r}
    chosen, stats = choose_transport(
        {label: paired_ratio_rounds(runs[labels[0]], runs[label]) for label in cands}
    )
    reasons = []
    for label, st in stats.items():
        if not st.get("worst_bytes"):
            continue
        verdict = "chosen" if label == chosen else "not chosen"
        slow = st["slow_sizes"]
        reasons.append(
            f"transport {label}: geomean busbw {st['geomean']:.2f}x Open MPI's defaults over "
            f"{len(default)} sizes (median of the rounds' paired ratios), worst "
            f"{_fmt(st['worst_bytes'])} at {st['worst_ratio']:.2f}x (slower in "
            f"{st['worst_rounds_slower']}/{st['rounds']} rounds)"
            + (f"; slower at {', '.join(map(_fmt, slow))}" if slow else "")
            + f" -> {verdict} (needs >= {TRANSPORT_GAIN:.2f}x and no size slower: a median below "
            f"{SELECT_WITHIN:.2f}x and slower in {SELECT_SHARE:.0%} of the rounds, a guard band "
            f"inside the bench's floor of {KEEP_WITHIN:.2f}x in {CONSISTENT_SHARE:.0%})"
        )
    reasons += [
        f"transport {label}: not available in this image, not chosen ({why})"
        for label, why in unavailable.items()
    ]
    if chosen is None:
        reasons.append("transport: Open MPI's defaults kept")
    measurements = {
        "default_busbw": {str(k): v for k, v in default.items()},
        "unavailable": unavailable,
        "candidates": {
            label: {"env": envs[label], "busbw": {str(k): v for k, v in bws.items()}}
            | {k: v for k, v in stats[label].items()}
            for label, bws in cands.items()
        },
        "chosen": chosen,
    }
    label = chosen or labels[0]
    return dict(envs[label]), runs[label], json.loads(json.dumps(measurements)), reasons


def measure_openmpi(
    sw: Sweep,
    p: Plan,
    base_env: Mapping[str, str],
    rounds: int,
    default_runs: list[list[dict[str, Any]]] | None = None,
) -> tuple[list[Rule], dict[str, Any], list[str]]:
    """Per size, the coll_tuned algorithm that beats ``base_env`` (the chosen transport) by
    MARGIN; ``default_runs`` are earlier sweeps of ``base_env`` itself, merged with new ones."""
    names = collectives()["openmpi"]["algorithms"]
    runs: dict[tuple[int, int], list[list[dict[str, Any]]]] = {(0, 0): list(default_runs or [])}
    total = rounds * (len(p.openmpi) + 1)
    n = 0
    for r in range(rounds):
        for cand in [(0, 0), *p.openmpi]:
            label = (
                "default"
                if cand == (0, 0)
                else f"alg {cand[0]} {names[cand[0]]}"
                + (f" seg {cand[1] // 1024} KiB" if cand[1] else "")
            )
            if cand != (0, 0) and sw.over_budget(f"round {r + 1} {label}"):
                continue
            n += 1
            env = dict(base_env) | ({} if cand == (0, 0) else _alg_env(*cand))
            t = time.monotonic()
            rows = sw.sweep_mpi(env, label)
            runs.setdefault(cand, []).append(rows)
            sw.echo(
                f"  [{n}/{total}] {label}: 64 MiB {rows[-1]['busbw_GBps']:.2f} GB/s, "
                f"8 B {rows[0]['time_us']:.2f} µs ({time.monotonic() - t:.1f} s)"
            )
    default = best_per_size(runs[(0, 0)])
    cands = {c: best_per_size(r) for c, r in runs.items() if c != (0, 0) and r}
    choice = choose(default, cands)
    reasons: list[str] = []
    verify_doc: dict[str, Any] = {}
    rules = to_rules(choice)
    if rules:
        ranks = sw.layout.nodes * sw.layout.ranks_per_node
        text = coll_tuned_rules([(r.min_bytes, r.algorithm, r.segsize) for r in rules], ranks)
        (sw.work / RULES_NAME).write_text(text, encoding="utf-8")
        rules_env = dict(base_env) | {
            "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_dynamic_rules_filename": sw.rules_path,
        }
        envs = {"rules": rules_env, "default": dict(base_env)}
        n_confirm = CONFIRM_ROUNDS_QUICK if sw.quick else CONFIRM_ROUNDS

        def confirming(label: str) -> dict[int, list[float]]:
            checks: dict[str, list[list[dict[str, Any]]]] = {"rules": [], "default": []}
            for r in range(n_confirm):  # interleaved, the order rotating: no side always first
                for name in round_order(["rules", "default"], r):
                    checks[name].append(sw.sweep_mpi(envs[name], f"{label} {r + 1}: {name}"))
            return paired_ratio_rounds(checks["default"], checks["rules"])

        per_round = confirming("confirm")
        vetoed = vetoing_sizes(choice, per_round)
        if vetoed:  # a loss is confirmed only if the same size loses again in fresh rounds
            again = confirming("confirm again")
            vetoed = [s for s in vetoed if s in vetoing_sizes(choice, again)]
            per_round = {s: per_round.get(s, []) + v for s, v in again.items()}
        dropped = rules_without_gain(choice, per_round)
        choice = without(choice, dropped, vetoed)
        verify_doc = {
            "rules_over_default": {s: list(v) for s, v in per_round.items()},
            "dropped_sizes": dropped,
            "vetoed_by": vetoed,
        }
        if dropped:
            reasons.append(
                f"{n_confirm} confirming rounds (rules file vs the default, interleaved) dropped "
                "the rule at " + ", ".join(map(_fmt, dropped)) + " (no gain in their median)"
            )
        if vetoed:
            reasons.append(
                f"{n_confirm} confirming rounds, and {n_confirm} again: with the rules file in force, "
                + ", ".join(map(_fmt, vetoed))
                + f" (sizes that keep Open MPI's decision) ran consistently slower (median below "
                f"{KEEP_WITHIN} and slower in {CONSISTENT_SHARE:.0%} of the rounds): no rules file"
            )
        rules = to_rules(choice)
    chosen = {s: c for s, c in choice.items() if c != (0, 0)}
    if chosen:
        reasons.append(
            "coll_tuned allreduce per size: "
            + ", ".join(
                f"{_fmt(s)} -> {a} {names[a]}"
                + (f"/seg {g // 1024} KiB" if g else "")
                + f" ({cands[(a, g)][s] / default[s]:.2f}x the default)"
                for s, (a, g) in chosen.items()
            )
            + f"; other sizes keep Open MPI's fixed decision (no candidate {MARGIN - 1:.0%} faster)"
        )
    else:
        reasons.append(
            f"no coll_tuned algorithm beat Open MPI's fixed decision by {MARGIN - 1:.0%}"
            " at any size: no rules"
        )
    measurements = {
        "default_busbw": {str(k): v for k, v in default.items()},
        "candidates_busbw": {
            f"{a}/{g}": {str(k): v for k, v in bws.items()} for (a, g), bws in cands.items()
        },
        "choice": {str(s): list(c) for s, c in choice.items()},
        "verification": {
            k: ({str(s): b for s, b in v.items()} if isinstance(v, dict) else v)
            for k, v in verify_doc.items()
        },
    }
    return rules, measurements, reasons


def measure_horovod(
    sw: Sweep, p: Plan, base_env: Mapping[str, str], rounds: int
) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """Horovod knobs: training-step-shaped exchange (primary) and 64 MiB in place (guard)."""
    results: dict[str, list[dict[str, Any]]] = {}
    cands = [{}, *p.horovod]
    n, total = 0, rounds * len(cands)
    for r in range(rounds):
        for cand in cands:
            label = " ".join(f"{k}={v}" for k, v in cand.items()) or "Horovod defaults"
            if cand and sw.over_budget(f"round {r + 1} {label}"):
                continue
            n += 1
            doc = sw.check(
                "allreduce_inplace.py",
                "--lib horovod --grads --iters 5",
                dict(base_env) | cand,
                label,
            )
            if doc["mismatches"]:
                raise HpcenvError(f"tune: {label}: {doc['mismatches']} wrong Horovod sums")
            results.setdefault(label, []).append(doc)
            sw.echo(
                f"  [{n}/{total}] {label}: gradient step {doc['grads_step_ms']:.3f} ms, "
                f"64 MiB {doc['busbw_GBps']:.2f} GB/s"
            )
    best = {
        k: {
            "grads_step_ms": min(d["grads_step_ms"] for d in v),
            "busbw_GBps": max(d["busbw_GBps"] for d in v),
        }
        for k, v in results.items()
    }
    base = best["Horovod defaults"]
    env: dict[str, str] = {}
    reasons: list[str] = []
    winner = None
    for cand in p.horovod:
        label = " ".join(f"{k}={v}" for k, v in cand.items())
        b = best.get(label)
        if b is None:
            continue
        faster = base["grads_step_ms"] / b["grads_step_ms"]
        good = faster >= HOROVOD_MARGIN and b["busbw_GBps"] >= KEEP_WITHIN * base["busbw_GBps"]
        if good and (winner is None or faster > winner[2]):
            winner = (label, cand, faster)
    if winner:
        # Recorded, not applied: a gradient-only exchange leaves the cores idle between
        # allreduces, training does not. In `hpcenv bench`'s MNIST section (2026-11-22) the
        # winner here, HOROVOD_CYCLE_TIME=0.5 (1.9x on this exchange), made training steps
        # ~10 % slower (9.3 vs 8.2 ms): the background thread wakes 2x as often on a core the
        # compute thread needs.
        reasons.append(
            f"Horovod {winner[0]}: gradient-only exchange {winner[2]:.2f}x faster "
            "than Horovod's defaults; NOT applied: on this exchange the cores idle "
            "between allreduces, in training they compute (bench MNIST: slower)"
        )
    else:
        reasons.append(
            f"Horovod: no knob made the gradient-shaped step {HOROVOD_MARGIN - 1:.0%} "
            "faster without slowing 64 MiB: Horovod's defaults kept"
        )
    return env, {"best": best}, reasons


def measure(
    site: Any,
    image: str,
    image_id: str,
    placement: Any,
    run: Runner,
    mpirun: str,
    work: Path,
    *,
    lock: Mapping[str, Any],
    gpu_visible: bool = False,
    budget_s: float = 300,
    quick: bool = False,
    echo: Callable[[str], None] = print,
    rules_mount: str = RULES_MOUNT,
) -> MeasuredTuning:
    """Run the sweep and return the tuning (not yet saved); ``work`` is the host folder the
    container sees at ``rules_mount`` (rules files under test are written there)."""
    from hpcenv.tuning.apply import layout_of

    layout = layout_of(placement)
    p = plan(lock, site, layout, gpu_visible)
    for line in p.lines():
        echo(line)
    sw = Sweep(run, mpirun, work, layout, budget_s, echo, quick, rules_mount)
    rounds = 1 if quick else 3  # a shared 2-core machine: 3 rounds, best of each, survive a spike
    from hpcenv.jobs.launchenv import launch_env

    base_env = launch_env(site, placement)
    rules: list[Rule] = []
    measurements: dict[str, Any] = {"mpirun": mpirun, "base_env": base_env}
    reasons = [
        f"measured with `{mpirun}` in one container of {image}, {rounds} interleaved "
        f"round(s) ({1 if quick else TRANSPORT_ROUNDS} for transports), budget "
        f"{budget_s:.0f} s"
    ]
    transport: dict[str, str] = {}
    if p.transports:
        echo("Open MPI transports, allreduce 8 B..64 MiB:")
        transport, default_runs, tm, why = measure_transport(
            sw, p, base_env, 1 if quick else TRANSPORT_ROUNDS
        )
        # the coll_tuned stage adds `rounds` default runs of its own: keep the default's best-of
        # as deep as each candidate's plus those (6 vs 3), not 11 vs 3
        default_runs = default_runs[-rounds:]
        measurements["transport"] = tm
        reasons += why
    else:
        default_runs = []
    if p.openmpi:
        echo(
            "Open MPI coll_tuned allreduce, 8 B..64 MiB"
            + (
                f" (over {' '.join(f'{k}={v}' for k, v in transport.items())}):"
                if transport
                else ":"
            )
        )
        rules, m, why = measure_openmpi(sw, p, base_env | transport, rounds, default_runs)
        measurements["openmpi"] = m
        reasons += why
    env: dict[str, str] = dict(transport)
    if p.horovod and quick:
        reasons.append("Horovod knobs not swept (--quick): none is applied by default anyway")
    elif p.horovod:
        echo("Horovod (over MPI), with the chosen rules in force:")
        draft = MeasuredTuning(
            site=site.name,
            image=image,
            image_id=image_id,
            layout=layout,
            mpi=p.mpi,
            date="-",
            collective_rules=rules,
        )
        if rules:
            (work / RULES_NAME).write_text(draft.rules_text() or "", encoding="utf-8")
        hv_env = base_env | transport | environment(draft, sw.rules_path)
        hv_chosen, m, why = measure_horovod(sw, p, hv_env, rounds)
        env |= hv_chosen
        measurements["horovod"] = m
        reasons += why
    if sw.skipped:
        reasons.append(f"time budget ({budget_s:.0f} s) ran out: skipped " + "; ".join(sw.skipped))
    measurements["runs"] = sw.log
    return MeasuredTuning(
        site=site.name,
        image=image,
        image_id=image_id,
        layout=layout,
        mpi=p.mpi,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=round(sw.elapsed, 1),
        collective_rules=rules,
        env=env,
        reasons=reasons,
        rendered_only=p.rendered_only,
        measurements=json.loads(json.dumps(measurements)),
    )


def mpirun_line(site: Any, placement: Any) -> str:
    """``mpirun`` with the placement's Open MPI flags (how hpcenv launches inside one image)."""
    from hpcenv.jobs.launchers import launch_argv

    return shlex.join(launch_argv(site, placement, launcher="mpirun"))


def read_lock(run: Runner) -> dict[str, Any]:
    res = run(f"cat {LOCK_IN_IMAGE}", {}, 60)
    if not res.ok:
        raise EnvironmentProblem(f"the image has no {LOCK_IN_IMAGE}: not an hpcenv image?")
    try:
        doc: dict[str, Any] = json.loads(res.stdout)
    except ValueError as err:
        raise EnvironmentProblem(f"{LOCK_IN_IMAGE} in the image is not JSON: {err}") from None
    return doc
