"""Recipes: what an image is for (components wanted), as validated data in ``recipes/``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from hpcenv.errors import ConfigError, did_you_mean
from hpcenv.paths import recipes_dir
from hpcenv.safe import Name, SafeModel
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
    description: str = Field(max_length=1000)
    accelerator: Literal["none", "site", "intel"] = "none"
    components: dict[
        Literal["torch", "horovod", "oneccl", "mpi4py", "daal4py", "torch-ccl", "ipex"],
        Literal["required", "optional"],
    ]
    horovod_operations: list[Literal["mpi", "gloo", "ccl", "nccl"]] = []
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


def load_recipe(name_or_path: str) -> Recipe:
    """A recipe by name (built-in) or by path (``.yaml``/``.yml`` or a name with a ``/``)."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") and os.sep not in name_or_path:
        path = recipes_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown recipe {name_or_path!r}{did_you_mean(name_or_path, recipe_names())}; "
            f"known: {', '.join(recipe_names())}"
        )
    return validate_file(Recipe, path)
