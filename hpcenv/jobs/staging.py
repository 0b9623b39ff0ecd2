"""Data staging: manifests, and the job chains that move data around training and inference.

A manifest (``.hpcenv-manifest``) has one line per file, ``SIZE  SHA256  RELATIVE-PATH``,
sorted by the path's bytes; after dropping the size column it is what ``sha256sum -c`` reads, so
jobs verify with coreutils alone (templates/jobs/_lib.sh). This module writes and checks the
same format under the same rules: datasets hold regular files and folders only (symbolic links
and special files are refused, never followed), names with a newline or a backslash cannot be
listed, and a manifest entry that would leave the dataset folder (``..``, absolute, through a
link) is refused. Files present but not listed are reported.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from hpcenv.errors import ConfigError
from hpcenv.jobs.spec import MANIFEST_NAME, ArraySpec, JobSpec, StageIn, StageOut, Stitch
from hpcenv.reads import read_bounded

MANIFEST_MAX_BYTES = 256 << 20  # about two million files at ~120 bytes a line
_LINE = re.compile(rb"^([0-9]+)  ([0-9a-f]{64})  (.+)$")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _show(rel: bytes | str) -> str:
    """A name as written when it is plain text, else quoted with its escapes."""
    text = os.fsdecode(rel) if isinstance(rel, bytes) else rel
    return text if text.isprintable() and text == text.strip() else repr(text)


def dataset_files(root: Path) -> list[bytes]:
    """Relative paths (bytes) of the regular files under ``root``, sorted by bytes, manifests
    excluded; a link, special file or unlistable name is a ConfigError naming it."""
    if not root.is_dir():
        raise ConfigError(f"not a directory: {root}")
    rels: list[bytes] = []
    for dirpath, dirs, files in os.walk(os.fsencode(root)):
        for name in [*dirs, *files]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, os.fsencode(root))
            mode = os.lstat(full).st_mode
            if b"\n" in rel or b"\\" in rel:
                raise ConfigError(f"{root}: file name not allowed in a manifest: {_show(rel)}")
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise ConfigError(
                    f"{root}: {_show(rel)} is a link or special file; datasets hold regular "
                    "files only"
                )
            if name != MANIFEST_NAME.encode():
                rels.append(rel)
    return sorted(rels)


def manifest_lines(root: Path) -> list[bytes]:
    """Manifest lines (bytes, no newline) for every file under ``root``."""
    out = []
    for rel in dataset_files(root):
        path = Path(os.fsdecode(os.path.join(os.fsencode(root), rel)))
        out.append(f"{path.stat().st_size}  {_sha256(path)}  ".encode() + rel)
    return out


def write_manifest(root: Path, out: Path | None = None) -> Path:
    """Write ``root/.hpcenv-manifest`` (or ``out``) atomically; returns its path."""
    out = out or root / MANIFEST_NAME
    lines = manifest_lines(root)
    tmp: Path | None = None
    try:
        # A random new name (O_CREAT|O_EXCL): a symlink planted beside ``out`` is never followed.
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(line + b"\n" for line in lines))
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # as a plain write would (mkstemp makes 0600)
        tmp.replace(out)
    except OSError as err:
        raise ConfigError(f"cannot write manifest {out}: {err.strerror or err}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return out


def _inside(root: Path, rel: bytes) -> Path | None:
    """``root/rel`` when every part of it is a real folder or file inside ``root``, else None."""
    parts = rel.split(b"/")
    if rel.startswith(b"/") or any(p in (b"", b".", b"..") for p in parts):
        return None
    current = os.fsencode(root)
    for part in parts[:-1]:
        current = os.path.join(current, part)
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return None
        except FileNotFoundError:
            break  # reported as missing
    return Path(os.fsdecode(os.path.join(os.fsencode(root), rel)))


def verify_manifest(root: Path, manifest: Path) -> list[str]:
    """Problems found checking ``root`` against ``manifest`` (empty list: verified).

    Never reads outside ``root``: entries with ``..`` or an absolute path, and links anywhere
    in the dataset, are problems, not followed."""
    if manifest.is_symlink():
        return [f"refused: the manifest {manifest} is a link"]
    try:
        data = read_bounded(manifest, MANIFEST_MAX_BYTES, "a manifest")
    except ConfigError as err:
        raise ConfigError(f"cannot read manifest {err}") from None
    try:
        present = set(dataset_files(root))
    except ConfigError as err:
        return [str(err)]
    problems = []
    listed: set[bytes] = set()
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            problems.append(f"{manifest}:{number}: malformed line")
            continue
        size, digest, rel = int(m[1]), m[2].decode(), m[3]
        path = _inside(root, rel)
        if path is None:
            problems.append(f"refused: {_show(rel)} leaves {root}")
            continue
        listed.add(rel)
        if not os.path.lexists(path):
            problems.append(f"missing: {_show(rel)}")
        elif not path.is_file() or path.is_symlink():
            problems.append(f"not a regular file: {_show(rel)}")
        elif path.stat().st_size != size:
            problems.append(f"size: {_show(rel)} is {path.stat().st_size}, manifest says {size}")
        elif _sha256(path) != digest:
            problems.append(f"sha256: {_show(rel)} differs")
    problems += [f"not in the manifest: {_show(rel)}" for rel in sorted(present - listed)]
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
    3. ``<name>-stage-out``: ``<scratch>/<name>/results`` -> ``results`` (atomic).

    Nothing is forced by default: existing results (of an earlier run of the same name) make
    the chain stop with a clear message; ``force`` replaces them.
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
            stage_out=StageOut(dest=run_results, force=force),
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
