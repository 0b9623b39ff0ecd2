"""Options shared by several commands, defined once."""

from __future__ import annotations

from typing import Annotated

import typer


def _complete_site(incomplete: str) -> list[str]:
    from hpcenv.site import site_names

    return [n for n in site_names() if n.startswith(incomplete)]


def _complete_recipe(incomplete: str) -> list[str]:
    from hpcenv.recipe import recipe_names

    return [n for n in recipe_names() if n.startswith(incomplete)]


SiteOpt = Annotated[
    str,
    typer.Option(
        "--site",
        "-s",
        envvar="HPCENV_SITE",
        help="site name or site file path",
        autocompletion=_complete_site,
    ),
]
OptionalSiteOpt = Annotated[
    str | None,
    typer.Option(
        "--site",
        "-s",
        envvar="HPCENV_SITE",
        help="site name or site file path",
        autocompletion=_complete_site,
    ),
]
RecipeOpt = Annotated[
    str,
    typer.Option(
        "--recipe", "-r", help="recipe name (see hpcenv recipes)", autocompletion=_complete_recipe
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="pin a component, NAME=VALUE (e.g. torch=2.2.0, mpi=openmpi@4.1.4)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
