"""``hpcenv smoke``: run the in-image smoke suite against a built image and report numbers."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from hpcenv import naming
from hpcenv.choices import SifSource
from hpcenv.errors import ConfigError

SMOKE_RECIPE = "horovod-cpu"  # the recipe whose image carries every smoke check's stack


def register(app: typer.Typer) -> None:
    @app.command("smoke")
    def smoke(
        ctx: typer.Context,
        image: Annotated[
            str | None, typer.Option("--image", "-i", help="image tag to test")
        ] = None,
        site: Annotated[
            str | None,
            typer.Option(
                "--site",
                "-s",
                help=f"with --recipe: test {naming.image_tag(recipe='RECIPE', site='SITE')}",
            ),
        ] = None,
        recipe: Annotated[
            str | None,
            typer.Option("--recipe", "-r", help="recipe name (with --site; default horovod-cpu)"),
        ] = None,
        results: Annotated[
            Path | None,
            typer.Option("--results", help="results folder (default: <cache>/results/smoke-...)"),
        ] = None,
        data: Annotated[
            Path | None,
            typer.Option("--data", help="staged MNIST folder (default: hpcenv data mnist's)"),
        ] = None,
        mount_checks: Annotated[
            bool,
            typer.Option(
                "--mount-checks",
                help="bind this checkout's hpcenv/checks at /opt/hpcenv/checks (prototype images)",
            ),
        ] = False,
        volume: Annotated[
            list[str] | None, typer.Option("--volume", "-v", help="extra HOST:CTR[:OPTS] mount")
        ] = None,
        keep: Annotated[bool, typer.Option("--keep", help="leave the container running")] = False,
        sif: Annotated[
            SifSource | None,
            typer.Option("--sif", help="run in the SIF built from 'oci' or 'def' (apptainer exec)"),
        ] = None,
        heavy: Annotated[
            bool,
            typer.Option(
                "--heavy",
                help="under emulation (an image of another architecture): run every check, "
                "full size (default: the light ones: mpi4py world and allreduce up to 1 MiB)",
            ),
        ] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no live pytest output")] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="report.json on stdout (pytest's output: stderr)")
        ] = False,
        select: Annotated[
            str | None,
            typer.Option(
                "--select",
                "-k",
                help="run only the checks matching this pytest -k expression (e.g. 'mpi4py')",
            ),
        ] = None,
        check_references: Annotated[
            bool,
            typer.Option(
                "--check-references",
                help="exit 1 when a figure regresses beyond the site's reference tolerance",
            ),
        ] = False,
        reference_retries: Annotated[
            int,
            typer.Option(
                "--reference-retries",
                min=0,
                max=3,
                help="with --check-references: run the checks behind regressed figures again, "
                "this many times; a figure fails only when it regresses in every run",
            ),
        ] = 1,
    ) -> None:
        """Start IMAGE, run allreduce / MNIST-Horovod / daal4py K-Means / CCL checks in it.

        Writes junit.xml, report.json and allreduce_bandwidth.png; exits 1 when a test fails.
        """
        from hpcenv.extras import require_extra

        require_extra("smoke", "hpcenv smoke")

        from hpcenv.datasets import prepare_mnist
        from hpcenv.paths import cache_dir
        from hpcenv.smoke.references import outcome_lines, run_confirmed
        from hpcenv.smoke.report import SmokeReport, references_table, summary_table
        from hpcenv.smoke.runner import require_image, run_smoke, runs_as

        if image is None:
            from hpcenv.cli.options import project_values
            from hpcenv.recipe import image_recipe

            got = project_values(  # ./hpcenv.yaml under the options given: the project's image
                ctx, {"site": site, "recipe": recipe, "requirements": None, "pip": None}
            )
            site = got.get("site")
            if not site:
                raise ConfigError("name the image: --image TAG, or --site SITE [--recipe NAME]")
            recipe = image_recipe(
                got.get("recipe") or SMOKE_RECIPE, got.get("requirements", []), got.get("pip", [])
            )
            image = naming.image_tag(recipe=recipe, site=site)
            if sif:
                image = naming.sif_name(
                    recipe=recipe,
                    site=site,
                    source="def" if sif == "def" else "oci",
                )
        elif site or recipe:
            raise ConfigError("--image and --site/--recipe are exclusive")
        if results is None:
            slug = image.rsplit("/", 1)[-1].replace(":", "-")
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            results = cache_dir() / "results" / f"smoke-{slug}-{stamp}"
        site_obj = None
        if site:  # an unknown site is named as such, before the image or any data is looked at
            from hpcenv.site import load_site

            site_obj = load_site(site)
        references = dict(site_obj.references) if site_obj else {}
        if check_references and not references:
            raise ConfigError("--check-references needs --site SITE with references: in its file")
        require_image(image, "apptainer" if sif else "podman")  # before fetching or staging data
        emulated = runs_as(image, "apptainer" if sif else "podman") == "emulated"
        if emulated:
            which = "every check (--heavy)" if heavy else "the light checks (--heavy for all)"
            typer.echo(
                f"note: {image} runs under emulation (qemu-user-static): {which}; "
                "its figures are not compared with the site's native references",
                err=True,
            )
            references = {}  # emulation is 5-20x slower: a native reference would only "regress"
        data_dir = data or prepare_mnist().directory
        launch = None
        if site_obj is not None:
            if sif:  # the Apptainer backend runs the checks' own mpirun lines
                typer.echo(
                    "note: --sif runs without hpcenv's placement flags and measured tuning "
                    "(podman smoke applies them)",
                    err=True,
                )
            else:
                from hpcenv.smoke.runner import launch_settings

                launch = launch_settings(site_obj, image, recipe=recipe or SMOKE_RECIPE)
                typer.echo(launch.note, err=True)  # stderr: stdout may carry --json

        def run(where: Path, selection: str | None) -> SmokeReport:
            return run_smoke(
                image,
                where,
                data_dir=data_dir,
                extra_volumes=volume or [],
                mount_checks=mount_checks,
                keep=keep,
                echo=not quiet,
                backend="apptainer" if sif else "podman",
                launch=launch,
                references=references,
                emulated=emulated,
                heavy=heavy,
                pytest_args=["-k", selection] if selection else [],
            )

        retries = reference_retries if check_references else 0
        confirmed = run_confirmed(
            run, results, select, retries, lambda msg: typer.echo(f"note: {msg}", err=True)
        )
        reports = confirmed.reports
        if as_json:
            import json

            doc = reports[0].to_dict() | {"retries": [r.to_dict() for r in reports[1:]]}
            doc["reference_outcome"] = {
                "failed": list(confirmed.failed.values()),
                "inconclusive": list(confirmed.inconclusive.values()),
            }
            typer.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))
        else:
            from hpcenv.cli.console import console as make_console

            console = make_console()
            for report in reports:
                console.print(summary_table(report))
                refs = references_table(report)
                if refs is not None:
                    console.print(refs)
                files = ", ".join(report.files.values())
                console.print(f"results: {report.results_dir} ({files})")
        if not all(r.ok for r in reports):
            raise typer.Exit(1)
        if check_references:
            for line in outcome_lines(confirmed):  # inconclusive is said, and is no failure
                typer.echo(line, err=True)
            if confirmed.failed:
                raise typer.Exit(1)
