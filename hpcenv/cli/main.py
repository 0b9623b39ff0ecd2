"""Root of the ``hpcenv`` command: composes one small module per command group.

Each module in ``COMMAND_MODULES`` exposes ``register(app)``. Heavy imports stay inside
command bodies so ``hpcenv --help`` is instant.

The edge of the program is here too: a domain error is one line and exit 2, an output that
cannot be written (``> /dev/full``, ``| head -0``) one line and exit 1, Ctrl-C one line and exit
130 at any moment (while the modules load: :mod:`hpcenv.cli`).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from types import FrameType
from typing import Annotated, NoReturn

import typer

from hpcenv import __version__
from hpcenv.cli import interrupted as _interrupted
from hpcenv.errors import HpcenvError

COMMAND_MODULES: tuple[str, ...] = (
    "hpcenv.cli.sites",
    "hpcenv.cli.project",
    "hpcenv.cli.stack",
    "hpcenv.cli.doctor",
    "hpcenv.cli.data",
    "hpcenv.cli.smoke",
    "hpcenv.cli.submit",
    "hpcenv.cli.follow",
    "hpcenv.cli.run",
    "hpcenv.cli.tune",
    "hpcenv.cli.manifest",
    "hpcenv.cli.bench",
    "hpcenv.cli.apptainer",
)

app = typer.Typer(
    name="hpcenv",
    help="Matched container stacks for distributed ML on HPC: resolve, render, build, test, submit.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits it
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


_INTERRUPT_SEEN: list[bool] = []


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """Python's own Ctrl-C (KeyboardInterrupt), remembered: one swallowed on its way (in a
    ``__del__``, a library's cleanup) still ends the command with 130, not 0."""
    _INTERRUPT_SEEN.append(True)
    raise KeyboardInterrupt


def _unraisable(hook: sys.UnraisableHookArgs) -> None:
    """A Ctrl-C that Python could not raise (in a finalizer) is remembered, not printed."""
    if hook.exc_type is not None and issubclass(hook.exc_type, KeyboardInterrupt):
        _INTERRUPT_SEEN.append(True)
        return
    sys.__unraisablehook__(hook)


def _output_failed(err: OSError) -> NoReturn:
    """stdout or a file could not be written (a full disk, a closed pipe): one line, exit 1.

    stdout is pointed at /dev/null first, so Python's own flush at exit does not fail again
    with a second message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    if isinstance(err, BrokenPipeError):
        what = "the output was closed before hpcenv finished writing it (broken pipe)"
    else:
        what = err.strerror or str(err)
        if err.filename:
            what += f": {err.filename}"
    typer.echo(f"error: {what}", err=True)
    sys.exit(1)


def main() -> None:
    """Entry point: the exit code is always the command's own.

    ``standalone_mode=False`` lets domain errors become one line on stderr (exit code 2), but
    click then *returns* the code of a ``typer.Exit`` instead of exiting with it; that code is
    passed on here. Ctrl-C exits 130 (128 + SIGINT), as shells expect; stdout is flushed here so
    a failed write is reported (exit 1), not lost in Python's shutdown.
    """
    handler = signal.getsignal(signal.SIGINT)
    # not SIG_IGN (nohup, &); bin/hpcenv's first handler (marked) is replaced
    if handler is signal.default_int_handler or getattr(handler, "hpcenv_early", False):
        signal.signal(signal.SIGINT, _on_sigint)
    from hpcenv import signals

    signals.install()  # SIGTERM/SIGHUP (Slurm's time limit): containers and secrets cleaned up
    sys.unraisablehook = _unraisable
    try:
        code = app(prog_name="hpcenv", standalone_mode=False)
        sys.stdout.flush()
    except HpcenvError as err:
        if os.environ.get("HPCENV_DEBUG"):
            raise
        from hpcenv.credentials import redact
        from hpcenv.printable import printable

        for line in redact(str(err)).splitlines() or [""]:  # several conflicts: one line each
            typer.echo(f"error: {printable(line)}", err=True)  # may quote a scheduler
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        _flush_or_fail()
        sys.exit(130 if _INTERRUPT_SEEN and ex.exit_code == 0 else ex.exit_code)
    except typer.Abort as ex:
        if _INTERRUPT_SEEN or isinstance(ex.__cause__ or ex.__context__, KeyboardInterrupt):
            _interrupted()
        typer.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        _interrupted()
    except OSError as err:
        if os.environ.get("HPCENV_DEBUG"):
            raise
        _output_failed(err)
    except Exception as ex:  # usage errors of Typer's click layer: shown as click shows them
        show = getattr(ex, "show", None)
        if callable(show) and isinstance(getattr(ex, "exit_code", None), int):
            show()
            sys.exit(ex.exit_code)  # type: ignore[attr-defined]
        raise
    if code == 130 or _INTERRUPT_SEEN:  # Typer turns KeyboardInterrupt into Exit(130)
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)


def _flush_or_fail() -> None:
    try:
        sys.stdout.flush()
    except OSError as err:
        _output_failed(err)
