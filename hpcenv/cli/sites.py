"""``hpcenv sites ...`` and ``hpcenv recipes``: inspect and validate sites and recipes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    sites = typer.Typer(help="List, show, validate site files; export their JSON Schema.")
    app.add_typer(sites, name="sites")

    @sites.callback(invoke_without_command=True)
    def _default(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:
            ctx.invoke(list_sites)

    @sites.command("list")
    def list_sites(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
        """List known sites (built-in and on HPCENV_SITE_PATH)."""
        from hpcenv.site import load_site, site_names

        rows = []
        for name in site_names():
            s = load_site(name)
            rows.append({"name": name, "arch": s.arch, "scheduler": s.scheduler.kind,
                         "runtime": s.runtime.kind, "mpi": s.mpi.spec, "model": s.mpi.model,
                         "gpus": s.node.gpus, "recipes": s.recipes})  # fmt: skip
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table("site", "arch", "scheduler", "runtime", "host MPI (model)", "GPUs", "recipes")
        for r in rows:
            table.add_row(str(r["name"]), str(r["arch"]), str(r["scheduler"]), str(r["runtime"]),
                          f"{r['mpi']} ({r['model']})", str(r["gpus"]), ", ".join(r["recipes"]))  # type: ignore[arg-type]  # fmt: skip
        Console().print(table)

    @sites.command("show")
    def show(name: str, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
        """Show one site, validated, with its provenance."""
        from hpcenv.site import load_site

        site = load_site(name)
        data = site.model_dump(mode="json")
        if as_json:
            typer.echo(json.dumps(data, indent=2))
        else:
            import yaml

            typer.echo(yaml.safe_dump(data, sort_keys=False))

    @sites.command("validate")
    def validate(files: list[Path]) -> None:
        """Validate site files; errors name file, line and field."""
        from hpcenv.site import Site
        from hpcenv.yamlsrc import validate_file

        for f in files:
            validate_file(Site, f)
            typer.echo(f"{f}: ok")

    @sites.command("schema")
    def schema() -> None:
        """Print the JSON Schema of site files (for editors)."""
        from hpcenv.site import json_schema

        typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))

    @app.command("recipes")
    def recipes(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
        """List recipes: what each image is for."""
        from hpcenv.recipe import load_recipe, recipe_names

        items = [load_recipe(n) for n in recipe_names()]
        if as_json:
            typer.echo(json.dumps([r.model_dump() for r in items], indent=2))
            return
        for r in items:
            comps = ", ".join(
                f"{k}{'' if v == 'required' else '?'}" for k, v in r.components.items()
            )
            typer.echo(f"{r.name:<12} {comps}\n{'':<12} {r.description}")
