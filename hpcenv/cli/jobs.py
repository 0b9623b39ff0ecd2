"""``hpcenv submit|status|cancel|logs|tune|manifest``: render, submit and follow batch jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hpcenv.cli.options import JsonOpt, SiteOpt

if TYPE_CHECKING:
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import Transport
    from hpcenv.site import Site

IntOpt = Annotated[int | None, typer.Option()]


def _transport(
    site: Site,
    kind: str,
    host: str | None,
    port: int | None,
    user: str | None,
    key: str | None,
    known_hosts: str | None,
) -> Transport:
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.schedulers import client_env
    from hpcenv.jobs.transport import LocalTransport, SshTransport, ssh_spec

    if kind == "local":
        return LocalTransport(client_env(site))
    if kind == "ssh":
        return SshTransport(
            ssh_spec(site, host, port, user, key, known_hosts, env=client_env(site))
        )
    raise ConfigError(f"unknown transport {kind!r}; use local or ssh")


OnOpt = Annotated[
    str | None,
    typer.Option("--on", help="local or the SSH host, when jobs in several places share the id"),
]


def _record(job_id: str, site: str | None, on: str | None = None) -> tuple[Submission, Transport]:
    """A submitted job's record, or a bare one for --site (local transport)."""
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.schedulers import client_env
    from hpcenv.jobs.submit import Submission, load_record, transport_for
    from hpcenv.jobs.transport import LocalTransport, TransportSpec

    sub = load_record(job_id, on)
    if sub is not None:
        return sub, transport_for(sub)
    if site is None:
        raise ConfigError(f"no record of job {job_id} here; pass --site to ask its scheduler")
    from hpcenv.site import load_site

    s = load_site(site)
    spec = TransportSpec(env=client_env(s))
    bare = Submission(job_id, "?", s.name, s.scheduler.kind, "", spec, (None, None), "")
    return bare, LocalTransport(spec.env)


def _check_local_image(site: Site, image: str, inject: bool, force: bool) -> None:
    """Fail early when the local podman runtime lacks the image, when a SIF named by its path
    (apptainer/singularity, on this machine) is not there, or when the image's MPI cannot take
    the site's injected MPI (bind model; ``force`` leaves that to the job's preflight)."""
    from hpcenv.errors import ConfigError, EnvironmentProblem
    from hpcenv.naming import image_kind

    if image_kind(site.runtime.kind) == "sif":
        if image.startswith("/") and "$" not in image and not Path(image).is_file():
            raise EnvironmentProblem(
                f"SIF {image} not found; build it first (hpcenv build --site ... --format sif) "
                "or pass --image / --no-container"
            )
        return
    if site.runtime.kind != "podman":
        return
    from hpcenv.engines import get_engine
    from hpcenv.jobs.bindmodel import image_mismatch

    engine = get_engine("podman")
    if not engine.image_exists(image):
        raise EnvironmentProblem(
            f"image {image} not found in local podman storage; build it first "
            f"(hpcenv build --site {site.name} --recipe ...) or pass --image / --no-container"
        )
    if inject and not force and site.mpi.model == "bind":
        raw = engine.labels(image).get("io.hpcenv.lock")
        why = image_mismatch(site, image, json.loads(raw)) if raw else None
        if why:
            raise ConfigError(why)


WAIT_MAX_POLL = 30.0  # submit --wait backs off to this (seconds): kind to the scheduler


def _refuse_empty(**options: str | None) -> None:
    """An option given as '' is a mistake, not "use the default" (``--image ''`` ran a sweep)."""
    from hpcenv.errors import ConfigError

    for name, value in options.items():
        if value is not None and not value.strip():
            raise ConfigError(f"--{name.replace('_', '-')} is empty: give a value or leave the option out")


def register(app: typer.Typer) -> None:
    @app.command("submit")
    def submit_cmd(
        site: SiteOpt,
        command: Annotated[
            list[str] | None, typer.Argument(help="command to run (after --)")
        ] = None,
        recipe: Annotated[
            str | None, typer.Option("--recipe", "-r", help="recipe (default image)")
        ] = None,
        nodes: Annotated[int, typer.Option("--nodes", "-N")] = 1,
        ranks_per_node: Annotated[int | None, typer.Option("--ranks-per-node", "-n")] = None,
        cores_per_rank: Annotated[int | None, typer.Option("--cores-per-rank")] = None,
        ccl_workers: Annotated[int | None, typer.Option("--ccl-workers")] = None,
        image: Annotated[str | None, typer.Option("--image", help="image tag or SIF path")] = None,
        no_container: Annotated[
            bool, typer.Option("--no-container", help="run on the host")
        ] = False,
        name: Annotated[str | None, typer.Option("--name", help="job name")] = None,
        workdir: Annotated[
            str | None, typer.Option("--workdir", help="default <scratch>/hpcenv-jobs")
        ] = None,
        walltime: Annotated[str | None, typer.Option("--walltime")] = None,
        account: Annotated[
            str | None,
            typer.Option("--account", "-A", help="project/account to charge (sites need one)"),
        ] = None,
        queue: Annotated[
            str | None, typer.Option("--partition", "--queue", "-p", "-q", help="partition/queue")
        ] = None,
        qos: Annotated[str | None, typer.Option("--qos", help="Slurm QOS")] = None,
        constraint: Annotated[
            str | None, typer.Option("--constraint", "-C", help="node features (Slurm -C)")
        ] = None,
        option: Annotated[
            list[str] | None,
            typer.Option(
                "--option",
                help="any other scheduler option, one per --option (e.g. '-l filesystems=home')",
            ),
        ] = None,
        single: Annotated[
            bool, typer.Option("--single", help="run once in the batch shell, not per rank")
        ] = False,
        stage_in: Annotated[
            str | None,
            typer.Option("--stage-in", help="dataset dir to stage to node-local storage"),
        ] = None,
        stage_out: Annotated[
            str | None, typer.Option("--stage-out", help="copy {output} here atomically")
        ] = None,
        array: Annotated[
            int | None, typer.Option("--array", help="job array of N tasks ({task})")
        ] = None,
        after: Annotated[
            list[str] | None, typer.Option("--after", help="start after this job succeeds")
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="allow over-subscription / overwrite")
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="print the script, submit nothing")
        ] = False,
        no_site_mpi: Annotated[
            bool,
            typer.Option("--no-site-mpi", help="bind model: keep the image's MPI (control run)"),
        ] = False,
        as_json: JsonOpt = False,
        transport: Annotated[str, typer.Option("--transport", help="local or ssh")] = "local",
        ssh_host: Annotated[str | None, typer.Option("--ssh-host")] = None,
        ssh_port: Annotated[int | None, typer.Option("--ssh-port", min=1, max=65535)] = None,
        ssh_user: Annotated[str | None, typer.Option("--ssh-user")] = None,
        ssh_key: Annotated[str | None, typer.Option("--ssh-key")] = None,
        known_hosts: Annotated[str | None, typer.Option("--known-hosts")] = None,
        wait: Annotated[
            bool,
            typer.Option("--wait", help="wait; exit 2 with the scheduler's message on failure"),
        ] = False,
        timeout: Annotated[float, typer.Option("--timeout", help="seconds for --wait")] = 600,
    ) -> None:
        """Render a job script for SITE and submit it (``-- COMMAND...``)."""
        from pydantic import ValidationError

        from hpcenv.errors import ConfigError
        from hpcenv.jobs.containers import default_image
        from hpcenv.jobs.render import prepare
        from hpcenv.jobs.schedulers import option_pair
        from hpcenv.jobs.spec import ArraySpec, JobSpec, StageIn, StageOut
        from hpcenv.jobs.submit import submit
        from hpcenv.jobs.submit import wait as wait_for
        from hpcenv.safe import validation_message
        from hpcenv.site import load_site

        s = load_site(site)
        for opt in option or []:
            option_pair(opt)  # one clear line per bad --option, before the job model
        _refuse_empty(image=image, stage_in=stage_in, stage_out=stage_out)
        if image and no_container:
            raise ConfigError("--image and --no-container exclude each other")
        if not image and not no_container:
            if not recipe:
                raise ConfigError("give --recipe (default image), --image, or --no-container")
            image = default_image(s, recipe)
        try:
            job = JobSpec(
                name=name or recipe or "hpcenv",
                command=list(command or []),
                launch="single" if single else "mpi",
                nodes=nodes,
                ranks_per_node=ranks_per_node,
                cores_per_rank=cores_per_rank,
                ccl_workers=ccl_workers,
                recipe=recipe,
                image=None if no_container else image,
                workdir=workdir,
                walltime=walltime,
                account=account,
                queue=queue,
                qos=qos,
                constraint=constraint,
                scheduler_options=list(option or []),
                stage_in=StageIn(source=stage_in) if stage_in is not None else None,
                stage_out=StageOut(dest=stage_out, force=force) if stage_out is not None else None,
                array=ArraySpec(count=array) if array is not None else None,
                force=force,
                site_mpi=not no_site_mpi,
            )
        except ValidationError as err:
            raise ConfigError(validation_message(err, "invalid job")) from None
        from hpcenv.tuning.apply import for_job

        measured, warning = for_job(s, job, job.image)
        if warning:
            typer.echo(f"warning: {warning}", err=True)
        rendered = prepare(s, job, submitting=True, measured=measured)
        if dry_run:
            if as_json:
                out = {"site": s.name, "scheduler": rendered.scheduler.name, "image": rendered.image,
                       "workdir": rendered.workdir, "placement": rendered.placement.to_dict(),
                       "plan": rendered.plan.to_dict(), "script": rendered.script}  # fmt: skip
                typer.echo(json.dumps(out, indent=2))
            else:
                typer.echo(rendered.script, nl=False)
            return
        t = _transport(s, transport, ssh_host, ssh_port, ssh_user, ssh_key, known_hosts)
        try:
            if job.image and transport == "local":
                _check_local_image(s, job.image, job.site_mpi, force)
            if stage_in and transport == "local" and "$" not in stage_in:
                _ensure_manifest(Path(stage_in))
            sub = submit(s, job, t, after=list(after or []), rendered=rendered)
            result: dict[str, Any] = sub.to_dict()
            if wait:
                import datetime

                def show(change: Any) -> None:  # state changes on stderr; the result on stdout
                    now = datetime.datetime.now().strftime("%H:%M:%S")
                    typer.echo(f"{now} {change.message()}", err=True)

                st = wait_for(sub, t, timeout=timeout, poll=1.0, max_poll=WAIT_MAX_POLL,
                              on_change=show)  # fmt: skip
                result["status"] = st.to_dict()
        finally:
            t.close()
        if as_json:
            typer.echo(json.dumps(result, indent=2))
        else:
            typer.echo(f"submitted {sub.job_id} ({sub.name}) to {sub.scheduler} via "
                       f"{t.describe()}; workdir {sub.workdir}")  # fmt: skip
            if wait:
                typer.echo(st.message())

    @app.command("status")
    def status_cmd(
        job_id: str,
        site: Annotated[
            str | None, typer.Option("--site", "-s", help="for jobs not submitted here")
        ] = None,
        as_json: JsonOpt = False,
        on: OnOpt = None,
    ) -> None:
        """Show a job's state in the scheduler's own words."""
        from hpcenv.jobs.submit import status

        sub, t = _record(job_id, site, on)
        try:
            st = status(sub, t)
        finally:
            t.close()
        if as_json:
            typer.echo(json.dumps(st.to_dict(), indent=2))
            return
        typer.echo(st.message())
        for task in st.tasks:
            typer.echo(f"  {task.message()}")

    @app.command("cancel")
    def cancel_cmd(
        job_id: str,
        site: Annotated[
            str | None, typer.Option("--site", "-s", help="for jobs not submitted here")
        ] = None,
        on: OnOpt = None,
    ) -> None:
        """Cancel a job."""
        from hpcenv.jobs.submit import cancel

        sub, t = _record(job_id, site, on)
        try:
            cancel(sub, t)
        finally:
            t.close()
        typer.echo(f"cancelled {job_id}")

    @app.command("logs")
    def logs_cmd(job_id: str, on: OnOpt = None) -> None:
        """Print a job's stdout and stderr files."""
        from hpcenv.jobs.submit import logs

        sub, t = _record(job_id, None, on)
        try:
            typer.echo(logs(sub, t), nl=False)
        finally:
            t.close()

    @app.command("tune")
    def tune_cmd(
        site: SiteOpt,
        nodes: Annotated[int, typer.Option("--nodes", "-N")] = 1,
        ranks_per_node: Annotated[int | None, typer.Option("--ranks-per-node", "-n")] = None,
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
            float, typer.Option("--budget", help="--measure: seconds before no new run starts")
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
        from hpcenv.errors import ConfigError
        from hpcenv.jobs.containers import default_image
        from hpcenv.jobs.launchers import LAUNCHERS
        from hpcenv.jobs.placement import place
        from hpcenv.jobs.shell import join
        from hpcenv.site import load_site

        if sum((measure, show, plan)) > 1:
            raise ConfigError("--measure, --show and --plan exclude each other")
        if budget <= 0:
            raise ConfigError("--budget must be > 0 seconds")
        _refuse_empty(image=image)
        s = load_site(site)
        t = place(s, nodes, ranks_per_node, cores_per_rank=cores_per_rank,
                 ccl_workers=ccl_workers, recipe=recipe, force=force)  # fmt: skip
        img = image or default_image(s, recipe or "horovod-cpu")
        if plan:
            _tune_plan(s, t, recipe or "horovod-cpu", as_json)
            return
        if if_stale and not measure:
            raise ConfigError("--if-stale goes with --measure")
        if measure:
            from hpcenv.tuning.session import measure_site

            if if_stale:
                from hpcenv.tuning.apply import lookup

                found = lookup(s, t, img)
                if found is not None and found.tuning is not None:
                    typer.echo(f"measured tuning in force, not re-measured: {found.path} "
                               f"({found.why})")  # fmt: skip
                    return

            done = measure_site(s, t, img, budget_s=budget, quick=quick, echo=typer.echo)
            if as_json:
                typer.echo(json.dumps(done.tuning.model_dump(), indent=2))
                return
            typer.echo(f"wrote {done.path} ({done.tuning.seconds:.0f} s)")
            for r in done.tuning.reasons:
                typer.echo(f"  - {r}")
            return
        found = None
        if show:
            from hpcenv.tuning.apply import lookup

            found = lookup(s, t, img)
        if as_json:
            doc = t.to_dict()
            if show:
                doc["measured"] = _found_json(found)
            typer.echo(json.dumps(doc, indent=2))
            return
        n = s.node
        typer.echo(f"{s.name}: {n.sockets} socket(s) x {n.cores_per_socket} cores, {n.gpus} GPU(s); "
                   f"{t.nodes} node(s) x {t.ranks_per_node} rank(s) = {t.ranks} ranks")  # fmt: skip
        typer.echo("why:")
        for r in t.reasons:
            typer.echo(f"  - {r}")
        typer.echo("environment:")
        for k, v in t.env.items():
            typer.echo(f"  {k}={v}")
        typer.echo("launchers:")
        for lname, launcher in LAUNCHERS.items():
            typer.echo(f"  {lname:<7} {join(launcher().flags(s, t))}")
        typer.echo("cores per local rank (compute | CCL workers):")
        for i, (c, w) in enumerate(zip(t.compute_cores, t.worker_cores, strict=True)):
            typer.echo(f"  rank {i}: {_span(c)} | {_span(w) or '-'}")
        if show:
            _show_measured(found, img)

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


def _span(cores: tuple[int, ...]) -> str:
    from hpcenv.jobs.placement import core_ranges

    return core_ranges(cores) if cores else ""


def _ensure_manifest(directory: Path) -> None:
    """For a local dataset without a manifest, write one now (trusting the current files)."""
    from hpcenv.jobs.spec import MANIFEST_NAME
    from hpcenv.jobs.staging import write_manifest

    if directory.is_dir() and not (directory / MANIFEST_NAME).is_file():
        write_manifest(directory)
        typer.echo(f"wrote {directory / MANIFEST_NAME} (no manifest was there)", err=True)


def _found_json(found: Any) -> dict[str, Any]:
    if found is None:
        return {"in_force": False, "why": "nothing measured for this site and layout"}
    doc: dict[str, Any] = {"in_force": found.tuning is not None, "path": str(found.path),
                           "why": found.why, "warning": found.warning}  # fmt: skip
    if found.tuning is not None:
        from hpcenv.tuning.apply import RULES_NAME, environment

        doc["tuning"] = found.tuning.model_dump()
        doc["environment"] = environment(found.tuning, f"<job>/{RULES_NAME}")
        doc["rules_file"] = found.tuning.rules_text()
    return doc


def _show_measured(found: Any, image: str) -> None:
    from hpcenv.tuning.apply import RULES_NAME, environment

    typer.echo(f"measured tuning for {image}:")
    if found is None:
        typer.echo("  none in force: nothing measured for this site and layout "
                   "(hpcenv tune --measure)")  # fmt: skip
        return
    if found.tuning is None:
        typer.echo(f"  none in force: {found.warning or found.why}")
        return
    t = found.tuning
    typer.echo(f"  in force: {found.path}")
    typer.echo(f"  {found.why}; layout {t.layout.describe()}; sweep took {t.seconds:.0f} s")
    for r in t.reasons:
        typer.echo(f"  - {r}")
    for k, v in environment(t, f"<job step dir>/{RULES_NAME}").items():
        typer.echo(f"  {k}={v}")
    text = t.rules_text()
    if text:
        typer.echo("  coll_tuned rules file (allreduce):")
        for line in text.splitlines():
            typer.echo(f"    {line}")
    for key, cands in t.rendered_only.items():
        typer.echo(f"  rendered only, {key}: "
                   + "; ".join(" ".join(f"{k}={v}" for k, v in c.items()) for c in cands))  # fmt: skip


def _tune_plan(site: Any, placement: Any, recipe: str, as_json: bool) -> None:
    from hpcenv.recipe import load_recipe
    from hpcenv.resolver import resolve
    from hpcenv.tuning.apply import layout_of
    from hpcenv.tuning.measure import plan

    lock = resolve(site, load_recipe(recipe)).to_dict()
    p = plan(lock, site, layout_of(placement), gpu_visible=False)
    if as_json:
        typer.echo(json.dumps({"mpi": p.mpi, "openmpi": p.openmpi, "horovod": p.horovod,
                               "rendered_only": p.rendered_only, "reasons": p.reasons}, indent=2))  # fmt: skip
        return
    for line in p.lines():
        typer.echo(line)
    for key, cands in p.rendered_only.items():
        typer.echo(f"  {key}: " + "; ".join(" ".join(f"{k}={v}" for k, v in c.items())
                                            for c in cands))  # fmt: skip
