"""Section ``mpi-abi``: what the MPI-5 standard ABI costs (issue 38).

One MPI, two builds of one program: ``scripts/allreduce_abi.c`` compiled by MPICH 5.0.2's
``mpicc`` (MPICH's own ABI, ``libmpi.so.12``) and by its ``mpicc_abi`` (the standard ABI,
``libmpi_abi.so.1``: what an ``abi``-model image's programs link), from the site-like prefix
``scripts/mpi-abi-setup.sh`` installs (``$HPCENV_SITE_ROOT/mpich-5``, PyPI's wheel). Both run on
this host under the same ``mpiexec`` (Hydra), NP ranks, in interleaved rounds (the order turns
each round): the 64 MiB allreduce's bus bandwidth (exact sums checked) and the start-up time of
a job that only calls ``MPI_Init`` and ``MPI_Finalize``. The figures are the medians of the
rounds' paired ratios (ABI / native): a busy moment hits both builds of a round alike.

The goals are issue 38's: bandwidth >= 0.97 and start-up <= 1.05 of the native build.
Not in ``--quick``. Run it alone with ``hpcenv bench --site local --section mpi-abi``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from hpcenv import mpi_abi
from hpcenv.bench.context import NP, BenchContext, MiB
from hpcenv.bench.report import Headline, Section, Table, fmt_num, fmt_ratio
from hpcenv.knowledge.facts import mpi_soname
from hpcenv.sweep.measure import round_order

SIZE = 64 * MiB
ITERS = 10  # allreduces timed per run (after one warm-up)
ROUNDS = (
    11  # interleaved; 7 gave medians 0.94-0.99 on a quiet machine (2026-11-28), rounds 0.89-1.06
)
BANDWIDTH_GOAL = ">= 0.97"  # ABI / native busbw, 64 MiB (issue 38)
STARTUP_GOAL = "<= 1.05"  # ABI / native start-up time (issue 38)
SOURCE = Path(__file__).with_name("scripts") / "allreduce_abi.c"
# name -> (compiler in the prefix's bin/, the library the program must NEED)
BUILDS = {"native": ("mpicc", mpi_soname("mpich")), "abi": ("mpicc_abi", mpi_abi.soname())}


def mpich5_prefix() -> Path:
    """MPICH 5.0.2 as ``scripts/mpi-abi-setup.sh`` installs it (``make host``)."""
    return Path(os.environ.get("HPCENV_SITE_ROOT", "/opt/site")) / "mpich-5"


def _needed(binary: Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(binary)], capture_output=True, text=True, errors="replace"
    ).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def compile_builds(prefix: Path, work: Path) -> dict[str, Path]:
    """The two binaries, each checked to link its library and not the other's."""
    binaries: dict[str, Path] = {}
    for name, (compiler, library) in BUILDS.items():
        out = work / f"allreduce-{name}"
        argv = [str(prefix / "bin" / compiler), "-O2", "-o", str(out), str(SOURCE)]
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {proc.stderr.strip()[-600:]}")
        needed = _needed(out)
        others = {lib for _, lib in BUILDS.values()} - {library}
        if library not in needed or others & set(needed):
            raise RuntimeError(f"{out.name} links {needed}, not {library} alone")
        binaries[name] = out
    return binaries


def run_once(prefix: Path, binary: Path, size: int, iters: int) -> tuple[dict[str, Any], float]:
    """One job of NP ranks: rank 0's JSON line, and the job's wall time."""
    argv = [str(prefix / "bin" / "mpiexec"), "-n", str(NP), str(binary), str(size), str(iters)]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{binary.name} exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    if doc["ranks"] != NP or doc["mismatches"] or not doc["library"].startswith("MPICH"):
        raise RuntimeError(f"{binary.name}: {doc}")
    return doc, seconds


def mpi_abi_section(ctx: BenchContext) -> Section:
    sec = Section("mpi-abi", f"The MPI-5 standard ABI against MPICH's own ({NP} ranks, 64 MiB)")
    prefix = mpich5_prefix()
    if not (prefix / "bin" / "mpicc_abi").exists():
        why = f"{prefix} has no MPICH 5 (`make host` runs scripts/mpi-abi-setup.sh)"
        sec.text.append(f"Not measured: {why}.")
        for what, goal in (("bandwidth", BANDWIDTH_GOAL), ("start-up", STARTUP_GOAL)):
            sec.headline.append(
                Headline(f"MPI-5 ABI / native {what}", "not measured", "", goal, None, why)
            )
        return sec
    work = ctx.work / "mpi-abi"
    work.mkdir(parents=True, exist_ok=True)
    binaries = compile_builds(prefix, work)
    rounds = 3 if ctx.quick else ROUNDS
    runs: list[dict[str, Any]] = []
    bw_ratios: list[float] = []
    start_ratios: list[float] = []
    for r in range(rounds):
        got: dict[str, dict[str, float]] = {}
        for name in round_order(list(BUILDS), r):
            _, startup = run_once(prefix, binaries[name], 0, 0)
            doc, _ = run_once(prefix, binaries[name], SIZE, ITERS)
            got[name] = {"busbw_GBps": float(doc["busbw_GBps"]), "startup_s": startup}
            runs.append({"round": r + 1, "build": name, **got[name], "library": doc["library"]})
            ctx.say(
                sec.key,
                f"#{r + 1} {name}: {doc['busbw_GBps']:.3g} GB/s, start-up {startup:.2f} s",
            )
        bw_ratios.append(got["abi"]["busbw_GBps"] / got["native"]["busbw_GBps"])
        start_ratios.append(got["abi"]["startup_s"] / got["native"]["startup_s"])
    bw, start = statistics.median(bw_ratios), statistics.median(start_ratios)

    def median_of(build: str, key: str) -> float:
        return statistics.median(x[key] for x in runs if x["build"] == build)

    sec.data = {
        "prefix": str(prefix),
        "runs": runs,
        "busbw_ratios": bw_ratios,
        "startup_ratios": start_ratios,
        "libraries": {name: lib for name, (_, lib) in BUILDS.items()},
    }
    sec.text.append(
        f"`{SOURCE.name}` compiled by MPICH 5.0.2's `mpicc` (links libmpi.so.12) and `mpicc_abi` "
        f"(links libmpi_abi.so.1; checked with readelf) from {prefix}, run on this host by its "
        f"`mpiexec -n {NP}` in {rounds} interleaved rounds: {ITERS} allreduces of 64 MiB (float32, "
        "Sum, exact sums checked) and a job of MPI_Init + MPI_Finalize for start-up (wall time of "
        "mpiexec). Ratios are medians of each round's ABI / native."
    )
    sec.tables.append(
        Table(
            "",
            ["build", "library", "busbw GB/s (median)", "start-up s (median)"],
            [
                [
                    name,
                    lib,
                    fmt_num(median_of(name, "busbw_GBps")),
                    fmt_num(median_of(name, "startup_s")),
                ]
                for name, (_, lib) in BUILDS.items()
            ],
            "",
        )
    )
    spread = f"rounds {min(bw_ratios):.2f}-{max(bw_ratios):.2f}"
    sec.headline.append(
        Headline(
            "MPI-5 ABI / native bandwidth, 64 MiB allreduce (MPICH 5.0.2, same program)",
            f"{fmt_num(median_of('abi', 'busbw_GBps'))} vs "
            f"{fmt_num(median_of('native', 'busbw_GBps'))} GB/s ({spread})",
            fmt_ratio(bw),
            BANDWIDTH_GOAL,
            bw,
        )
    )
    spread = f"rounds {min(start_ratios):.2f}-{max(start_ratios):.2f}"
    sec.headline.append(
        Headline(
            "MPI-5 ABI / native start-up (MPI_Init + MPI_Finalize job, MPICH 5.0.2)",
            f"{fmt_num(median_of('abi', 'startup_s'))} vs "
            f"{fmt_num(median_of('native', 'startup_s'))} s ({spread})",
            fmt_ratio(start),
            STARTUP_GOAL,
            start,
        )
    )
    return sec
