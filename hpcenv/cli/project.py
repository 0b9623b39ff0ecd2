"""``hpcenv init`` and ``hpcenv config``: a project in one file (:mod:`hpcenv.projectfile`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hpcenv.cli.options import (
    JsonOpt,
    OptionalRecipeOpt,
    OptionalSiteOpt,
    PipOpt,
    RequirementsOpt,
    project_values,
    walltime,
)

AccountOpt = Annotated[
    str | None, typer.Option("--account", "-A", help="project/account to charge")
]
NodesOpt = Annotated[int | None, typer.Option("--nodes", "-N", min=1, help="nodes per job")]
TimeOpt = Annotated[
    str | None,
    typer.Option("--time", "-t", help="walltime: MM, HH:MM:SS or D-HH:MM:SS", callback=walltime),
]
LauncherOpt = Annotated[
    str | None, typer.Option("--launcher", help="rank launcher (default: the site's)")
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env", help="NAME (passed by name from the submitting shell) or NAME=VALUE; repeatable"
    ),
]

PartitionOpt = Annotated[
    str | None, typer.Option("--partition", "--queue", "-p", help="partition/queue")
]
QosOpt = Annotated[str | None, typer.Option("--qos", "-q", help="Slurm QOS")]
StageInOpt = Annotated[
    str | None, typer.Option("--stage-in", help="dataset folder staged to node-local storage")
]
StageOutOpt = Annotated[
    str | None, typer.Option("--stage-out", help="where the job's {output} is copied")
]


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init_cmd(
        site: OptionalSiteOpt = None,
        recipe: OptionalRecipeOpt = None,
        requirements: Annotated[
            list[str] | None,
            typer.Option(
                "--requirements", help="pip requirements file (default: ./requirements.txt)"
            ),
        ] = None,
        account: AccountOpt = None,
        nodes: NodesOpt = None,
        time: TimeOpt = None,
        launcher: LauncherOpt = None,
        env: EnvOpt = None,
        pip: PipOpt = None,
        partition: PartitionOpt = None,
        qos: QosOpt = None,
        stage_in: StageInOpt = None,
        stage_out: StageOutOpt = None,
        project: Annotated[
            str | None,
            typer.Option("--project", help="the project's name (default: the folder's name)"),
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="replace an existing hpcenv.yaml")
        ] = False,
    ) -> None:
        """Write hpcenv.yaml here: the project's site, recipe and job defaults, read by build,
        submit and the other commands (options given to them override it)."""
        from hpcenv.projectfile import init_values, write_new
        from hpcenv.projectfile import render as render_file

        here = Path(".")
        if not force and (here / "hpcenv.yaml").exists():
            from hpcenv.errors import ConfigError

            raise ConfigError("hpcenv.yaml exists here; give --force to replace it (or edit it)")
        if site:
            from hpcenv.site import load_site

            load_site(site)  # an unknown site: one line with did-you-mean, nothing written
        if recipe:
            from hpcenv.recipe import load_recipe

            load_recipe(recipe)
        values = init_values(
            here,
            project=project,
            site=site,
            recipe=recipe,
            requirements=requirements,
            account=account,
            nodes=nodes,
            time=time,
            launcher=launcher,
            env=env,
            pip=pip,
            partition=partition,
            qos=qos,
            stage_in=stage_in,
            stage_out=stage_out,
        )
        path = write_new(here, render_file(values), force=force)
        typer.echo(f"wrote {path}")
        for key, value in values.items():
            typer.echo(f"  {key}: {', '.join(value) if isinstance(value, list) else value}")

    @app.command("config")
    def config_cmd(
        ctx: typer.Context,
        site: OptionalSiteOpt = None,
        recipe: OptionalRecipeOpt = None,
        requirements: RequirementsOpt = None,
        pip: PipOpt = None,
        account: AccountOpt = None,
        nodes: NodesOpt = None,
        time: TimeOpt = None,
        launcher: LauncherOpt = None,
        partition: PartitionOpt = None,
        qos: QosOpt = None,
        env: EnvOpt = None,
        stage_in: StageInOpt = None,
        stage_out: StageOutOpt = None,
        schema: Annotated[
            bool, typer.Option("--schema", help="print the JSON Schema of hpcenv.yaml")
        ] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Print the values build and submit would use here, and where each came from (an
        option, hpcenv.yaml:LINE, the folder's name, or the default)."""
        if schema:
            from hpcenv.projectfile import json_schema

            typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))
            return
        from hpcenv.recipe import image_recipe

        got = project_values(
            ctx,
            {
                "site": site,
                "recipe": recipe,
                "requirements": requirements,
                "pip": pip,
                "account": account,
                "nodes": nodes,
                "time": time,
                "launcher": launcher,
                "partition": partition,
                "qos": qos,
                "env": env,
                "stage_in": stage_in,
                "stage_out": stage_out,
            },
            defaults={"nodes": 1},
        )
        recipe_got = got.get("recipe")
        image = (
            image_recipe(recipe_got, got.get("requirements", []), got.get("pip", []))
            if recipe_got
            else None
        )
        if as_json:
            typer.echo(json.dumps(got.to_dict() | {"image_recipe": image}, indent=2))
            return
        typer.echo(f"file: {got.file or 'none (hpcenv init writes one)'}")
        for name, value in got.values.items():
            shown = value.value
            if isinstance(shown, list):
                shown = ", ".join(str(v) for v in shown) or "-"
            typer.echo(f"  {name:<13} {'-' if shown is None else shown}  ({value.source})")
        if image:
            typer.echo(f"  {'image recipe':<13} {image}  (the image build makes and submit runs)")
