"""``hpcenv tune``: placement (ranks, cores, GPUs, threads, masks) and each launcher's flags
for it, and the collective tuning measured in the site's image (``--measure``/``--show``/``--plan``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hpcenv.cli.options import JsonOpt, SiteOpt, positive_seconds

if TYPE_CHECKING:
    from hpcenv.sweep.measure import Plan
    from hpcenv.sweep.service import TuneResult
    from hpcenv.sweep.session import Measured
    from hpcenv.tuning.store import InForce


def register(app: typer.Typer) -> None:
    @app.command("tune")
    def tune_cmd(
        site: SiteOpt,
        nodes: Annotated[int, typer.Option("--nodes", "-N")] = 1,
        # no -n: submit's -n is the total rank count (Slurm's), this is per node
        ranks_per_node: Annotated[int | None, typer.Option("--ranks-per-node")] = None,
        cores_per_rank: Annotated[int | None, typer.Option("--cores-per-rank")] = None,
        ccl_workers: Annotated[int | None, typer.Option("--ccl-workers")] = None,
        recipe: Annotated[str | None, typer.Option("--recipe", "-r")] = None,
        force: Annotated[bool, typer.Option("--force", help="allow over-subscription")] = False,
        measure: Annotated[
            bool,
            typer.Option("--measure", help="sweep collective choices in the site's image; save"),
        ] = False,
        show: Annotated[
            bool, typer.Option("--show", help="also show the measured tuning in force and why")
        ] = False,
        plan: Annotated[
            bool, typer.Option("--plan", help="what --measure would sweep (no image needed)")
        ] = False,
        image: Annotated[
            str | None, typer.Option("--image", help="image to measure/check (default: recipe's)")
        ] = None,
        budget: Annotated[
            float,
            typer.Option(
                "--budget",
                help="--measure: seconds before no new run starts",
                callback=positive_seconds,
            ),
        ] = 300,
        quick: Annotated[
            bool, typer.Option("--quick", help="--measure: one round instead of three")
        ] = False,
        if_stale: Annotated[
            bool,
            typer.Option(
                "--if-stale", help="--measure only when no file is in force for this image digest"
            ),
        ] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Placement (ranks, cores, GPUs, threads, masks) and each launcher's flags for it; with
        --measure, the collective tuning measured in the site's image (used by submit, job.sh,
        smoke and bench by default); --show says what is in force and why."""
        from hpcenv.sweep.service import TuneRequest, tune_request

        req = TuneRequest(
            site=site,
            nodes=nodes,
            ranks_per_node=ranks_per_node,
            cores_per_rank=cores_per_rank,
            ccl_workers=ccl_workers,
            recipe=recipe,
            force=force,
            measure=measure,
            show=show,
            plan=plan,
            image=image,
            budget=budget,
            quick=quick,
            if_stale=if_stale,
        )
        result = tune_request(req, echo=typer.echo)
        if result.sweep is not None:
            _print_sweep(result.sweep, as_json)
        elif result.kept is not None:
            typer.echo(
                f"measured tuning in force, not re-measured: {result.kept.path} ({result.kept.why})"
            )
        elif result.measured is not None:
            _print_measured(result.measured, as_json)
        else:
            _print_placement(result, show, as_json)


def _out(line: str) -> None:
    """A line with text from a tuning file in it: control characters escaped (a file anyone
    could have written must not send escape sequences to the terminal)."""
    from hpcenv.printable import printable

    typer.echo(printable(line))


def _print_measured(done: Measured, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(done.tuning.model_dump(), indent=2))
        return
    typer.echo(f"wrote {done.path} ({done.tuning.seconds:.0f} s)")
    for r in done.tuning.reasons:
        _out(f"  - {r}")


def _print_placement(result: TuneResult, show: bool, as_json: bool) -> None:
    from hpcenv.jobs.launchenv import launch_env, launch_layers, overridden_placement
    from hpcenv.jobs.launchers import LAUNCHERS
    from hpcenv.jobs.shell import join

    s, t, found = result.site, result.placement, result.found
    if as_json:
        doc = t.to_dict()
        if show:
            doc["measured"] = _found_json(found)
        typer.echo(json.dumps(doc, indent=2))
        return
    n = s.node
    typer.echo(
        f"{s.name}: {n.sockets} socket(s) x {n.cores_per_socket} cores, {n.gpus} GPU(s); "
        f"{t.nodes} node(s) x {t.ranks_per_node} rank(s) = {t.ranks} ranks"
    )
    layers = launch_layers(s, t)
    replaced = overridden_placement(layers)  # the site file's tuning may replace a value
    typer.echo("why:")
    for r in [*t.reasons, *(note.removeprefix("tuning: ") for note in replaced)]:
        typer.echo(f"  - {r}")
    typer.echo("environment:")
    ranks_run = launch_env(s, t)
    for k in t.env:
        typer.echo(f"  {k}={ranks_run[k]}")
    typer.echo("launchers:")
    for lname, launcher in LAUNCHERS.items():
        typer.echo(f"  {lname:<7} {join(launcher().flags(s, t))}")
    typer.echo("cores per local rank (compute | CCL workers):")
    for i, (c, w) in enumerate(zip(t.compute_cores, t.worker_cores, strict=True)):
        typer.echo(f"  rank {i}: {_span(c)} | {_span(w) or '-'}")
    if show:
        _show_measured(found, result.image)


def _span(cores: tuple[int, ...]) -> str:
    from hpcenv.jobs.placement import core_ranges

    return core_ranges(cores) if cores else ""


def _found_json(found: InForce | None) -> dict[str, Any]:
    if found is None:
        return {"in_force": False, "why": "nothing measured for this site and layout"}
    doc: dict[str, Any] = {
        "in_force": found.tuning is not None,
        "path": str(found.path),
        "why": found.why,
        "warning": found.warning,
    }
    if found.tuning is not None:
        from hpcenv.tuning.apply import RULES_NAME, environment

        doc["tuning"] = found.tuning.model_dump()
        doc["environment"] = environment(found.tuning, f"<job>/{RULES_NAME}")
        doc["rules_file"] = found.tuning.rules_text()
    return doc


def _show_measured(found: InForce | None, image: str) -> None:
    from hpcenv.tuning.apply import RULES_NAME, environment

    _out(f"measured tuning for {image}:")
    if found is None:
        _out("  none in force: nothing measured for this site and layout (hpcenv tune --measure)")
        return
    if found.tuning is None:
        _out(f"  none in force: {found.warning or found.why}")
        return
    t = found.tuning
    _out(f"  in force: {found.path}")
    _out(f"  {found.why}; layout {t.layout.describe()}; sweep took {t.seconds:.0f} s")
    for r in t.reasons:
        _out(f"  - {r}")
    for k, v in environment(t, f"<job step dir>/{RULES_NAME}").items():
        _out(f"  {k}={v}")
    text = t.rules_text()
    if text:
        _out("  coll_tuned rules file (allreduce):")
        for line in text.splitlines():
            _out(f"    {line}")
    for key, cands in t.rendered_only.items():
        _out(
            f"  rendered only, {key}: "
            + "; ".join(" ".join(f"{k}={v}" for k, v in c.items()) for c in cands)
        )


def _print_sweep(p: Plan, as_json: bool) -> None:
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "mpi": p.mpi,
                    "openmpi": p.openmpi,
                    "horovod": p.horovod,
                    "rendered_only": p.rendered_only,
                    "reasons": p.reasons,
                },
                indent=2,
            )
        )
        return
    for line in p.lines():
        typer.echo(line)
    for key, cands in p.rendered_only.items():
        typer.echo(
            f"  {key}: " + "; ".join(" ".join(f"{k}={v}" for k, v in c.items()) for c in cands)
        )
