"""Render a job script from ``templates/jobs/`` for a site and a :class:`JobSpec`.

The scheduler gives the directives, the launcher the rank launch (from the job's
:class:`~hpcenv.jobs.tuning.Placement`), the container runtime the per-rank prefix, and the
placement, the site and the job the environment. Every value is quoted here (see
:mod:`hpcenv.jobs.shell`); the template only places pre-quoted text.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import jinja2

from hpcenv.errors import ConfigError
from hpcenv.jobs.bindmodel import preflight_script, site_mpi
from hpcenv.jobs.containers import RunContext, get_runtime
from hpcenv.jobs.launchers import get_launcher
from hpcenv.jobs.project import account_for, prelude
from hpcenv.jobs.schedulers import Scheduler, get_scheduler
from hpcenv.jobs.shell import (
    PLACEHOLDERS,
    command_arg,
    env_name,
    join,
    placeholders,
    q,
    qpath,
    word,
)
from hpcenv.jobs.spec import MANIFEST_NAME, JobSpec
from hpcenv.jobs.tuning import Placement, tune
from hpcenv.paths import templates_dir
from hpcenv.safe import Lines, checked_lines, finalize
from hpcenv.site import Site

if TYPE_CHECKING:
    from hpcenv.tuning.model import MeasuredTuning


@dataclass(frozen=True)
class RenderedJob:
    """A rendered script and what submission and monitoring need to know about it."""

    script: str
    scheduler: Scheduler
    tuning: Placement
    workdir: str
    log_names: tuple[str | None, str | None]
    image: str | None
    notes: list[str] = field(default_factory=list)
    prelude: list[tuple[str, str]] = field(default_factory=list)
    # The launch line as argv before quoting: Expand items name variables, command arguments
    # may hold {data}-style placeholders (what the dry-execution harness compares against).
    launch_argv: list[str] = field(default_factory=list)

    @property
    def placement(self) -> Placement:
        return self.tuning

    def prelude_line(self) -> str:
        """``NAME=value ...;`` for a shell that expands the workdir (the submit line)."""
        return "".join(f"{k}={v}; " for k, v in self.prelude)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=finalize,  # every placed value is one line unless hpcenv built it (Lines)
    )


def step_script(name: str) -> str:
    """A staging step script (``stage_in``, ``stage_out``, ``stitch``) as a standalone text."""
    return Lines(_env().get_template(f"jobs/{name}.sh.j2").render().rstrip("\n"))


def default_workdir(site: Site) -> str:
    scratch = next((f.path for f in site.filesystems if f.purpose == "scratch"), "$HOME")
    return f"{scratch}/hpcenv-jobs"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def prepare(
    site: Site,
    job: JobSpec,
    image: str | None = None,
    *,
    submitting: bool = False,
    measured: MeasuredTuning | None = None,
) -> RenderedJob:
    """Render ``job`` for ``site``; ``image`` overrides ``job.image`` (None: run on the host).

    ``submitting``: the script is about to be submitted (or shown as such), so a missing or
    placeholder account is refused with the option to give. ``measured``: the tuning file in
    force for this image and layout (:func:`hpcenv.tuning.apply.lookup`); its environment is
    exported after the site's, and its Open MPI rules file is written into the job's step
    folder by the script itself.
    """
    if site.scheduler.kind == "none":
        raise ConfigError(f"site {site.name!r} has no batch scheduler (scheduler.kind: none)")
    scheduler = get_scheduler(site.scheduler.kind)
    launcher = get_launcher(site.scheduler.launcher)
    image = image if image is not None else job.image
    if not job.command and not (job.stage_in or job.stage_out or job.stitch):
        raise ConfigError("nothing to run: give a command or a staging/stitch step")
    used = set().union(*(placeholders(a) for a in job.command)) if job.command else set()
    if "task" in used and not job.array:
        raise ConfigError("{task} is only defined in a job array (--array N)")
    _check_queue_nodes(site, job)

    if job.launch == "mpi":
        tuning = tune(
            site,
            job.nodes,
            job.ranks_per_node,
            cores_per_rank=job.cores_per_rank,
            ccl_workers=job.ccl_workers,
            recipe=job.recipe,
            force=job.force,
        )
    else:
        tuning = tune(
            site,
            job.nodes,
            1,
            cores_per_rank=job.cores_per_rank or site.node.cores,
            ccl_workers=job.ccl_workers or 0,
            recipe=job.recipe,
            force=job.force,
        )

    workdir = job.workdir or default_workdir(site)
    per_node = bool(job.stage_in and job.stage_in.per_node)
    node_local: str | None = None
    if site.node_local:  # per job: a second job never touches this one's staged data
        node_local = f"{site.node_local.path}/{job.name}-${{HPCENV_JOB_ID}}"
    if (per_node or "node_local" in used) and node_local is None:
        raise ConfigError(f"site {site.name!r} has no node_local storage to stage into")
    data: str | None = None
    if job.stage_in:
        data = job.stage_in.dest or (f"{node_local}/data" if per_node else None)
        if data is None:
            raise ConfigError("stage-in without per_node needs a dest")
    elif "data" in used:
        raise ConfigError("{data} needs a stage-in (--stage-in DIR)")
    output: str | None = None
    if job.stage_out:
        output = job.stage_out.source or f"{workdir}/{job.name}-output-${{HPCENV_JOB_ID}}"
    elif "output" in used:
        output = f"{workdir}/{job.name}-output-${{HPCENV_JOB_ID}}"

    account = account_for(site, job.account, strict=submitting)
    env: dict[str, str] = {}
    expands: set[str] = set()  # values hpcenv wrote with ${...} to expand in the script
    env.update(tuning.env)
    env.update(site.mpi.env)
    env.update(site.tuning)
    notes = [f"tuning: {r}" for r in tuning.reasons]
    rules_text = None
    if measured is not None:
        from hpcenv.tuning.apply import OMPI_RULES_ENV, RULES_NAME, environment

        rules_text = measured.rules_text()
        env.update(environment(measured, f"$HPCENV_STEPS/{RULES_NAME}" if rules_text else None))
        if rules_text and OMPI_RULES_ENV not in job.env:
            expands.add(OMPI_RULES_ENV)
        notes.append(
            f"measured tuning: {measured.date}, image {measured.image_id[:12]}, "
            f"{measured.layout.describe()} (hpcenv tune --show --site {site.name})"
        )
    env.update(job.env)

    launch: str | None = None
    launch_argv: list[str] = []
    launch_what = ""
    preflight: str | None = None
    if job.command:
        prefix: list[str] = []
        launcher_args: list[str] = []
        if image:
            runtime = get_runtime(site.runtime.kind)
            binds = (
                [node_local] if node_local and (per_node or used & {"node_local", "data"}) else []
            )
            if data and data not in binds and not per_node:
                binds.append(data)
            if output and not output.startswith((workdir, node_local or workdir)):
                binds.append(output)
            names = [*env, *(v for v in PLACEHOLDERS.values())]
            ctx = RunContext(workdir, binds, names, inject_site_mpi=job.site_mpi)
            cl = runtime.launch(site, image, ctx)
            inj = site_mpi(site) if job.site_mpi else None
            if inj and cl.prefix:
                script = preflight_script(inj)
                # hpcenv's own script from validated paths, single-quoted as one argument
                preflight = Lines(f"{join(cl.prefix)} sh -c {shlex.quote(script)}")
            env.update(cl.env)
            prefix, launcher_args = cl.prefix, cl.launcher_args
            notes += cl.notes
            if site.runtime.kind == "podman":  # what this host needs (hpcenv.hostconf)
                from hpcenv.hostconf import podman_conf

                for key, path in podman_conf().env.items():
                    conf = word(path, "containers.conf path")
                    if key not in env:  # ours expands on the node; a user's is quoted
                        env[key] = f"${{{key}:-{conf}}}"
                        expands.add(key)
        if job.launch == "mpi":
            head = launcher.command(site, tuning, launcher_args)
            launch_what = f"{tuning.ranks} ranks, {tuning.ranks_per_node} per node"
        elif launcher_args:  # pyxis: the container is an srun option
            head = launcher.one_task(launcher_args)
            launch_what = "one task"
        else:
            head = []
            launch_what = "in the batch shell"
        launch_argv = [*head, *prefix, *job.command]
        launch = " ".join(
            part
            for part in (join(head), join(prefix), " ".join(command_arg(a) for a in job.command))
            if part
        )

    exports = []
    for key, value in env.items():
        env_name(key)
        if key in expands:
            exports.append((key, f'"{value}"'))
        else:
            exports.append((key, q(value)))

    stage_in = stage_out = stitch = None
    if job.stage_in:
        src = job.stage_in.source
        manifest = job.stage_in.manifest or f"{src}/{MANIFEST_NAME}"
        assert data is not None
        args = " ".join(qpath(p) for p in (src, data, manifest))
        run = f'bash "$HPCENV_STEPS/stage-in.sh" {args}'
        if per_node:
            run = f"{join(launcher.per_node(tuning.nodes))} {run}"
        where = "once per node to node-local storage" if per_node else "once"
        stage_in = {
            "what": f"{src} -> {data}, {where}, verified against {manifest}",
            "script": step_script("stage_in"),
            "command": run,
        }
    if job.stitch:
        s = job.stitch
        args = " ".join(
            [
                qpath(s.parts),
                str(s.count),
                shlex.quote(s.prefix),
                shlex.quote(s.suffix),
                qpath(s.output),
                "1" if s.force else "0",
            ]
        )
        stitch = {
            "what": f"{s.count} parts {s.parts}/{s.prefix}<i>{s.suffix} -> {s.output}",
            "script": step_script("stitch"),
            "command": f'bash "$HPCENV_STEPS/stitch.sh" {args}',
        }
    if job.stage_out:
        assert output is not None
        force = "1" if job.stage_out.force else "0"
        args = f"{qpath(output)} {qpath(job.stage_out.dest)} {force}"
        stage_out = {
            "what": f"{output} -> {job.stage_out.dest}, atomic, verified",
            "script": step_script("stage_out"),
            "command": f'bash "$HPCENV_STEPS/stage-out.sh" {args}',
        }

    node_local_setup = cleanup = None
    if node_local and (per_node or used & {"node_local", "data"}):
        many = per_node or (job.launch == "mpi" and tuning.nodes > 1)
        on_nodes = f"{join(launcher.per_node(tuning.nodes))} " if many else ""
        node_local_setup = f'{on_nodes}mkdir -p -- "$HPCENV_NODE_LOCAL"'
        cleanup = f'{on_nodes}rm -rf -- "$HPCENV_NODE_LOCAL"'

    context = {
        "cleanup": cleanup,
        "node_local_setup": node_local_setup,
        "directives": scheduler.directives(
            site, job.model_copy(update={"account": account}), tuning, node_local=per_node
        ),
        "prelude": prelude(site, account),
        "site": site.name,
        "scheduler": scheduler.name,
        "launcher": launcher.name,
        "runtime": site.runtime.kind if image else "host (no container)",
        "mpi": f"{site.mpi.model} MPI {site.mpi.spec} over {site.mpi.pmi}",
        "notes": [_one_line(n) for n in notes],
        "modules": " ".join(shlex.quote(m) for m in site.modules),
        "name": shlex.quote(job.name),
        "job_id_expr": scheduler.job_id_expr,
        "workdir": qpath(workdir),
        "task_id_expr": scheduler.task_id_expr if job.array else None,
        "task_count": job.array.count if job.array else 0,
        "node_local": qpath(node_local) if node_local else None,
        "data": qpath(data) if data else None,
        "output": qpath(output) if output else None,
        "exports": exports,
        # numbers only (generated from validated integers), one record per line
        "tuning_rules": checked_lines(rules_text.splitlines(), "\n") if rules_text else None,
        "stage_in": stage_in,
        "launch": launch,
        "preflight": preflight,
        "launch_what": launch_what,
        "launch_expands_per_rank": bool(launch and "bash -c" in launch),
        "stitch": stitch,
        "stage_out": stage_out,
    }
    script = _env().get_template("jobs/job.sh.j2").render(**context)
    return RenderedJob(
        script=script,
        scheduler=scheduler,
        tuning=tuning,
        workdir=workdir,
        log_names=scheduler.log_names(job),
        image=image,
        notes=notes,
        prelude=prelude(site, account),
        launch_argv=launch_argv,
    )


def _check_queue_nodes(site: Site, job: JobSpec) -> None:
    """A job outside the node range its queue takes (``scheduler.queue_nodes``) is refused here,
    with the queues that would take it, instead of being rejected by the site's qsub/sbatch."""
    queues = site.scheduler.queue_nodes
    queue = job.queue or site.scheduler.queue
    if not queue or queue not in queues:
        return
    fewest, most = queues[queue]
    if fewest <= job.nodes <= most:
        return
    fits = sorted(q for q, (lo, hi) in queues.items() if lo <= job.nodes <= hi)
    raise ConfigError(
        f"queue {queue!r} on site {site.name!r} takes {fewest}-{most} node(s), {job.nodes} "
        f"asked: give --queue ({', '.join(fits) or 'no documented queue takes that many'}) "
        "or another node count (scheduler.queue_nodes)"
    )


def render_job(
    site: Site, job: JobSpec, image: str | None = None, measured: MeasuredTuning | None = None
) -> str:
    """The job script text for ``job`` on ``site``; ``image`` overrides ``job.image``."""
    return prepare(site, job, image, measured=measured).script
