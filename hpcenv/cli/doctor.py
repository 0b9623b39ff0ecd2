"""``hpcenv doctor``: what this host offers hpcenv, and how to fix what it lacks."""

from __future__ import annotations

import json

import typer

from hpcenv.cli.options import JsonOpt, OptionalSiteOpt

_STYLE = {"ok": "green", "missing": "yellow", "broken": "red"}


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(site: OptionalSiteOpt = None, as_json: JsonOpt = False) -> None:
        """Check engines, OCI runtimes, Apptainer, MPI launchers, schedulers and tools.

        Exits 1 when something needed here is not ok: with --site, what that site's path needs
        (engine, runtime, scheduler, launcher; debootstrap only where the site bootstraps its
        base); without, what building the local image needs (podman, runc, debootstrap).
        """
        from hpcenv.doctor import healthy, run_checks
        from hpcenv.site import load_site

        loaded = load_site(site) if site else None
        checks = run_checks(site=loaded)
        good = healthy(checks)
        if as_json:
            doc = {
                "healthy": good,
                "site": loaded.name if loaded else None,
                "checks": [c.to_dict() for c in checks],
            }
            typer.echo(json.dumps(doc, indent=2))
        else:
            from rich.table import Table

            table = Table("area", "check", "status", "why", "how to fix", show_lines=False)
            for c in checks:
                status = f"[{_STYLE[c.status]}]{c.status}[/]" + (" *" if c.required else "")
                table.add_row(c.category, c.name, status, c.why, c.fix)
            from hpcenv.cli.console import console as make_console

            console = make_console()
            console.print(table)
            verdict = "all ok" if good else "[red]some needed checks failed[/]"
            where = f"for site {loaded.name}" if loaded else "to build the local image"
            console.print(f"* needed on this host {where}; {verdict}")
        if not good:
            raise typer.Exit(1)
