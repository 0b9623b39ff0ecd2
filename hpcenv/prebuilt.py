"""A recipe's base-image override (``user.base:``, issue 22): start from a prebuilt image, where
hpcenv can prove it fits, and add only the user's content on top.

Two kinds of base are known:

- a framework image in ``hpcenv/knowledge/base_images.yaml`` (NVIDIA NGC PyTorch, AMD's
  ``rocm/pytorch``), whose versions are the publisher's, with the page and date they were read;
- an image hpcenv built itself: its lock is its ``io.hpcenv.lock`` label
  (:meth:`hpcenv.blocks.Blocks.payload`), read with the engine through an injectable
  ``inspect`` callable (image -> labels, ``None`` when the image is not there).

The fit is proved or refused in one line (:class:`hpcenv.errors.ConfigError`): the base's GPU
kind against the site's (a CUDA base on a ROCm or CPU site and the other way round), the driver
its CUDA needs (rule ``cuda-driver`` of ``compat.yaml``, or the minimum the release notes state)
against the site's ``gpu.driver``, its ROCm against the site's ``gpu.rocm`` (same major.minor:
the rule hpcenv's own ROCm images follow, whose ROCm is the site's), a pin that contradicts it,
and a recipe that wants what the base does not carry (Horovod, mpi4py: hpcenv builds those only
on its own stack). When it fits, the base's versions are the lock's (source ``base image``),
torch is not installed again, and the user's pip step stays under the lock's constraints
(:mod:`hpcenv.matched`), so it cannot replace the base's torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import StringConstraints, ValidationError

from hpcenv import platforms
from hpcenv.errors import ConfigError
from hpcenv.knowledge import rule
from hpcenv.lock import Choice, Lock
from hpcenv.reads import too_deep
from hpcenv.recipe import Recipe
from hpcenv.safe import WORD, SafeModel, Word, error_words
from hpcenv.site import Site
from hpcenv.versions import at_least, major, major_minor

DATA_FILE = Path(__file__).with_name("knowledge") / "base_images.yaml"
LOCK_LABEL = "io.hpcenv.lock"
Inspect = Callable[[str], "dict[str, str] | None"]


@lru_cache(maxsize=1)
def known_bases() -> dict[str, dict[str, Any]]:
    """The framework images hpcenv knows, by full reference."""
    data: dict[str, Any] = yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))
    images: dict[str, dict[str, Any]] = data["images"]
    return images


def engine_labels(image: str) -> dict[str, str] | None:
    """The image's labels from the site's default engine, or None where it has no such image."""
    from hpcenv.engines import get_engine

    engine = get_engine()
    if not engine.image_exists(image):
        return None
    return engine.labels(image)


# The label is read back from an image (anyone's): every value is checked for the shape
# hpcenv writes before any of it reaches a Dockerfile (versions and names are words; text has no
# newline or control character, SafeModel; the user a USER line names is a Unix user name).
LABEL_MAX = 1 << 20
# a release ("2.13.0+cpu") or one of the few words hpcenv writes instead ("site build")
Version = Annotated[
    str,
    StringConstraints(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+~:-]*(?: [A-Za-z0-9._+~:-]+)*$", max_length=100
    ),
]
# The build settings a user recipe on the image inherits; the rest (how the base itself was
# made: python_from, debootstrap_suite...) is dropped, so a label cannot choose a build path.
KEPT_BUILD = ("user", "platform", "engine", "jobs", "accelerator")
Text = Annotated[str, StringConstraints(max_length=4000)]
UnixUser = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]


class LabelChoice(SafeModel):
    version: Version
    reason: Text
    source: Text = ""
    implementation: Word | None = None
    options: dict[Word, Text] = {}
    rules: list[Text] = []
    rejected: dict[Text, Text] = {}


class LabelBuild(SafeModel):
    """The ``build`` part of a lock; the keys hpcenv writes, each with its shape."""

    model_config = SafeModel.model_config | {"extra": "allow"}
    user: UnixUser
    platform: Word | None = None
    engine: Word | None = None
    jobs: int | None = None
    accelerator: Word | None = None


class LabelLock(SafeModel):
    schema_: Literal[1] = 1
    site: Word
    recipe: Word
    arch: Word
    mpi_model: Word
    components: dict[Word, LabelChoice]
    excluded: dict[Word, Text] = {}
    rules: dict[Text, Text] = {}
    build: LabelBuild
    user_content: dict[Word, Any] = {}


def hpcenv_lock(image: str, inspect: Inspect) -> Lock | None:
    """The lock an hpcenv-built image carries in its labels; None for any other image; a label
    that is not a lock as hpcenv writes it is one ConfigError line."""
    labels = inspect(image)
    if not labels or LOCK_LABEL not in labels:
        return None
    text = labels[LOCK_LABEL]

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"user.base {image}: its {LOCK_LABEL} label is not a lock ({why})")

    if len(text) > LABEL_MAX:
        raise refuse(f"{len(text)} characters; at most {LABEL_MAX}")
    try:
        data = json.loads(text)
    except ValueError as err:
        raise refuse(f"not JSON: {err}") from None
    if too_deep(data):
        raise refuse("nested too deep")
    if isinstance(data, dict) and "schema" in data:
        data = {("schema_" if k == "schema" else k): v for k, v in data.items()}
    try:
        lock = LabelLock.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<top>"
        raise refuse(f"{where}: {error_words(first)}") from None
    dumped = lock.build.model_dump(exclude_none=True)
    build = {k: dumped[k] for k in KEPT_BUILD if k in dumped}
    for key, value in build.items():
        if not isinstance(value, str | int | bool) or (
            isinstance(value, str) and not re.fullmatch(WORD, value)
        ):
            raise refuse(f"build.{key}: {value!r} is not a word")
    return Lock(
        site=lock.site,
        recipe=lock.recipe,
        arch=lock.arch,
        mpi_model=lock.mpi_model,
        components={k: Choice(**v.model_dump()) for k, v in lock.components.items()},
        excluded=dict(lock.excluded),
        rules=dict(lock.rules),
        build=build,
    )


def _refuse(image: str, why: str) -> ConfigError:
    return ConfigError(f"user.base {image} does not fit: {why}")


def _check_pins(image: str, lock: Lock, overrides: dict[str, str]) -> None:
    for name, value in overrides.items():
        have = lock.components.get(name)
        wanted = value.rstrip("!")
        if have is None or wanted not in (have.version, have.version.split("+")[0]):
            shown = have.version if have else "none"
            raise _refuse(
                image, f"--set {name}={value} but the base carries {name} {shown}; drop the pin"
            )


def _accelerator(site: Site) -> str:
    return {"nvidia": "cuda", "amd": "rocm"}.get(site.gpu.vendor, site.gpu.vendor)


def on_hpcenv_image(
    site: Site, recipe: Recipe, overrides: dict[str, str], image: str, base: Lock
) -> Lock:
    """The lock of a user recipe on an image hpcenv built: the base's, with this recipe's name."""
    if base.site != site.name:
        raise _refuse(
            image, f"hpcenv built it for site {base.site}, not {site.name}; build it for this site"
        )
    _check_pins(image, base, overrides)
    build = dict(base.build) | {
        "base_image": image,
        "base_from": "hpcenv",
        "bootstrap_base": False,
    }
    return Lock(
        site=site.name,
        recipe=recipe.name,
        arch=base.arch,
        mpi_model=base.mpi_model,
        components=base.components,
        excluded=base.excluded,
        rules=base.rules,
        build=build,
    )


def on_framework_image(
    site: Site, recipe: Recipe, overrides: dict[str, str], image: str, facts: dict[str, Any]
) -> Lock:
    """The lock of a recipe on a known framework image, or the one line that says why not."""
    kind = facts["kind"]
    src = f"{image} [{facts['source']}]"
    accel = _accelerator(site)
    if accel != kind:
        has = "no GPUs" if accel == "none" else f"{site.gpu.vendor} GPUs ({accel})"
        raise _refuse(image, f"it is a {kind.upper()} image and site {site.name} has {has}")
    if site.arch not in facts["archs"]:
        raise _refuse(
            image, f"it is built for {', '.join(facts['archs'])}, site {site.name} is {site.arch}"
        )
    extra = sorted(set(recipe.components) - {"torch"})
    if extra:
        raise _refuse(
            image,
            f"recipe {recipe.name} also wants {', '.join(extra)}, which hpcenv builds only on its "
            "own stack; set components: {torch: required}",
        )
    rules: dict[str, str] = {}
    comps: dict[str, Choice] = {
        "arch": Choice(site.arch, f"site {site.name} architecture", "site"),
        "python": Choice(facts["python"], f"the python of {image}", "base image"),
        "torch": Choice(
            facts["torch"],
            f"the torch of {image}",
            "base image",
            options={"variant": kind, "dist_backend": "nccl"},
        ),
    }
    if "os" in facts:
        comps["os"] = Choice(facts["os"], f"the OS of {image}", "base image")
    if kind == "cuda":
        cuda = facts["cuda"]
        driver = site.gpu.driver or ""
        need = facts.get("min_driver")
        if need is None:
            cuda_rule = rule("cuda-driver")
            need = cuda_rule.at_least[major(cuda)] if isinstance(cuda_rule.at_least, dict) else None
            rules["cuda-driver"] = cuda_rule.source
        if need is None or not at_least(driver, need):
            raise _refuse(
                image,
                f"its CUDA {cuda} needs driver >= {need}, site {site.name} has {driver}",
            )
        comps["cuda"] = Choice(
            cuda, f"the CUDA of {image}; driver {driver} >= {need}", "base image", rules=list(rules)
        )
        nccl = facts.get("nccl")
        comps["nccl"] = Choice(
            nccl or "bundled",
            f"the NCCL of {image}"
            + ("" if nccl else " (its version is not in the release notes hpcenv read)"),
            "base image",
        )
    else:
        rocm, host = facts["rocm"], site.gpu.rocm or ""
        if major_minor(rocm) != major_minor(host):
            raise _refuse(
                image, f"its ROCm {rocm} is not site {site.name}'s ROCm {major_minor(host)}"
            )
        comps["rocm"] = Choice(rocm, f"the ROCm of {image}, the site's", "base image")
        comps["rccl"] = Choice(facts["rccl"], f"the RCCL of {image}", "base image")
    lock = Lock(
        site=site.name,
        recipe=recipe.name,
        arch=site.arch,
        mpi_model=site.mpi.model,
        components=comps,
        excluded={},
        rules=rules | {"base-image": src},
        build={
            "base_image": image,
            "base_from": "framework",
            "bootstrap_base": False,
            "platform": platforms.ARCHES[site.arch].platform,
            "engine": site.build.engine,
            "jobs": site.build.jobs,
            "accelerator": kind,
            "user": "hpc",
        },
    )
    _check_pins(image, lock, overrides)
    return lock


def resolve_on_base(
    site: Site,
    recipe: Recipe,
    overrides: dict[str, str],
    image: str,
    inspect: Inspect | None = None,
) -> Lock:
    """The lock of ``recipe`` on the prebuilt ``image`` (see the module's docstring)."""
    facts = known_bases().get(image)
    if facts is not None:
        return on_framework_image(site, recipe, overrides, image, facts)
    base = hpcenv_lock(image, inspect or engine_labels)
    if base is not None:
        return on_hpcenv_image(site, recipe, overrides, image, base)
    known = ", ".join(sorted(known_bases()))
    raise ConfigError(
        f"user.base {image}: hpcenv cannot prove it fits (not an image hpcenv built here, and "
        f"not in hpcenv/knowledge/base_images.yaml: {known}); add it there with its versions "
        "and their source, or drop user.base"
    )
