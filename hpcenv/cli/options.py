"""Options shared by several commands, defined once."""

from __future__ import annotations

from typing import Annotated

import typer

from hpcenv.choices import SshClient


def positive_seconds(
    ctx: typer.Context, param: typer.CallbackParam, value: float | None
) -> float | None:
    """A duration option: finite and > 0 (``nan`` compares false with every bound, so click's
    ``min=`` lets it through, and ``--timeout nan`` would wait forever)."""
    import math

    from hpcenv.errors import ConfigError

    if value is None:  # an optional duration left out
        return None
    if not math.isfinite(value) or value <= 0:
        name = (param.opts or [param.name or "value"])[0]
        raise ConfigError(f"{name} {value}: give a number of seconds greater than 0")
    return value


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
SshConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--ssh-config",
        metavar="FILE",
        help="ssh client config to read instead of ~/.ssh/config (ssh -F)",
    ),
]
SshClientOpt = Annotated[
    SshClient,
    typer.Option(
        "--ssh-client",
        help="openssh: the system ssh (reads ~/.ssh/config, ProxyJump, ControlMaster, agent); "
        "paramiko: the [ssh] extra, key auth only",
    ),
]
