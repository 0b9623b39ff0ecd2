"""Options shared by several commands, defined once."""

from __future__ import annotations

from typing import Annotated

import typer

SiteOpt = Annotated[
    str, typer.Option("--site", "-s", envvar="HPCENV_SITE", help="site name or site file path")
]
RecipeOpt = Annotated[str, typer.Option("--recipe", "-r", help="recipe name (see hpcenv recipes)")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="pin a component, NAME=VALUE (e.g. torch=2.2.0, mpi=openmpi@4.1.4)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
