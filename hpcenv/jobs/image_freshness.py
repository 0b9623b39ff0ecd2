"""``submit`` refuses a project's image that its current inputs would not make (issue 37).

A project's image (a recipe with the user's requirements, pip specs or files:
``<recipe>-<project>``) records the digest of its inputs when it is built
(:func:`hpcenv.build_inputs.project_inputs`, in its lock's ``user_content.inputs``: the
``io.hpcenv.lock`` label of an OCI image, and a record in hpcenv's cache that ``build`` writes
for every format, read for a SIF or SquashFS image that this host cannot inspect). ``submit``
resolves the project's lock as ``build`` would, computes the same digest, and refuses in one
line that names what changed (``requirements.txt changed since the image ... was built: run
hpcenv build``) instead of running an environment the project no longer describes.

Nothing is refused where nothing can be compared: a built-in recipe's image (no project
inputs), ``--image`` (the user's choice), an image this host has no copy or record of (a real
submit's image check reports a missing one), or a submit over SSH.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcenv.errors import ConfigError

if TYPE_CHECKING:
    from hpcenv.lock import Lock
    from hpcenv.site import Site

_RECORD_MAX = 1 << 20


def record_path(site: str, recipe: str) -> Path:
    from hpcenv import naming
    from hpcenv.paths import cache_dir

    return cache_dir(create=False) / "images" / naming.inputs_record(recipe=recipe, site=site)


def write_record(lock: Lock, image: str) -> Path | None:
    """After a build: the image a job runs and the inputs its lock records (None for an image
    without project inputs). Written private (0600, never through a link)."""
    from hpcenv.output import write_private
    from hpcenv.paths import private_dir

    inputs = lock.user_content.get("inputs")
    if not inputs:
        return None
    path = record_path(lock.site, lock.recipe)
    private_dir(path.parent)
    doc = {"site": lock.site, "recipe": lock.recipe, "image": image, "inputs": inputs}
    return write_private(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _from_record(site: str, recipe: str, image: str) -> dict[str, Any] | None:
    from hpcenv.reads import load_json

    path = record_path(site, recipe)
    if not path.is_file():
        return None
    data = load_json(path, _RECORD_MAX, "an image inputs record", own=True)
    if not isinstance(data, dict) or data.get("image") != image:
        return None  # a record of another image (another site path): nothing to compare
    inputs = data.get("inputs")
    return inputs if isinstance(inputs, dict) else None


def _from_label(image: str) -> dict[str, Any] | None:
    """The inputs in a local podman image's lock label; ``{}`` for an hpcenv image whose lock
    records none (built before images recorded their inputs); None when there is no such image."""
    from hpcenv.engines import get_engine
    from hpcenv.errors import EnvironmentProblem

    engine = get_engine("podman")
    try:
        if not engine.image_exists(image):
            return None
        raw = engine.labels(image).get("io.hpcenv.lock")
    except EnvironmentProblem:  # no podman here: no image to read (the record may say)
        return None
    if not raw:
        return None
    try:
        lock = json.loads(raw)
    except ValueError:
        return None
    inputs = lock.get("user_content", {}).get("inputs") if isinstance(lock, dict) else None
    return inputs if isinstance(inputs, dict) else {}


def recorded_inputs(site: Site, recipe: str, image: str) -> dict[str, Any] | None:
    """What the image records: from its label where it is an hpcenv tag in local podman
    storage, else from the record ``build`` wrote; None when neither is here."""
    from hpcenv import naming

    if naming.parse_image_tag(image) is not None:
        found = _from_label(image)
        if found is not None:
            return found
    return _from_record(site.name, recipe, image)


def check_image_inputs(
    site: Site,
    recipe: str | None,
    requirements: tuple[Path, ...],
    pip: tuple[str, ...],
    image: str | None,
) -> None:
    """Refuse ``image`` when the project's current inputs differ from those it was built from.
    ``recipe``, ``requirements``, ``pip``: as given to submit (and to build)."""
    from hpcenv.build_inputs import recorded_pins, what_changed
    from hpcenv.recipe import load_recipe, with_additions
    from hpcenv.resolver import resolve

    if not recipe or not image:
        return
    loaded = with_additions(load_recipe(recipe), list(requirements), list(pip))
    if not loaded.content or loaded.content.base:
        return
    recorded = recorded_inputs(site, loaded.name, image)
    if recorded is None:
        return
    current = resolve(site, loaded, recorded_pins(recorded)).user_content.get("inputs", {})
    if recorded.get("digest") == current.get("digest"):
        return
    again = f"run hpcenv build (or pass --image {image} to run it as it is)"
    if not recorded:
        raise ConfigError(
            f"image {image} records no project inputs (built by an older hpcenv), so it may "
            f"not be this project's: {again}"
        )
    changed = what_changed(recorded, current) or ["the project's inputs changed"]
    raise ConfigError(f"{'; '.join(changed)} since the image {image} was built: {again}")
