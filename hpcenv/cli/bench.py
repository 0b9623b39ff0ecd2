"""``hpcenv bench``: measure container tax, tuning, K-Means, build cost and CLI speed in one run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hpcenv.cli.options import SiteOpt


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench(
        site: SiteOpt = "local",
        out: Annotated[
            Path, typer.Option("--out", "-o", help="results folder (report.md, report.json, PNGs)")
        ] = Path("results/bench"),
        quick: Annotated[
            bool,
            typer.Option(
                "--quick",
                help="the headline ratios in minutes: container tax, tuning gain and floor, "
                "time to first step, training against the documented launch",
            ),
        ] = False,
        image: Annotated[
            str | None,
            typer.Option("--image", "-i", help="image to measure (default: horovod-cpu of SITE)"),
        ] = None,
        section: Annotated[
            list[str] | None,
            typer.Option(
                "--section",
                help="run only these sections (repeatable): startup, memcopy, allreduce, tuning, "
                "mpi-impl, mpi-abi, likeforlike, mnist, ccl, kmeans, two-node, training, cli, rebuild, sif, build, targets; "
                "and full-build (a 10+ min cold build of the full image, recorded for later reports)",
            ),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="report.json on stdout (progress: stderr)")
        ] = False,
    ) -> None:
        """Benchmarks in one run: allreduce on the bare host vs in the image, Horovod/gloo vs MPI,
        memory-copy ceiling, launch tuning vs naive, daal4py vs scikit-learn K-Means, build cost
        vs a naive single-stage and an hpccm build, render and --help times.

        Writes OUT/report.md (tables with ratios), OUT/report.json and PNG plots.
        """
        from hpcenv.extras import require_extra

        require_extra("bench", "hpcenv bench")
        from hpcenv.bench.context import BenchConfig
        from hpcenv.bench.report import headline_table
        from hpcenv.bench.runner import run_bench

        cfg = BenchConfig(
            site=site, out=out, quick=quick, image=image, sections=tuple(section or ())
        )
        report = run_bench(cfg, echo=lambda line: typer.echo(line, err=True))  # progress: stderr
        if as_json:
            import json

            typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True, default=str))
        else:
            typer.echo("")
            typer.echo(headline_table(report))
            typer.echo(f"total {report.meta['seconds']:.0f} s; report: {out / 'report.md'}")
        if any(s.error for s in report.sections):
            failed = ", ".join(s.key for s in report.sections if s.error)
            typer.echo(f"failed sections: {failed}", err=True)
            raise typer.Exit(1)
