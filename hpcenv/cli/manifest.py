"""``hpcenv manifest``: write or verify a dataset directory's manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("manifest")
    def manifest_cmd(
        directory: Path,
        verify: Annotated[bool, typer.Option("--verify", help="check instead of write")] = False,
    ) -> None:
        """Write (or --verify) DIR/.hpcenv-manifest: sizes and sha256 of every file."""
        from hpcenv.errors import JobError
        from hpcenv.jobs.spec import MANIFEST_NAME
        from hpcenv.jobs.staging import verify_manifest, write_manifest

        if verify:
            problems = verify_manifest(directory, directory / MANIFEST_NAME)
            if problems:
                raise JobError(f"{directory}: " + "; ".join(problems[:10]))
            typer.echo(f"{directory}: verified")
        else:
            path = write_manifest(directory)
            typer.echo(f"wrote {path} ({len(path.read_bytes().splitlines())} files)")
