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

from hpcenv.paths import cache_dir


def record_path(site: str, recipe: str) -> Path:
    return cache_dir(create=False) / "images" / f"{site}-{recipe}.json"


def write_record(site: str, recipe: str, record: dict[str, Any]) -> Path:
    """Replace the record whole (written beside it, then renamed)."""
    path = record_path(site, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.partial")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_record(site: str, recipe: str) -> dict[str, Any] | None:
    """The record of the last remote build of ``recipe`` for ``site``; None when there is none
    (or it cannot be read: the default image then applies, as before any remote build)."""
    try:
        data = json.loads(record_path(site, recipe).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("image"), str) else None
