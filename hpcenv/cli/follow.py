"""``hpcenv status|cancel|logs``: follow a submitted job (one service call each, issue 18)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from hpcenv.cli.options import JsonOpt

OnOpt = Annotated[
    str | None,
    typer.Option("--on", help="local or the SSH host, when jobs in several places share the id"),
]
JobSiteOpt = Annotated[str | None, typer.Option("--site", "-s", help="for jobs not submitted here")]


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status_cmd(
        job_id: str,
        site: JobSiteOpt = None,
        as_json: JsonOpt = False,
        on: OnOpt = None,
    ) -> None:
        """Show a job's state in the scheduler's own words."""
        from hpcenv.jobs.service import job_status

        st = job_status(job_id, site, on)
        if as_json:
            typer.echo(json.dumps(st.to_dict(), indent=2))
            return
        typer.echo(st.message())
        for task in st.tasks:
            typer.echo(f"  {task.message()}")

    @app.command("cancel")
    def cancel_cmd(job_id: str, site: JobSiteOpt = None, on: OnOpt = None) -> None:
        """Cancel a job."""
        from hpcenv.jobs.service import cancel_job

        cancel_job(job_id, site, on)
        typer.echo(f"cancelled {job_id}")

    @app.command("logs")
    def logs_cmd(job_id: str, on: OnOpt = None) -> None:
        """Print a job's stdout and stderr files."""
        from hpcenv.jobs.service import job_logs

        typer.echo(job_logs(job_id, on), nl=False)
