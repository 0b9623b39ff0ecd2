"""``hpcenv apptainer ARGS...``: the host's apptainer/singularity, or hpcenv's helper container.

On hosts without Apptainer this runs ``apptainer ARGS`` in hpcenv's privileged podman helper,
with the current folder and every absolute path named in ARGS mounted at itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

HELP = """Usage: hpcenv apptainer ARGS...

Run `apptainer ARGS...`: the host's apptainer (or singularity) where there is one, else
Apptainer in hpcenv's privileged podman helper container, with the current folder and every
absolute path named in ARGS mounted at itself. Examples:

  hpcenv apptainer exec IMAGE.sif python3 -c 'import torch'
  hpcenv apptainer help exec      (Apptainer's own help for a command)
"""


def register(app: typer.Typer) -> None:
    @app.command(
        "apptainer",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def apptainer(ctx: typer.Context) -> None:
        """Run apptainer (host, or hpcenv's helper container): e.g. exec IMAGE.sif CMD..."""
        from hpcenv.apptainer import Apptainer
        from hpcenv.engines import engine_env

        args = list(ctx.args)
        if not args or args[0] in ("-h", "--help"):  # never start a privileged container for it
            typer.echo(HELP)
            return
        runner = Apptainer()
        runner.ensure_helper()
        paths = [Path.cwd()]
        for arg in args:
            for piece in arg.split(":"):
                if piece.startswith("/") and Path(piece).exists():
                    paths.append(Path(piece).resolve().parent)
        # the helper runs as root: let Open MPI's mpirun start there
        root_ok = ["-e", "OMPI_ALLOW_RUN_AS_ROOT=1", "-e", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]
        argv = runner.command(args, paths=paths, workdir=Path.cwd(), extra=root_ok)
        os.execvpe(argv[0], argv, engine_env())
