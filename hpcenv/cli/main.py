"""Root of the ``hpcenv`` command: composes one small module per command group.

Each module in ``COMMAND_MODULES`` exposes ``register(app)``. Heavy imports stay inside
command bodies so ``hpcenv --help`` is instant.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

import typer

from hpcenv import __version__
from hpcenv.errors import HpcenvError

COMMAND_MODULES: tuple[str, ...] = (
    "hpcenv.cli.sites",
    "hpcenv.cli.stack",
    "hpcenv.cli.doctor",
    "hpcenv.cli.data",
    "hpcenv.cli.smoke",
    "hpcenv.cli.submit",
    "hpcenv.cli.follow",
    "hpcenv.cli.tune",
    "hpcenv.cli.manifest",
    "hpcenv.cli.bench",
    "hpcenv.cli.apptainer",
)

app = typer.Typer(
    name="hpcenv",
    help="Matched container stacks for distributed ML on HPC: resolve, render, build, test, submit.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"hpcenv {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="print hpcenv's version and exit",
        ),
    ] = False,
) -> None:
    """Matched container stacks for distributed ML on HPC: resolve, render, build, test, submit."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point: the exit code is always the command's own.

    ``standalone_mode=False`` lets domain errors become one line on stderr (exit code 2), but
    click then *returns* the code of a ``typer.Exit`` instead of exiting with it; that code is
    passed on here. Ctrl-C exits 130 (128 + SIGINT), as shells expect.
    """
    try:
        code = app(prog_name="hpcenv", standalone_mode=False)
    except HpcenvError as err:
        if os.environ.get("HPCENV_DEBUG"):
            raise
        from hpcenv.credentials import redact

        for line in redact(str(err)).splitlines() or [""]:  # several conflicts: one line each
            typer.echo(f"error: {line}", err=True)
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except typer.Abort as ex:
        if isinstance(ex.__cause__ or ex.__context__, KeyboardInterrupt):
            typer.echo("interrupted", err=True)
            sys.exit(130)
        typer.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as ex:  # usage errors of Typer's click layer: shown as click shows them
        show = getattr(ex, "show", None)
        if callable(show) and isinstance(getattr(ex, "exit_code", None), int):
            show()
            sys.exit(ex.exit_code)  # type: ignore[attr-defined]
        raise
    if code == 130:  # Typer turns KeyboardInterrupt into Exit(130), which click returns here
        typer.echo("interrupted", err=True)
    sys.exit(code if isinstance(code, int) else 0)
