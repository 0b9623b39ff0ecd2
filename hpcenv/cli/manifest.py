"""``hpcenv manifest``: write or verify a dataset directory's manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hpcenv.cli.options import JsonOpt


def register(app: typer.Typer) -> None:
    @app.command("manifest")
    def manifest_cmd(
        directory: Path,
        verify: Annotated[bool, typer.Option("--verify", help="check instead of write")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Write (or --verify) DIR/.hpcenv-manifest: sizes and sha256 of every file."""
        from hpcenv.errors import JobError
        from hpcenv.jobs.spec import MANIFEST_NAME
        from hpcenv.jobs.staging import verify_manifest, write_manifest

        if verify:
            problems = verify_manifest(directory, directory / MANIFEST_NAME)
            if problems:
                raise JobError(f"{directory}: " + "; ".join(problems[:10]))
            manifest = directory / MANIFEST_NAME
            count = len(manifest.read_bytes().splitlines())
            doc = {"directory": str(directory), "manifest": str(manifest), "files": count}
            if as_json:
                typer.echo(json.dumps({**doc, "verified": True}, indent=2))
            else:
                typer.echo(f"{directory}: verified")
        else:
            path = write_manifest(directory)
            count = len(path.read_bytes().splitlines())
            if as_json:
                doc = {"directory": str(directory), "manifest": str(path), "files": count}
                typer.echo(json.dumps({**doc, "written": True}, indent=2))
            else:
                typer.echo(f"wrote {path} ({count} files)")
