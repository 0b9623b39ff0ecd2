"""Options shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hpcenv.choices import SshClient

if TYPE_CHECKING:
    from hpcenv.projectfile import Merged


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


def walltime(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """``-t/--time``: Slurm's formats (MM, HH:MM:SS, D-HH[:MM[:SS]]), checked where it enters."""
    from hpcenv.errors import ConfigError
    from hpcenv.safe import walltime_seconds

    if value is None:
        return None
    try:
        walltime_seconds(value)
    except ValueError as err:
        raise ConfigError(f"-t/--time: {err}") from None
    return value


def job_name(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """``-J/--job-name``: what every scheduler takes in a name and a log file name."""
    import re

    from hpcenv.errors import ConfigError

    if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
        raise ConfigError(
            f"-J/--job-name {value!r}: 1-64 letters, digits, '_', '.', '-', starting with a "
            "letter or digit"
        )
    return value


def log_name(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """``-o``/``-e``: a file name in the job's workdir, where ``status`` and ``logs`` read it,
    or a folder (ending in /, or an existing absolute one) for the default name in it."""
    import os
    import re

    from hpcenv.errors import ConfigError
    from hpcenv.jobs.spec import LOG_NAME

    if value is not None and value.startswith("/") and os.path.isdir(value):
        value = value.rstrip("/") + "/"
    if value is not None and not re.fullmatch(LOG_NAME, value):
        name = "-o/--output" if "-o" in param.opts else "-e/--error"
        raise ConfigError(
            f"{name} {value!r}: a file name in the job's workdir (letters, digits, _.%+-, "
            "Slurm's %j %A %a %x), or a folder for it ending in /"
        )
    return value


def _complete_site(incomplete: str) -> list[str]:
    from hpcenv.site import site_names

    return [n for n in site_names() if n.startswith(incomplete)]


def complete_recipe(incomplete: str) -> list[str]:
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
        "--recipe",
        "-r",
        help="recipe name (see hpcenv recipes) or your recipe file (extends: a recipe, user: ...)",
        autocompletion=complete_recipe,
    ),
]
RequirementsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--requirements",
        help="pip requirements file added to the recipe (image NAME-PROJECT; the matched stack "
        "stays: a conflicting pin is refused)",
    ),
]
PipOpt = Annotated[
    list[str] | None,
    typer.Option("--pip", help="pip requirement added to the recipe, e.g. 'tabulate>=0.9'"),
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
OptionalRecipeOpt = Annotated[
    str | None,
    typer.Option(
        "--recipe",
        "-r",
        help="recipe name (see hpcenv recipes) or your recipe file (default: hpcenv.yaml's)",
        autocompletion=complete_recipe,
    ),
]


def project_values(
    ctx: typer.Context,
    given: dict[str, object],
    defaults: dict[str, object] | None = None,
    params: dict[str, str] | None = None,
) -> Merged:
    """The command's options merged with ``./hpcenv.yaml`` (:func:`hpcenv.projectfile.merge`).

    ``given``: each option by project-file field name (``params`` maps a field to the command's
    parameter where the names differ, e.g. ``partition`` -> ``queue``). An option counts as
    given when it was on the command line or in its environment variable (``HPCENV_SITE``);
    a default Typer filled in does not, so the file's value wins over it."""
    from hpcenv.projectfile import load_here, merge

    explicit: dict[str, object] = {}
    sources: dict[str, str] = {}
    params = params or {}
    envvars = {p.name: p.envvar for p in ctx.command.params}
    for name, value in given.items():
        param = params.get(name, name)
        source = getattr(ctx.get_parameter_source(param), "name", None)  # click's enum
        if source == "COMMANDLINE":
            explicit[name] = value
        elif source == "ENVIRONMENT":
            explicit[name] = value
            sources[name] = f"env {envvars.get(param)}"
    return merge(explicit, load_here(), defaults, sources=sources)


def need(merged: Merged, name: str) -> str:
    """A value a command cannot do without (the site, a recipe), from an option or the file."""
    from hpcenv.errors import ConfigError

    value = merged.get(name)
    if not value:
        where = "hpcenv.yaml" if merged.file else "an hpcenv.yaml (hpcenv init writes one)"
        raise ConfigError(f"give --{name}, or {name}: in {where}")
    return str(value)
