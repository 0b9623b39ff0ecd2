"""Every name hpcenv gives an image, a SIF file or an archive, in one place.

Why: the tag of a built image was spelled in six modules, by two functions both called
``image_tag`` that took ``(site, recipe)`` and ``(recipe, site)``; the SIF path a job runs and the
SIF ``build`` delivers to had to agree by copy. Here each name is one function with keyword-only
arguments (the order cannot be swapped), and every other module calls it. This module imports
nothing from hpcenv, so any module may use it without a cycle; folders (the cache, a site's
scratch) are the caller's, names are this module's.

Which name a site's jobs run is its runtime's (hpcenv.jobs.runtimes: the last delivery step's target).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal

from hpcenv.errors import ConfigError

SifSource = Literal["oci", "def"]
# mksquashfs(1) compressors a site may name for its SIFs (build.sif_compression; gzip is
# Apptainer's default).
SquashfsCompressor = Literal["gzip", "lz4", "zstd"]

#: Repository prefix of the images ``hpcenv build`` makes in local podman storage.
IMAGE_REPO = "localhost/hpcenv"
#: The helper image that runs Apptainer in podman where the host has none (``hpcenv apptainer``).
HELPER_TAG = "localhost/hpcenv-apptainer:1"
#: Singularity.def's ``oci-archive`` bootstrap source for a locally bootstrapped base image.
BASE_ARCHIVE = "hpcenv-base.oci.tar"
#: Where a SIF runtime's images live when the site names no scratch file system.
NO_SCRATCH = "$HOME"


def image_tag(*, recipe: str, site: str) -> str:
    """The local tag of a built image: ``localhost/hpcenv/<recipe>:<site>``."""
    return f"{IMAGE_REPO}/{recipe}:{site}"


def parse_image_tag(image: str) -> tuple[str, str] | None:
    """``(recipe, site)`` of a tag made by :func:`image_tag`, else None."""
    prefix = IMAGE_REPO + "/"
    if not image.startswith(prefix):
        return None
    recipe, sep, site = image[len(prefix) :].partition(":")
    if not sep or not recipe or not site or "/" in recipe or ":" in site:
        return None
    return recipe, site


def base_tag(*, suite: str, arch: str = "amd64") -> str:
    """The tag of the Debian base image hpcenv bootstraps: ``localhost/hpcenv-base:<suite>``
    for amd64 (the tag every existing cache has), ``<suite>-<arch>`` for other Debian
    architectures (``bookworm-arm64``)."""
    return f"localhost/hpcenv-base:{suite}" + ("" if arch == "amd64" else f"-{arch}")


def bench_tag(*, recipe: str, variant: str) -> str:
    """A throw-away tag of the build-cost bench (``variant``: hpcenv, naive, hpccm, cold)."""
    return f"localhost/hpcenv-bench/{recipe}:{variant}"


def sif_name(*, recipe: str, site: str, source: SifSource = "oci") -> str:
    """A SIF's registered name (``apptainer://NAME``) and file stem: ``<recipe>-<site>``, with
    ``-def`` when built natively from Singularity.def."""
    return f"{recipe}-{site}" + ("-def" if source == "def" else "")


def sif_file(*, recipe: str, site: str, source: SifSource = "oci") -> str:
    """The SIF file name in hpcenv's cache: ``<recipe>-<site>[-def].sif``."""
    return sif_name(recipe=recipe, site=site, source=source) + ".sif"


def sif_archive(*, recipe: str, site: str) -> str:
    """The oci-archive a built image is saved to before ``apptainer build`` converts it."""
    return sif_name(recipe=recipe, site=site) + ".oci.tar"


def site_sif_path(*, recipe: str, site: str, scratch: str | None) -> str:
    """Where a SIF site keeps the image: ``<scratch>/hpcenv/images/<recipe>-<site>.sif``
    (``$HOME`` when the site has no scratch file system); ``build`` copies there and
    ``submit`` runs it."""
    return f"{scratch or NO_SCRATCH}/hpcenv/images/{sif_file(recipe=recipe, site=site)}"


def site_sqsh_path(*, recipe: str, site: str, scratch: str | None) -> str:
    """Where a Container Engine site (Alps) keeps the image: the SquashFS file that
    ``enroot import -x mount -o FILE podman://IMAGE`` writes (cscs-docs
    ``build-install/containers.md``), ``<scratch>/hpcenv/images/<recipe>-<site>.sqsh``."""
    name = sif_name(recipe=recipe, site=site)
    return f"{scratch or NO_SCRATCH}/hpcenv/images/{name}.sqsh"


def build_log(*, recipe: str, site: str) -> str:
    """The file name of an image build's log: ``build-<site>-<recipe>.log``."""
    return f"build-{site}-{recipe}.log"


#: A project's name (``hpcenv.yaml``'s ``project:``): lower case, from a letter or digit, <= 40.
PROJECT_MAX = 40
PROJECT_RE = r"[a-z0-9][a-z0-9._-]{0,39}"
#: How long a recipe name (and so an image's repository part) may be (hpcenv.safe.Name).
RECIPE_MAX = 64


def project_name(raw: str) -> str:
    """A folder name as a project name: lower case, runs of other characters as one ``-``,
    starting with a letter or digit, at most :data:`PROJECT_MAX` characters (``My Project!``
    -> ``my-project``); ``project`` when nothing is left."""
    text = re.sub(r"[^a-z0-9._-]+", "-", raw.lower())
    text = re.sub(r"^[^a-z0-9]+", "", text)[:PROJECT_MAX].rstrip("-._")
    return text or "project"


def project_recipe(*, recipe: str, project: str, builtin: Collection[str] = ()) -> str:
    """The recipe name of a project's own image, ``<recipe>-<project>``: the image tag
    (``localhost/hpcenv/<recipe>-<project>:<site>``) and SIF file (``<recipe>-<project>-<site>
    .sif``) then carry the project, so two projects on one site never share an image. The
    project's ``.`` and ``_`` become ``-`` (a recipe name is ``[a-z][a-z0-9-]``, valid in a
    podman repository and a file name), at most :data:`RECIPE_MAX` characters, no trailing
    ``-``. A name in ``builtin`` (the built-in recipes') is never the result: a project
    ``gpu`` of ``horovod`` would take ``horovod-gpu``'s image (a ConfigError naming how to name
    the project)."""
    suffix = re.sub(r"[^a-z0-9]+", "-", project_name(project)).strip("-") or "project"
    if recipe.endswith(f"-{suffix}") and recipe not in builtin:  # made by this rule already
        return recipe[:RECIPE_MAX]
    name = f"{recipe}-{suffix}"[:RECIPE_MAX].rstrip("-")
    if name in builtin:
        raise ConfigError(
            f"project {project!r}: its image would be named {name}, a built-in recipe's image; "
            "give the project another name (project: in hpcenv.yaml, or hpcenv init --project)"
        )
    return name


def inputs_record(*, recipe: str, site: str) -> str:
    """The file name of the record of a built image's project inputs, in hpcenv's cache
    (``project-<site>-<recipe>.json``): how ``submit`` reads them for an image it cannot inspect
    (a SIF, a SquashFS file)."""
    return f"project-{site}-{recipe}.json"
