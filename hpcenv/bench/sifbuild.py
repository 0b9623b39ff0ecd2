"""SIF conversion: the site's squashfs compressor (``build.sif_compression``) against Apptainer's
default (gzip), in one run.

The bench image is saved once as the site's archive and converted twice by the same Apptainer,
the site's compressor first (the archive was just written, so both read it from the page
cache). Each SIF must then run ``import torch, horovod, mpi4py``: a faster SIF that does not
run is not a result, and the section fails. Times are whole ``apptainer build`` processes.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from hpcenv.bench.context import BenchContext
from hpcenv.bench.report import Headline, Section, Table, fmt_mb, fmt_num, fmt_ratio, ratio
from hpcenv.engines import ArchiveFormat
from hpcenv.naming import SquashfsCompressor

SIF_GOAL = ">= 1.0"  # the site's compressor builds no slower than Apptainer's default
RUNS = "import torch, horovod, mpi4py; print(torch.__version__)"
DEFAULT = "Apptainer's default (gzip)"


def _convert(
    archive: Path, sif: Path, fmt: ArchiveFormat, compression: SquashfsCompressor | None
) -> dict[str, Any]:
    """One ``apptainer build`` from the archive, timed, and the SIF run once; the SIF is removed."""
    from hpcenv.apptainer import Apptainer

    runner = Apptainer()
    start = time.monotonic()
    runner.build_from_oci_archive(archive, sif, fmt=fmt, compression=compression)
    seconds = time.monotonic() - start
    size = sif.stat().st_size
    proc = runner.exec(sif, ["python3", "-c", RUNS])
    sif.unlink(missing_ok=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"the SIF built with {compression or 'gzip'} does not run `{RUNS}`: {tail[0]}"
        )
    return {"seconds": seconds, "bytes": size, "torch": proc.stdout.strip()}


def sif_headline(
    site_s: float | None, default_s: float | None, compression: str, note: str = ""
) -> Headline:
    speedup = ratio(default_s, site_s)
    return Headline(
        f"SIF conversion: the site's compressor ({compression}) vs {DEFAULT}",
        f"{fmt_num(site_s)} s vs {fmt_num(default_s)} s" if site_s is not None else "not measured",
        fmt_ratio(speedup),
        goal=SIF_GOAL,
        value=speedup,
        note=note,
    )


def sif_section(ctx: BenchContext) -> Section:
    from hpcenv.engines import get_engine

    sec = Section("sif", "SIF conversion: the site's squashfs compressor vs Apptainer's default")
    compression = ctx.site.build.sif_compression
    if compression is None:
        sec.text.append(
            f"Site `{ctx.site.name}` names no `build.sif_compression`: its SIFs use {DEFAULT}, "
            "so there is nothing to compare."
        )
        return sec
    sec.text.append(
        f"`{ctx.image}` saved as {ctx.site.build.archive} and converted by `apptainer build` "
        f"with `--mksquashfs-args '-comp {compression}'` (the site's `build.sif_compression`) and "
        f"with {DEFAULT}; each SIF then runs `{RUNS}`. Speed-up: default time / site time."
    )
    if ctx.quick:
        sec.text.append("`--quick`: no conversions run.")
        sec.headline.append(sif_headline(None, None, compression, "--quick runs no conversions."))
        return sec
    folder = ctx.work / "sif"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / "image.tar"
    fmt = ctx.site.build.archive
    try:
        ctx.say(sec.key, f"saving {ctx.image} as {fmt} ...")
        get_engine(ctx.site.build.engine).save(ctx.image, archive, fmt)
        runs: dict[str, dict[str, Any]] = {}
        variants: list[tuple[str, SquashfsCompressor | None]] = [
            (compression, compression),
            (DEFAULT, None),
        ]
        for label, comp in variants:
            ctx.say(sec.key, f"apptainer build with {label} ...")
            runs[label] = _convert(archive, folder / "image.sif", fmt, comp)
            ctx.say(sec.key, f"{label}: {runs[label]['seconds']:.0f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    site_run, default_run = runs[compression], runs[DEFAULT]
    sec.data = {"compression": compression, "runs": runs}
    sec.tables.append(
        Table(
            "",
            ["compressor", "apptainer build s", "SIF size", "runs the stack"],
            [
                [label, fmt_num(r["seconds"]), fmt_mb(r["bytes"]), f"torch {r['torch']}"]
                for label, r in runs.items()
            ],
        )
    )
    size = ratio(site_run["bytes"], default_run["bytes"])
    sec.headline.append(
        sif_headline(
            site_run["seconds"],
            default_run["seconds"],
            compression,
            f"the {compression} SIF is {fmt_ratio(size)} the default's size",
        )
    )
    return sec
