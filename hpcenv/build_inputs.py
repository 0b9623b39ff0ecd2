"""What a build reads, as one digest, and the stamp that lets an unchanged image skip its build.

A cached ``podman build`` of an unchanged image still takes 15-20 s here: buildah hashes the
source of every ``COPY --from`` (a 1.5 GB venv with torch) before it finds the cached layer.
``hpcenv build`` records, beside the image it built, the digest of everything the engine's
layer cache looks at (the Dockerfile and every context file, the base images' ids, the build
arguments, mounts, flags and platform) and the image id it made. When both still match, the
image is up to date and the build is skipped. What the engine's cache does not look at either
(the apt and pip indexes, the content of a build mount, build secrets) is not in the digest.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError, HpcenvError

# Flags that ask the engine to build or pull regardless of its cache: no stamp is trusted then.
_ALWAYS_BUILD = re.compile(r"^--(no-cache|pull(=always|=newer|=true)?)$")
_IMAGE_ID = re.compile(r"(sha256:)?[0-9a-f]{12,64}")
_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


def hash_files(digest: Any, root: Path, skip: Iterable[str] = ()) -> None:
    """Feed every file under ``root`` (names, sizes and bytes, sorted, links followed) to
    ``digest``, leaving out the relative paths in ``skip``."""
    left_out = set(skip)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel in left_out:
            continue
        digest.update(f"file {rel} {path.stat().st_size}\n".encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile's stages start FROM (a stage built earlier in it is not one)."""
    stages: set[str] = set()
    bases: list[str] = []
    for line in dockerfile.splitlines():
        match = _FROM.match(line.strip())
        if not match:
            continue
        ref, name = match.group(1), match.group(2)
        if ref.lower() not in stages and ref not in bases:
            bases.append(ref)
        if name:
            stages.add(name.lower())
    return bases


def image_inputs_digest(
    context: Path,
    base_ids: dict[str, str],
    *,
    build_args: dict[str, str],
    volumes: list[str],
    flags: list[str],
    platform: str | None,
) -> str:
    """SHA-256 over what the engine's layer cache compares: every context file (the Dockerfile
    among them), the id of each base image, the build arguments, mounts, flags and platform."""
    digest = hashlib.sha256(b"hpcenv image inputs 1\n")
    for ref, image_id in sorted(base_ids.items()):
        digest.update(f"base {ref} {image_id}\n".encode())
    for name, value in sorted(build_args.items()):
        digest.update(f"arg {name}={value}\n".encode())
    for item in (*(f"volume {v}" for v in volumes), *(f"flag {f}" for f in flags)):
        digest.update(f"{item}\n".encode())
    digest.update(f"platform {platform or ''}\n".encode())
    hash_files(digest, context)
    return digest.hexdigest()


def trusts_stamps(flags: list[str]) -> bool:
    """False when the site's engine flags ask for a build or pull every time (``--no-cache``,
    ``--pull``...): the stamp must not stand in for what they ask."""
    return not any(_ALWAYS_BUILD.match(flag) for flag in flags)


def read_stamp(stamp: Path) -> tuple[str, str] | None:
    """(inputs digest, image id) that ``stamp`` records; None when it is missing or unreadable
    (a damaged stamp only costs a real build), and None for a stamp that is not the user's
    own or that others may write (:func:`hpcenv.reads.open_own`): it then costs a real build,
    never a skipped one."""
    from hpcenv.reads import open_own

    try:
        with open_own(stamp, "build stamp") as handle:
            words = handle.read(4096).decode("utf-8").split()
    except (ConfigError, OSError, UnicodeDecodeError):
        return None
    if len(words) != 2 or not re.fullmatch(r"[0-9a-f]{64}", words[0]):
        return None
    if not _IMAGE_ID.fullmatch(words[1]):
        return None
    return words[0], words[1]


def write_stamp(stamp: Path, digest: str, image_id: str) -> None:
    if not _IMAGE_ID.fullmatch(image_id):
        raise HpcenvError(f"the engine gave an image id hpcenv cannot record: {image_id!r}")
    from hpcenv.output import write_private

    write_private(stamp, f"{digest} {image_id}\n")  # never through a link at a fixed name
