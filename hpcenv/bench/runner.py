"""``hpcenv bench``: run every section in one go and write report.md, report.json and plots.

Order: start-up, memory copy, allreduce (container tax + flavours), tuning, the MPI
implementation as a candidate (PyPI's Open MPI and MPICH wheels), MNIST, K-Means,
two nodes (the local-2node rehearsal), the public training benchmark (its own image, built
through a user recipe), CLI, the user-recipe rebuild, then build cost (they load
the 2 cores for minutes, which would disturb the others), and the targets one run cannot
measure (:mod:`hpcenv.bench.targets`) last. One container of the image serves every in-image
measurement; it is always removed at the end.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from hpcenv.bench.context import (
    HOST_BENCH,
    HOST_CHECKS,
    IMAGE_BENCH,
    IMAGE_CHECKS,
    IMAGE_MNIST,
    IMAGE_WORK,
    NP,
    BenchConfig,
    BenchContext,
    sha256_file,
)
from hpcenv.bench.report import BenchReport, Headline, Section, Table, fmt_mb, fmt_num, write_report
from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.shells import Container, podman

SectionFn = Callable[[BenchContext], Section]
NEEDS_CONTAINER = {
    "startup",
    "memcopy",
    "allreduce",
    "tuning",
    "mpi-impl",
    "mpi-abi",
    "likeforlike",
    "mnist",
    "kmeans",
}
CHECK_SCRIPTS = (
    "allreduce_mpi.py",
    "allreduce_horovod.py",
    "allreduce_torch_gloo.py",
    "allreduce_inplace.py",
    "mnist_horovod.py",
    "_bench.py",
    "_idx.py",
)
NEEDS_MEASURED = {"tuning", "mpi-impl", "mnist", "likeforlike"}


def cli_section(ctx: BenchContext) -> Section:
    """Render every built-in site x recipe; ``hpcenv --help``; both as subprocesses, best of N."""
    sec = Section("cli", "CLI: render everything, --help")
    n = 3 if ctx.quick else 5
    code = (
        "import json, time; t0 = time.perf_counter(); from hpcenv.golden import golden_files; "
        "t1 = time.perf_counter(); f = golden_files(); t2 = time.perf_counter(); "
        "t3 = time.perf_counter(); golden_files(); t4 = time.perf_counter(); "
        "print(json.dumps({'files': len(f), 'pairs': len({k.split('/')[0] for k in f}), "
        "'import_s': t1 - t0, 'first_s': t2 - t1, 'again_s': t4 - t3}))"
    )
    renders = []
    for _ in range(n):
        res = ctx.host.run(f'{sys.executable} -c "{code}"', timeout=300)
        t_total = res.seconds
        doc = res.require_doc()
        renders.append(doc | {"process_s": t_total})
    # this install's command (the one beside this python), not another hpcenv found on PATH
    own = Path(sys.executable).with_name("hpcenv")
    exe = str(own) if own.is_file() else shutil.which("hpcenv") or str(own)
    helps = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [exe, "--help"], capture_output=True, text=True, errors="replace", check=False
        )
        helps.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise EnvironmentProblem(f"`{exe} --help` failed: {proc.stderr.strip()[-200:]}")
    best = min(renders, key=lambda d: d["process_s"])
    pairs, files = best["pairs"], best["files"]
    ctx.say(
        sec.key,
        f"render {pairs} site x recipe ({files} files): process "
        f"{best['process_s']:.2f} s, in-process again {min(d['again_s'] for d in renders):.3f}"
        f" s; hpcenv --help {min(helps):.3f} s",
    )
    sec.data = {"render": renders, "help_s": helps}
    sec.tables.append(
        Table(
            "",
            ["what", f"best of {n} s", "median s"],
            [
                [
                    f"python -c golden_files(): all {pairs} site x recipe pairs ({files} files), whole "
                    "process",
                    fmt_num(best["process_s"]),
                    fmt_num(sorted(d["process_s"] for d in renders)[n // 2]),
                ],
                [
                    "  of which importing hpcenv.golden",
                    fmt_num(min(d["import_s"] for d in renders)),
                    "",
                ],
                [
                    "  of which the first render of all pairs",
                    fmt_num(min(d["first_s"] for d in renders)),
                    "",
                ],
                [
                    "  render all pairs again, same process",
                    fmt_num(min(d["again_s"] for d in renders)),
                    fmt_num(sorted(d["again_s"] for d in renders)[n // 2]),
                ],
                [
                    "`hpcenv --help` (subprocess)",
                    fmt_num(min(helps)),
                    fmt_num(sorted(helps)[n // 2]),
                ],
            ],
        )
    )
    sec.headline.append(
        Headline(
            f"CLI: render all {pairs} site x recipe pairs (process incl. imports; again in-process)",
            f"{fmt_num(best['process_s'])} s; {fmt_num(min(d['again_s'] for d in renders))} s",
            "",
        )
    )
    sec.headline.append(Headline("CLI: `hpcenv --help`", f"{fmt_num(min(helps))} s", ""))
    return sec


def _sections() -> dict[str, SectionFn]:
    from hpcenv.bench.buildcost import build_section, full_build_section
    from hpcenv.bench.ccl import ccl_section
    from hpcenv.bench.comm import (
        allreduce_section,
        likeforlike_section,
        memcopy_section,
        mnist_section,
        startup_section,
        tuning_section,
    )
    from hpcenv.bench.compute import kmeans_section
    from hpcenv.bench.mpiabi import mpi_abi_section
    from hpcenv.bench.mpiimpl import mpi_impl_section
    from hpcenv.bench.sifbuild import sif_section
    from hpcenv.bench.targets import targets_section
    from hpcenv.bench.training import training_section
    from hpcenv.bench.twonode import two_node_section
    from hpcenv.bench.userbuild import rebuild_section

    return {
        "startup": startup_section,
        "memcopy": memcopy_section,
        "allreduce": allreduce_section,
        "tuning": tuning_section,
        "mpi-impl": mpi_impl_section,
        "mpi-abi": mpi_abi_section,
        "likeforlike": likeforlike_section,
        "mnist": mnist_section,
        "ccl": ccl_section,
        "kmeans": kmeans_section,
        "two-node": two_node_section,
        "training": training_section,
        "cli": cli_section,
        "rebuild": rebuild_section,
        "sif": sif_section,
        "build": build_section,
        "full-build": full_build_section,
        "targets": targets_section,
    }


SECTION_NAMES = (
    "startup",
    "memcopy",
    "allreduce",
    "tuning",
    "mpi-impl",
    "mpi-abi",
    "likeforlike",
    "mnist",
    "ccl",
    "kmeans",
    "two-node",
    "training",
    "cli",
    "rebuild",
    "sif",
    "build",
    "targets",
)
# `hpcenv bench --quick`: the headline ratios in minutes (issue 39): container tax (image vs
# bare host), tuning gain and floor (all 13 sizes, every round of a full run), time to first
# step and step time (MNIST), one training run against the project's documented launch; the
# rest (flavours, MPI candidates, K-Means, two nodes, builds, CLI) is `make bench`'s.
QUICK_SECTIONS = ("startup", "memcopy", "allreduce", "tuning", "mnist", "training", "targets")
EXTRA_SECTIONS = ("full-build",)  # only when asked for: a 10+ min cold build of the full image


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {mem}, Linux {platform.release()}"


def _checks_mount(image: str) -> tuple[list[str], str]:
    """Mount this checkout's checks over the image's unless the baked copies are identical."""
    proc = podman(
        "run",
        "--rm",
        image,
        "bash",
        "-c",
        f"cd {IMAGE_CHECKS} 2>/dev/null && sha256sum " + " ".join(CHECK_SCRIPTS),
        check=False,
        timeout=120,
    )
    baked = {}
    for line in proc.stdout.splitlines():
        digest, _, name = line.partition("  ")
        baked[name.strip()] = digest
    here = {n: sha256_file(HOST_CHECKS / n) for n in CHECK_SCRIPTS}
    if baked == here:
        return (
            [],
            f"check scripts baked in the image at {IMAGE_CHECKS} are byte-identical to hpcenv/checks",
        )
    differ = sorted(n for n in CHECK_SCRIPTS if baked.get(n) != here[n])
    return (
        [f"{HOST_CHECKS}:{IMAGE_CHECKS}:ro"],
        f"the image's {IMAGE_CHECKS} lacks or differs in {', '.join(differ)}: this checkout's "
        "hpcenv/checks is mounted over it, so host and image run the same scripts",
    )


def measured_tuning(ctx: BenchContext, meta: dict[str, Any]) -> None:
    """The measured tuning in force for the image (``hpcenv tune --measure``'s file); when none
    applies, measure it now in the bench's container and save it, so the bench's "hpcenv
    default" is exactly what ``submit``/``smoke`` would use afterwards."""
    from hpcenv.jobs.measured import lookup
    from hpcenv.jobs.runtimes.registry import get_runtime
    from hpcenv.sweep.measure import measure, mpirun_line, read_lock
    from hpcenv.tuning.apply import RULES_NAME
    from hpcenv.tuning.store import save

    ctr = ctx.ctr()
    found = lookup(ctx.site, ctx.tuning, ctx.image)
    if found is not None and found.tuning is not None:
        ctx.measured = found.tuning
        why = f"measured tuning in force: {found.path} ({found.why})"
    else:
        if found is not None and found.warning:
            ctx.echo(f"warning: {found.warning}")
        iid = get_runtime("podman").image_identity(ctx.image)  # the bench runs podman
        if iid is None:
            ctx.notes.append(f"no measured tuning: the digest of {ctx.image} is unknown")
            return
        ctx.echo("== measuring tuning (hpcenv tune --measure) for the hpcenv default")
        t0 = time.perf_counter()
        ctx.measured = measure(
            ctx.site,
            ctx.image,
            iid,
            ctx.tuning,
            lambda c, e, to: ctr.run(c, e, to),
            mpirun_line(ctx.site, ctx.tuning),
            ctx.work,
            lock=read_lock(lambda c, e, to: ctr.run(c, e, to)),
            budget_s=240 if not ctx.quick else 60,
            quick=ctx.quick,
            echo=ctx.echo,
            rules_mount=IMAGE_WORK,
        )
        path = save(ctx.measured)
        why = (
            f"measured tuning: none was in force, so this run measured it "
            f"({time.perf_counter() - t0:.0f} s) and saved it to {path}"
        )
    rules = ctx.measured.rules_text()
    if rules:
        (ctx.work / RULES_NAME).write_text(rules, encoding="utf-8")
        (ctx.out / RULES_NAME).write_text(rules, encoding="utf-8")
    ctx.notes.append(why)
    meta["measured_tuning"] = ctx.measured.model_dump()
    ctx.echo(why)


def run_bench(cfg: BenchConfig, echo: Callable[[str], None] = print) -> BenchReport:
    from hpcenv import naming
    from hpcenv.jobs.placement import place
    from hpcenv.site import load_site

    t_start = time.perf_counter()
    started = datetime.now(UTC)
    names = list(cfg.sections or (QUICK_SECTIONS if cfg.quick else SECTION_NAMES))
    unknown = [n for n in names if n not in SECTION_NAMES + EXTRA_SECTIONS]
    if unknown:
        raise ConfigError(
            f"unknown bench section(s) {', '.join(unknown)}; valid: "
            + ", ".join(SECTION_NAMES + EXTRA_SECTIONS)
        )
    host_side = {"startup", "memcopy", "allreduce"} & set(names)
    missing = [m for m in ("mpi4py", "numpy") if host_side and find_spec(m) is None]
    if "build" in names and find_spec("hpccm") is None:
        missing.append("hpccm")
    if missing:
        raise EnvironmentProblem(
            f"{', '.join(missing)} not importable by {sys.executable}: the bench needs its extra "
            "(pip install -e '.[bench]')"
        )
    if host_side and shutil.which("mpirun") is None:
        raise EnvironmentProblem("no mpirun on the host for the bare-host baseline; make host")
    site = load_site(cfg.site)
    image = cfg.image or naming.image_tag(recipe="horovod-cpu", site=site.name)
    cfg.out = cfg.out.resolve()  # bind mounts need absolute paths
    cfg.out.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(cfg=cfg, image=image, echo=echo, site=site, tuning=place(site, 1, NP))
    ctx.shared["machine"] = machine()
    meta: dict[str, Any] = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "started": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "site": site.name,
        "image": image,
        "quick": cfg.quick,
        "sections": names,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "python": sys.version.split()[0],
        "command": " ".join(sys.argv),
        "notes": ctx.notes,
    }
    report = BenchReport(meta)
    fns = _sections()
    need_ctr = any(n in NEEDS_CONTAINER for n in names)
    if need_ctr or {"build", "full-build", "rebuild", "sif", "training"} & set(names):
        if podman("image", "exists", image, check=False).returncode != 0:
            raise EnvironmentProblem(
                f"image {image} does not exist; build it (make build-local) or pass --image"
            )
        doc = podman("image", "inspect", "--format", "{{.Id}} {{.Size}} {{.Created}}", image)
        iid, size, *created = doc.stdout.split()
        meta |= {
            "image_id": iid[:12],
            "image_size_bytes": int(size),
            "image_created": " ".join(created[:2]),
        }
        echo(f"image {image} ({iid[:12]}, {fmt_mb(int(size))})")
    try:
        if need_ctr:
            from hpcenv.datasets import prepare_mnist

            mnist = prepare_mnist().directory
            volumes, why = _checks_mount(image)
            ctx.notes.append(why)
            volumes += [
                f"{mnist}:{IMAGE_MNIST}:ro",
                f"{HOST_BENCH}:{IMAGE_BENCH}:ro",
                f"{ctx.work}:{IMAGE_WORK}:ro",
            ]
            ctx.container = Container(image, volumes)
            start_s = ctx.container.start()
            echo(f"container {ctx.container.name} started in {start_s:.1f} s; {why}")
            if NEEDS_MEASURED & set(names):
                measured_tuning(ctx, meta)
        for name in names:
            echo(f"== {name}")
            t0 = time.perf_counter()
            try:
                if name in NEEDS_CONTAINER and ctx.container is None:
                    raise EnvironmentProblem("no container")
                sec = fns[name](ctx)
            except Exception as err:  # one failed section must not lose the others
                sec = Section(name, name, error=f"{type(err).__name__}: {err}")
                echo(f"[{name}] FAILED: {sec.error}")
            sec.seconds = time.perf_counter() - t0
            report.sections.append(sec)
            meta["seconds"] = time.perf_counter() - t_start
            write_report(report, cfg.out)  # partial results survive an interruption
    finally:
        if ctx.container is not None:
            ctx.container.stop()
        shutil.rmtree(cfg.out / "_work" / "contexts", ignore_errors=True)
    meta["seconds"] = time.perf_counter() - t_start
    write_report(report, cfg.out)
    return report
