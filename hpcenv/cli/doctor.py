"""``hpcenv doctor``: what this host offers hpcenv, and how to fix what it lacks."""

from __future__ import annotations

import json

import typer

from hpcenv.cli.options import JsonOpt

_STYLE = {"ok": "green", "missing": "yellow", "broken": "red"}


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(as_json: JsonOpt = False) -> None:
        """Check engines, OCI runtimes, Apptainer, MPI launchers, schedulers and tools.

        Exits 1 when something hpcenv needs here (podman, runc, debootstrap) is not ok.
        """
        from hpcenv.doctor import healthy, run_checks

        checks = run_checks()
        good = healthy(checks)
        if as_json:
            typer.echo(json.dumps({"healthy": good, "checks": [c.to_dict() for c in checks]},
                                  indent=2))  # fmt: skip
        else:
            from rich.console import Console
            from rich.table import Table

            table = Table("area", "check", "status", "why", "how to fix", show_lines=False)
            for c in checks:
                status = f"[{_STYLE[c.status]}]{c.status}[/]" + (" *" if c.required else "")
                table.add_row(c.category, c.name, status, c.why, c.fix)
            console = Console()
            console.print(table)
            verdict = "all ok" if good else "[red]some needed checks failed[/]"
            console.print(f"* needed by hpcenv on this host; {verdict}")
        if not good:
            raise typer.Exit(1)
