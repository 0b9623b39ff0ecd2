"""Where an image built elsewhere landed: one small JSON record per site/recipe in the cache.

``hpcenv build --on-login`` builds on the site's login node (:mod:`hpcenv.remote_build`); the
image never passes through this host, so this host keeps a record of it: the login node, the
reference jobs run (the tag, or the SIF path the site's jobs read), the engine's image id and
the date. ``submit`` for that site/recipe runs the recorded reference and says where it was
built (:func:`hpcenv.jobs.service`), so the image a remote build produced is the next job's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError
from hpcenv.paths import cache_dir, private_dir

# What :meth:`hpcenv.remote_build.RemoteBuild.run` writes; a record with other fields is not its.
_FIELDS = {
    "site",
    "recipe",
    "host",
    "folder",
    "tag",
    "image",
    "image_id",
    "builder",
    "built_at",
    "log",
}


def record_path(site: str, recipe: str) -> Path:
    return cache_dir(create=False) / "images" / f"{site}-{recipe}.json"


def write_record(site: str, recipe: str, record: dict[str, Any]) -> Path:
    """Replace the record whole (:func:`hpcenv.output.write_private`: 0600, in a folder only
    this user may write, through a ``mkstemp`` name, never through a link)."""
    from hpcenv.output import write_private

    path = record_path(site, recipe)
    private_dir(path.parent)
    return write_private(path, json.dumps(record, indent=2) + "\n")


def read_record(site: str, recipe: str) -> dict[str, Any] | None:
    """The record of the last remote build of ``recipe`` for ``site``; None when there is none
    (the default image then applies, as before any remote build).

    The record decides what the user's jobs run, so it is used only as the user's own
    ``build --on-login`` of this very site and recipe wrote it (issue 40: a file another project
    member put in a group-writable cache put their image into the job): a file of this user's
    that nobody else may write (:func:`hpcenv.reads.open_own`, no link followed), with the
    fields that build writes, naming this site, this recipe, hpcenv's tag for them and an image
    reference or image file path. Anything else is one ConfigError line naming the file."""
    from hpcenv import naming
    from hpcenv.reads import load_json
    from hpcenv.safe import image_or_sif

    path = record_path(site, recipe)
    if not os.path.lexists(path):
        return None
    data = load_json(path, 64 << 10, "image record", own=True)

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"refusing image record {path}: {why}, not as hpcenv build --on-login wrote it; "
            f"delete it, or build again with hpcenv build --on-login --site {site}"
        )

    if not isinstance(data, dict):
        raise refuse("not a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise refuse(f"unknown field {unknown[0][:40]!r}")
    if "image" not in data:
        raise refuse("no image field")
    if any(not isinstance(v, str) for v in data.values()):
        raise refuse("a field that is not text")
    if data.get("site") != site or data.get("recipe") != recipe:
        raise refuse(f"it names site {data.get('site')!r} and recipe {data.get('recipe')!r}")
    if data.get("tag") != naming.image_tag(recipe=recipe, site=site):
        raise refuse("its tag is not hpcenv's tag for this site and recipe")
    try:
        image_or_sif(data["image"], "its image")
    except ConfigError as err:
        raise refuse(str(err)) from None
    return data
