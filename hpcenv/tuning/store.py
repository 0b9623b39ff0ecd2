"""Where tuning files live and which one is in force.

One JSON file per site and rank layout: ``<cache>/tuning/<site>/<layout>.json`` (``<cache>`` is
``$HPCENV_CACHE`` or ``~/.cache/hpcenv``; ``$HPCENV_TUNING_DIR`` replaces ``<cache>/tuning``). A newer measurement replaces the older one. A file is
in force for a launch only when its site and layout match and it was measured on the same image
digest as the image being launched; otherwise it is ignored and the reason is returned as a
warning (never silently applied, never silently dropped). A file that sets a variable the tuner
never writes (any name outside :func:`hpcenv.tuning.model.measured_names`: ``BASH_ENV``,
``HOROVOD_TIMELINE``, ``OMPI_MCA_plm``; :mod:`hpcenv.envpolicy`) is refused outright: it was not
written by ``hpcenv tune``; so is one that is not the user's own or that others may write
(:func:`hpcenv.reads.open_own`: the cache may sit on group-writable project storage).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from hpcenv.envpolicy import EnvNotAllowed
from hpcenv.errors import ConfigError
from hpcenv.printable import printable
from hpcenv.reads import NotYours, load_json
from hpcenv.tuning.model import Layout, MeasuredTuning, measured_names

TUNING_MAX_BYTES = 4 << 20  # a sweep of every collective and size is a few hundred KiB


def tuning_dir() -> Path:
    from hpcenv.paths import cache_dir

    override = os.environ.get("HPCENV_TUNING_DIR")
    return Path(override) if override else cache_dir() / "tuning"


def tuning_path(site: str, layout: Layout) -> Path:
    return tuning_dir() / site / f"{layout.key}.json"


def check_env(tuning: MeasuredTuning, where: str) -> None:
    """Refuse a variable the tuner does not write (:mod:`hpcenv.envpolicy`), in one line."""
    from hpcenv.envpolicy import check

    check(tuning.env, "measured-tuning", where, allowed=measured_names())
    for cands in tuning.rendered_only.values():
        for cand in cands:
            check(cand, "measured-tuning", where, allowed=measured_names())


def save(tuning: MeasuredTuning) -> Path:
    """Write the file atomically (:func:`hpcenv.output.write_private`: 0600, a ``mkstemp`` name
    in a folder only this user may write, then a rename); returns its path."""
    from hpcenv.output import write_private

    path = tuning_path(tuning.site, tuning.layout)
    check_env(tuning, str(path))
    text = json.dumps(tuning.model_dump(), indent=2, sort_keys=True) + "\n"
    return write_private(path, text)


def load(path: Path) -> MeasuredTuning:
    """Parse and validate a tuning file; ConfigError naming the file and field otherwise
    (size and nesting bounded before anything uses it: :func:`hpcenv.reads.load_json`)."""
    try:
        doc = load_json(path, TUNING_MAX_BYTES, "tuning file", own=True)
    except NotYours:
        raise  # another user's file, or one others may change: refused, not ignored
    except ConfigError as err:
        raise ConfigError(f"not a readable tuning file: {err}") from None
    env = doc.get("env") if isinstance(doc, dict) else None
    if isinstance(env, dict):  # the name decides before the value's shape: refused, not ignored
        from hpcenv.envpolicy import check

        check({str(k): "" for k in env}, "measured-tuning", str(path), allowed=measured_names())
    try:
        tuning = MeasuredTuning.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        field = printable(".".join(str(p) for p in first["loc"])) or "(top)"
        raise ConfigError(f"{path}: {field}: {printable(first['msg'])}") from None
    check_env(tuning, str(path))
    return tuning


@dataclass(frozen=True)
class InForce:
    """The lookup's answer: the tuning to apply (or None), where it was looked for, and why."""

    tuning: MeasuredTuning | None
    path: Path
    why: str
    warning: str | None = None


def in_force(site: str, layout: Layout, image: str, image_id: str | None) -> InForce:
    """The tuning file for ``site`` + ``layout`` if it was measured on ``image_id``."""
    path = tuning_path(site, layout)
    hint = f"hpcenv tune --measure --site {site}"
    if not path.is_file():
        return InForce(None, path, f"no measured tuning for {layout.describe()} ({hint})")
    try:
        tuning = load(path)
    except (EnvNotAllowed, NotYours):
        raise  # a variable no measurement sets, another user's file: refused, not ignored
    except ConfigError as err:
        return InForce(None, path, "ignored", f"tuning file ignored: {err}")
    if tuning.site != site or tuning.layout != layout:
        return InForce(
            None,
            path,
            "ignored",
            f"tuning file {path} ignored: it is for site {tuning.site}, "
            f"{tuning.layout.describe()}, not {site}, {layout.describe()}",
        )
    if image_id is None:
        return InForce(
            None,
            path,
            "ignored",
            f"tuning file {path} ignored: the digest of {image} cannot be checked here "
            f"(measured on {tuning.image} {tuning.image_id[:12]})",
        )
    if not tuning.image_id.startswith(image_id[:12]) and not image_id.startswith(tuning.image_id):
        return InForce(
            None,
            path,
            "ignored",
            f"tuning file {path} ignored: measured on {tuning.image} {tuning.image_id[:12]} "
            f"({tuning.date}), but {image} is {image_id[:12]}; re-measure: {hint}",
        )
    return InForce(tuning, path, f"measured {tuning.date} on {tuning.image} {tuning.image_id[:12]}")
