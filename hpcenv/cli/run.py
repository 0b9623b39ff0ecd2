"""``hpcenv run`` and ``hpcenv shell``: the job submit would write, run inside an allocation.

Both take submit's own options (the same signature: ``hpcenv submit --help`` lists them), parsed
into the same :class:`~hpcenv.jobs.service.SubmitRequest`, and call
:mod:`hpcenv.jobs.interactive` (issue 37).
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from hpcenv.jobs.service import SubmitRequest

# submit's option names that are not SubmitRequest's field names
_RENAMED = {"time": "walltime", "option": "options"}
_SSH = ("ssh_host", "ssh_port", "ssh_user", "ssh_key", "known_hosts", "ssh_config", "ssh_client")


def request(params: dict[str, Any]) -> SubmitRequest:
    """submit's parsed options as its request (each option as submit passes it)."""
    from hpcenv.jobs.service import SshOptions, SubmitRequest

    values: dict[str, Any] = {}
    for f in fields(SubmitRequest):
        name = next((k for k, v in _RENAMED.items() if v == f.name), f.name)
        if name not in params:
            continue
        value = params[name]
        if isinstance(value, list):
            value = tuple(value)
        if value is None and isinstance(f.default, tuple):
            value = ()
        values[f.name] = value
    values["site_mpi"] = not params.get("no_site_mpi", False)
    ssh = {k.removeprefix("ssh_"): params[k] for k in _SSH if k in params}
    values["ssh"] = SshOptions(**ssh)
    return SubmitRequest(**values)


def _stderr(line: str) -> None:
    from hpcenv.printable import printable

    typer.echo(printable(line), err=True)


def with_project(ctx: typer.Context, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with ``./hpcenv.yaml``'s values under the options given, as submit merges
    them (:func:`hpcenv.cli.options.project_values`): each project-file field by the option
    submit reads it into (``partition`` is ``--partition``'s ``queue``)."""
    from hpcenv.cli.options import need, project_values
    from hpcenv.projectfile import ProjectFile

    option = {"partition": "queue"}
    names = [f for f in ProjectFile.model_fields if option.get(f, f) in params]
    defaults = {p.name: p.default for p in ctx.command.params if p.name}
    got = project_values(
        ctx,
        {f: params[option.get(f, f)] for f in names},
        defaults={f: defaults.get(option.get(f, f)) for f in names},
        params=option,
    )
    merged = {**params, **{option.get(f, f): got.get(f) for f in names}}
    merged["site"] = need(got, "site")
    return merged


def _go(ctx: typer.Context, params: dict[str, Any], *, shell: bool) -> None:
    from hpcenv.jobs.interactive import execute, prepare_run

    req = request(with_project(ctx, params))
    run = prepare_run(req, shell=shell, tty=sys.stdin.isatty(), notify=_stderr)
    if req.dry_run:
        if params.get("as_json"):
            typer.echo(json.dumps(run.to_dict(), indent=2))
        else:
            typer.echo(run.text(), nl=False)
        return
    code = execute(run)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    from hpcenv.cli import submit

    probe = typer.Typer()
    submit.register(probe)
    (submit_cmd,) = (c.callback for c in probe.registered_commands)
    assert submit_cmd is not None

    @app.command(
        "run",
        help="Inside an allocation (salloc, qsub -I, bsub -Is), run the job submit would "
        "write, now: the same image, binds, environment and launch line (submit's options, "
        "-- COMMAND...); --dry-run prints its command lines.",
    )
    @functools.wraps(submit_cmd)
    def run_cmd(ctx: typer.Context, **params: Any) -> None:
        _go(ctx, params, shell=False)

    @app.command(
        "shell",
        help="Inside an allocation, a shell in the job's container on its first node (submit's "
        "options, no command); --dry-run prints its command lines.",
    )
    @functools.wraps(submit_cmd)
    def shell_cmd(ctx: typer.Context, **params: Any) -> None:
        _go(ctx, params, shell=True)
