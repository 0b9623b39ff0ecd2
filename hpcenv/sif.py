"""SIF images, two ways: from the OCI image hpcenv built, or natively from Singularity.def."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hpcenv import naming
from hpcenv.build import BuildPlan, build_secrets, context_ready, ensure_base
from hpcenv.build_inputs import hash_files
from hpcenv.engines import get_engine
from hpcenv.errors import ConfigError
from hpcenv.naming import BASE_ARCHIVE, SifSource, SquashfsCompressor
from hpcenv.output import write_private
from hpcenv.paths import cache_dir, private_dir
from hpcenv.reads import open_own


def sif_name(plan: BuildPlan, source: SifSource) -> str:
    """Registered name for ``apptainer://NAME``: ``<recipe>-<site>`` (``-def`` when native)."""
    return naming.sif_name(recipe=plan.recipe, site=plan.site.name, source=source)


def sif_path(plan: BuildPlan, source: SifSource) -> Path:
    name = naming.sif_file(recipe=plan.recipe, site=plan.site.name, source=source)
    return private_dir(cache_dir() / "sif") / name


def build_sif(plan: BuildPlan, source: SifSource) -> Path:
    """Build the plan's SIF and register it by name; returns its path.

    ``oci``: save the podman image (built before) as the site's archive (``build.archive``:
    oci-archive, or docker-archive as OLCF's Summit recipe) and convert it; reused
    while the image id it came from (and the site's ``build.sif_compression``) is unchanged.
    ``def``: build ``Singularity.def`` natively (``--fakeroot``) in the plan's context; a
    locally bootstrapped base is saved next to it as the definition's ``oci-archive`` source.
    Reused while its inputs are unchanged (:func:`def_inputs_digest`): Apptainer keeps no
    layers, so each build of a definition runs every ``%post`` step again (about 2.5 min for
    daal4py here), and an unchanged definition would build the same image.
    """
    from hpcenv.apptainer import register_image

    sif = sif_path(plan, source)
    if source == "oci":
        _sif_from_image(plan, sif)
    else:
        _sif_from_definition(plan, sif)
    register_image(sif_name(plan, source), sif)
    return sif


def _already_built(sif: Path, stamp: Path, key: str) -> bool:
    """True when ``sif`` exists and was made from the input ``key`` its stamp records (a stamp
    not the user's own, or that others may write, records nothing: the SIF is built again)."""
    if not sif.is_file():
        return False
    try:
        with open_own(stamp, "SIF stamp") as handle:
            return handle.read(4096).decode("utf-8", "replace").strip() == key
    except ConfigError:
        return False


def _sif_from_image(plan: BuildPlan, sif: Path) -> None:
    from hpcenv.apptainer import Apptainer

    engine = get_engine(plan.site.build.engine)
    stamp = sif.with_name(sif.name + ".image-id")
    compression = plan.site.build.sif_compression
    image_id = engine.image_id(plan.tag)
    key = image_id if compression is None else f"{image_id} {compression}"
    if _already_built(sif, stamp, key):
        return  # converted from this very image, with this compressor, before
    archive = cache_dir() / "sif" / naming.sif_archive(recipe=plan.recipe, site=plan.site.name)
    private_dir(archive.parent)
    fmt = plan.site.build.archive  # docker-archive where the site documents it (Summit)
    engine.save(plan.tag, archive, fmt)
    try:
        Apptainer().build_from_oci_archive(archive, sif, fmt=fmt, compression=compression)
    finally:
        archive.unlink(missing_ok=True)
    write_private(stamp, key + "\n")


def _sif_from_definition(plan: BuildPlan, sif: Path) -> None:
    from hpcenv.apptainer import Apptainer

    engine = get_engine(plan.site.build.engine)
    bootstrapped = bool(plan.lock.build.get("bootstrap_base"))
    if bootstrapped:
        ensure_base(plan)
    base_id = engine.image_id(plan.lock.build["base_image"]) if bootstrapped else ""
    stamp = sif.with_name(sif.name + ".inputs")
    with context_ready(plan) as context:
        compression = plan.site.build.sif_compression
        digest = def_inputs_digest(context, base_id, compression)
        if _already_built(sif, stamp, digest):
            return  # built from these very inputs before (no secrets written for it)
        stamp.unlink(missing_ok=True)  # a failed build below leaves no stale match
        if bootstrapped:
            engine.save(plan.lock.build["base_image"], context / BASE_ARCHIVE, "oci-archive")
        with build_secrets(plan.site) as secrets:
            folder = next(iter(secrets.values())).parent if secrets else None
            definition = context / "Singularity.def"
            Apptainer().build_from_def(
                definition, sif, context, secrets_dir=folder, compression=compression
            )
        write_private(stamp, digest + "\n")


def def_inputs_digest(
    context: Path, base_id: str, compression: SquashfsCompressor | None = None
) -> str:
    """SHA-256 over what a native build reads: every file of the build context (the
    definition, the lock, the checks, the build-only CA bundle and wheelhouse; names and bytes,
    links followed) and the id of the bootstrapped base its archive is saved from (the archive
    itself is left out: saving it is what a reused build skips), and the site's squashfs
    ``compression`` where it names one (unset: the digest of earlier versions, so their SIFs
    stay reused). Build secrets are not part of the context and not of the digest."""
    digest = hashlib.sha256(f"base {base_id}\n".encode())
    if compression is not None:
        digest.update(f"compression {compression}\n".encode())
    hash_files(digest, context, skip=[BASE_ARCHIVE])
    return digest.hexdigest()
