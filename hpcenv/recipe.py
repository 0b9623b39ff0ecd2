"""Recipes: what an image is for (components wanted), as validated data in ``recipes/``.

A user's own recipe file names a built-in (or another file) in ``extends:`` and adds a ``user:``
section (:mod:`hpcenv.usercontent`): the fields it leaves out (``description``, ``accelerator``,
``components``, ``horovod_operations``) come from the recipe it extends, and the user sections
add up, the extending one's last::

    name: myproject
    extends: horovod-cpu
    user:
      requirements: [requirements.txt]   # relative to this file
      pip: ["tabulate>=0.9"]

``extends`` (not ``base``) because a base *image* is another thing, and the site files use the
same word for the same idea (``hpcenv.site.load``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from hpcenv import naming
from hpcenv.errors import ConfigError, did_you_mean
from hpcenv.paths import recipes_dir
from hpcenv.safe import Name, SafeModel
from hpcenv.usercontent import UserContent, UserRequirement, UserSection, resolve_section
from hpcenv.yamlsrc import validate_file

COMPONENTS = (
    "os",
    "arch",
    "python",
    "mpi",
    "pmix",
    "ucx",
    "libfabric",
    "cuda",
    "rocm",
    "nccl",
    "rccl",
    "oneccl",
    "net-plugin",
    "torch",
    "horovod",
    "torch-ccl",
    "ipex",
    "mpi4py",
    "daal4py",
)


class Recipe(SafeModel):
    """A recipe file; its name reaches labels, tags and comments, so it is a plain name."""

    name: Name
    extends: str | None = Field(
        default=None,
        max_length=1024,
        description="a built-in recipe name, or a recipe file relative to this one",
    )
    description: str = Field(default="", max_length=1000)
    accelerator: Literal["none", "site", "intel"] = "none"
    components: dict[
        Literal["torch", "horovod", "oneccl", "mpi4py", "daal4py", "torch-ccl", "ipex"],
        Literal["required", "optional"],
    ] = {}
    horovod_operations: list[Literal["mpi", "gloo", "ccl", "nccl"]] = []
    user: UserSection = Field(
        default=UserSection(), description="what the user adds (pip, apt, files, env ...)"
    )
    _content: UserContent = PrivateAttr(default_factory=UserContent)

    @model_validator(mode="after")
    def _has_components(self) -> Recipe:
        if not self.components and self.extends is None:
            raise ValueError("give components, or extends: a recipe to take them from")
        return self

    @property
    def content(self) -> UserContent:
        """The user content, resolved (requirements read, paths checked) when loaded."""
        return self._content

    # os: python packages from the image OS's own packages (python3-mpi4py, python3-numpy) in a
    # venv that sees them; nothing is compiled or fetched from PyPI, so the image builds in
    # minutes under emulation (qemu-user-static runs code 5-20x slower: platform notes)
    python_from: Literal["pip", "os"] = "pip"

    def wants(self, name: str) -> bool:
        return name in self.components

    def requires(self, name: str) -> bool:
        return self.components.get(name) == "required"  # type: ignore[call-overload]


def recipe_names() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.yaml"))


INHERITED = ("description", "accelerator", "components", "horovod_operations")
MAX_EXTENDS = 8


def is_path(name_or_path: str) -> bool:
    return Path(name_or_path).suffix in (".yaml", ".yml") or os.sep in name_or_path


def load_recipe(name_or_path: str, *, _seen: tuple[Path, ...] = ()) -> Recipe:
    """A recipe by name (built-in) or by path (``.yaml``/``.yml`` or a name with a ``/``),
    with what it ``extends`` merged in and its ``user:`` section resolved."""
    path = Path(name_or_path)
    if not is_path(name_or_path):
        path = recipes_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown recipe {name_or_path!r}{did_you_mean(name_or_path, recipe_names())}; "
            f"known: {', '.join(recipe_names())}"
        )
    recipe = validate_file(Recipe, path)
    if is_path(name_or_path) and recipe.name in recipe_names():
        raise ConfigError(
            f"{path}: name: {recipe.name} is the name of a built-in recipe, whose image your "
            "recipe would replace; give your recipe a name of its own"
        )
    content = resolve_section(recipe.user, path.parent, path.name)
    if recipe.extends is not None:
        here = path.resolve()
        if here in _seen or len(_seen) >= MAX_EXTENDS:
            raise ConfigError(f"{path}: extends: {recipe.extends!r} leads back to itself")
        ref = recipe.extends
        if is_path(ref):
            ref = str(path.parent / ref)
        parent = load_recipe(ref, _seen=(*_seen, here))
        taken = {k: getattr(parent, k) for k in INHERITED if k not in recipe.model_fields_set}
        recipe = recipe.model_copy(update=taken)
        content = parent.content.then(content)
    recipe._content = content
    return recipe


def with_additions(
    recipe: Recipe, requirements: list[Path], pip: list[str], project: str | None = None
) -> Recipe:
    """The short form ``--recipe NAME --requirements FILE --pip SPEC``: ``recipe`` with those
    added (files relative to the working directory), named ``NAME-PROJECT``
    (:func:`hpcenv.naming.project_recipe`) so that the built-in image keeps its tag and two
    projects on one site never share an image. ``project`` defaults to :func:`project_of` the
    first requirements file (else the current folder)."""
    if not requirements and not pip:
        return recipe
    from pydantic import ValidationError

    from hpcenv.safe import validation_message
    from hpcenv.usercontent import read_requirements

    try:
        section = UserSection(pip=pip)
    except ValidationError as err:
        raise ConfigError(validation_message(err, "--pip").splitlines()[0]) from None
    content = UserContent(requirements=tuple(UserRequirement(s, f"--pip {s}") for s in section.pip))
    for req in requirements:
        if not req.is_file():
            raise ConfigError(f"--requirements {req}: not a file")
        found = read_requirements(req, req.resolve().parent, str(req))
        content = content.then(UserContent(requirements=tuple(found)))
    if project is None:
        project = project_of(requirements[0].resolve().parent if requirements else Path.cwd())
    name = naming.project_recipe(recipe=recipe.name, project=project, builtin=recipe_names())
    out = recipe.model_copy(update={"name": name})
    out._content = recipe.content.then(content)
    return out


def project_of(folder: Path) -> str:
    """A folder's project: the ``project:`` of its ``hpcenv.yaml``, else the folder's name
    (:func:`hpcenv.naming.project_name`). ``build`` and ``submit`` ask it of the same folder (the
    requirements file's), so they name the same image from wherever they are run."""
    from hpcenv.projectfile import find, load

    found = find(folder)
    if found is not None:
        named = load(found).data.project
        if named:
            return named
    return naming.project_name(folder.name)


def image_recipe(recipe: str, requirements: list[Path], pip: list[str]) -> str:
    """The recipe name of the image ``build`` makes and ``submit`` runs: the recipe's own, or
    ``<recipe>-<project>`` when requirements or pip specs are added (as :func:`with_additions`
    names it, without reading the files)."""
    name = recipe_name(recipe)
    if not requirements and not pip:
        return name
    folder = requirements[0].resolve().parent if requirements else Path.cwd()
    return naming.project_recipe(recipe=name, project=project_of(folder), builtin=recipe_names())


def recipe_name(name_or_path: str) -> str:
    """The name a recipe's images carry: a built-in's own, a recipe file's ``name:``."""
    return load_recipe(name_or_path).name if is_path(name_or_path) else name_or_path
