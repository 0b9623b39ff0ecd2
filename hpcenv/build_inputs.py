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


# -- a project's inputs, recorded in its image ----------------------------------------------
#
# Issue 37: a project's image must be the one its current inputs make, or ``submit`` runs an
# environment the project no longer describes. The image carries a digest of those inputs (in
# its lock: the ``io.hpcenv.lock`` label and /opt/hpcenv/stack.lock.json, ``user_content.inputs``)
# with one digest per part, so that a difference can be named: each requirements file (by
# name: the requirements it gives, so a comment or blank line changes nothing), the ``--pip``
# and recipe ``user.pip`` specs, each user file or folder (its bytes), the rest of the user
# section and the matched stack (the lock without the user's part).

_ORIGIN_FILE = re.compile(r"(.+?)(?:>[^:]*)?:\d+")


def requirement_group(origin: str) -> str:
    """The part a requirement belongs to: its top requirements file's name
    (``sub/requirements.txt:3``, ``requirements.txt>more.txt:1`` -> ``requirements.txt``),
    ``--pip``, or ``RECIPE.yaml user.pip``."""
    if origin.startswith("--pip"):
        return "--pip"
    if ": user.pip[" in origin:
        return origin.split(": ", 1)[0] + " user.pip"
    match = _ORIGIN_FILE.fullmatch(origin)
    return Path(match.group(1) if match else origin).name


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def project_inputs(
    lock: dict[str, Any], requirements: list[tuple[str, str]], files: list[tuple[str, Path]]
) -> dict[str, Any]:
    """``{"digest": ..., "parts": {name: digest}}`` of a project's inputs: ``lock`` (the lock
    as a dict, without ``user_content.inputs``), ``requirements`` as (spec, origin) in order,
    ``files`` as (destination in the image, host path)."""
    import json

    parts: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for spec, origin in requirements:
        groups.setdefault(requirement_group(origin), []).append(spec)
    for name, specs in groups.items():
        parts[f"requirements {name}"] = _sha("\n".join(specs))
    for dest, host in files:
        digest = hashlib.sha256(b"hpcenv user file 1\n")
        if host.is_dir():
            hash_files(digest, host)
        else:
            digest.update(host.read_bytes())
        parts[f"file {dest}"] = digest.hexdigest()
    # the rest of the user section (apt, env, labels, workdir, where files go); its pip specs
    # are the requirements' parts above, its constraints the stack's
    user = {
        k: v
        for k, v in lock.get("user_content", {}).items()
        if k not in ("inputs", "pip", "constraints")
    }
    stack = {k: v for k, v in lock.items() if k != "user_content"}
    parts["user section"] = _sha(json.dumps(user, sort_keys=True))
    parts["stack"] = _sha(json.dumps(stack, sort_keys=True))
    total = _sha("".join(f"{k} {v}\n" for k, v in sorted(parts.items())))
    return {"digest": total, "parts": parts}


def what_changed(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The parts whose digests differ, in words, the user's own first (requirements files,
    files, the user section), the matched stack last."""
    old, new = recorded.get("parts"), current.get("parts", {})
    if not isinstance(old, dict):  # a record or label another hpcenv wrote: compare the whole
        old = {}
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    order = ("requirements ", "file ", "user section", "stack")
    changed.sort(
        key=lambda k: next((i for i, p in enumerate(order) if str(k).startswith(p)), len(order))
    )
    words = []
    for key in changed:
        if key.startswith("requirements "):
            name = key.removeprefix("requirements ")
            gone = "is no longer given" if key not in new else "changed"
            words.append(f"{name} {'is new' if key not in old else gone}")
        elif key.startswith("file "):
            dest = key.removeprefix("file ")
            words.append(f"the file for {dest} {'is new' if key not in old else 'changed'}")
        elif key == "user section":
            words.append("the recipe's user section changed")
        else:
            words.append("the matched stack hpcenv resolves changed (hpcenv, the site or --set)")
    return words


def record_inputs(lock: Any, content: Any, pins: dict[str, str]) -> None:
    """Put :func:`project_inputs` of a resolved lock (:class:`hpcenv.lock.Lock`) and its recipe's
    user content (:class:`hpcenv.usercontent.UserContent`) into ``lock.user_content["inputs"]``,
    with the ``--set`` pins it was resolved with (``submit``, which takes none, resolves the
    project again with them: the same pins give the same stack)."""
    inputs = project_inputs(
        lock.to_dict(),
        [(r.spec, r.origin) for r in content.requirements],
        [(f.dest, f.host) for f in content.files],
    )
    if pins:
        inputs["pins"] = dict(sorted(pins.items()))
    lock.user_content["inputs"] = inputs


def recorded_pins(inputs: dict[str, Any]) -> dict[str, str]:
    """The ``--set`` pins an image's recorded inputs name (:func:`record_inputs`); a value
    that is not a mapping of names to strings (a label another tool wrote) counts as none."""
    pins = inputs.get("pins")
    if not isinstance(pins, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in pins.items()
    ):
        return {}
    return pins
