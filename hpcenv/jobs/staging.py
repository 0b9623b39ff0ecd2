"""Data staging: manifests, and the job chains that move data around training and inference.

A manifest (``.hpcenv-manifest``) has one line per file, ``SIZE  SHA256  RELATIVE-PATH``,
sorted by path; after dropping the size column it is what ``sha256sum -c`` reads, so jobs verify
with coreutils alone (templates/jobs/_lib.sh). This module writes and checks the same format.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hpcenv.errors import ConfigError
from hpcenv.jobs.spec import MANIFEST_NAME, ArraySpec, JobSpec, StageIn, StageOut, Stitch


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_lines(root: Path) -> list[str]:
    """Manifest lines for every file under ``root`` (the manifest itself excluded)."""
    if not root.is_dir():
        raise ConfigError(f"not a directory: {root}")
    rels = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if name == MANIFEST_NAME:
                continue
            if "\n" in rel or "\\" in rel:
                raise ConfigError(f"file name not allowed in a manifest: {rel!r}")
            rels.append(rel)
    rels.sort(key=lambda r: r.encode())
    return [f"{(root / r).stat().st_size}  {_sha256(root / r)}  {r}" for r in rels]


def write_manifest(root: Path, out: Path | None = None) -> Path:
    """Write ``root/.hpcenv-manifest`` (or ``out``) atomically; returns its path."""
    out = out or root / MANIFEST_NAME
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in manifest_lines(root)))
    tmp.replace(out)
    return out


def verify_manifest(root: Path, manifest: Path) -> list[str]:
    """Problems found checking ``root`` against ``manifest`` (empty list: verified)."""
    problems = []
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        size, digest, rel = line.split("  ", 2)
        path = root / rel
        if not path.is_file():
            problems.append(f"missing: {rel}")
        elif path.stat().st_size != int(size):
            problems.append(f"size: {rel} is {path.stat().st_size}, manifest says {size}")
        elif _sha256(path) != digest:
            problems.append(f"sha256: {rel} differs")
    return problems


def training_chain(
    *,
    name: str,
    dataset: str,
    scratch: str,
    command: list[str],
    results: str,
    nodes: int = 1,
    ranks_per_node: int | None = None,
    image: str | None = None,
    recipe: str | None = None,
    force: bool = False,
) -> list[JobSpec]:
    """stage-in -> train -> stage-out, to be submitted with afterok between them.

    1. ``<name>-stage-in``: ``dataset`` -> ``<scratch>/<name>/dataset`` (verified, once).
    2. ``<name>``: that copy -> node-local storage on every node (verified), run ``command``
       (``{data}`` and ``{output}`` name the staged data and the results dir), results ->
       ``<scratch>/<name>/results`` (atomic, with a manifest).
    3. ``<name>-stage-out``: ``<scratch>/<name>/results`` -> ``results`` (atomic; an existing
       ``results`` is replaced only with ``force``).
    """
    staged = f"{scratch}/{name}/dataset"
    run_results = f"{scratch}/{name}/results"
    return [
        JobSpec(
            name=f"{name}-stage-in",
            stage_in=StageIn(source=dataset, dest=staged, per_node=False),
            launch="single",
            cores_per_rank=1,
        ),
        JobSpec(
            name=name,
            command=command,
            nodes=nodes,
            ranks_per_node=ranks_per_node,
            image=image,
            recipe=recipe,
            stage_in=StageIn(source=staged, per_node=True),
            stage_out=StageOut(dest=run_results, force=True),
        ),
        JobSpec(
            name=f"{name}-stage-out",
            stage_out=StageOut(source=run_results, dest=results, force=force),
            launch="single",
            cores_per_rank=1,
        ),
    ]


def array_chain(
    *,
    name: str,
    command: list[str],
    chunks: int,
    parts: str,
    output: str,
    parallel: int | None = None,
    prefix: str = "part-",
    suffix: str = "",
    image: str | None = None,
    force: bool = False,
) -> list[JobSpec]:
    """Domain-decomposed inference: an array of ``chunks`` one-core tasks (``{task}`` is the
    chunk index; each writes ``<parts>/<prefix><task><suffix>``), then a job that stitches the
    parts in index order into ``output`` (submitted afterok on the whole array)."""
    return [
        JobSpec(
            name=name,
            command=command,
            launch="single",
            cores_per_rank=1,
            image=image,
            array=ArraySpec(count=chunks, parallel=parallel),
        ),
        JobSpec(
            name=f"{name}-stitch",
            launch="single",
            cores_per_rank=1,
            stitch=Stitch(
                parts=parts, count=chunks, output=output, prefix=prefix, suffix=suffix, force=force
            ),
        ),
    ]
