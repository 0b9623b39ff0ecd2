"""Plan a job (:func:`plan_job`) and print the plan with ``templates/jobs/job.sh.j2``.

The scheduler gives the directives, the launcher the rank launch (from the job's
:class:`~hpcenv.jobs.placement.Placement`), the container runtime the per-rank prefix, and the
placement, the site, the measured collective tuning and the job the environment layers. What the
job script does is a :class:`~hpcenv.jobs.plan.JobPlan`; every value in it is validated and
quoted here or in :mod:`hpcenv.jobs.shell`, and the template only prints it. Shell programs are
shipped step files (``templates/jobs/*.sh.j2``) that take arguments, never strings built here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import jinja2
from jinja2 import meta

from hpcenv.envpolicy import check as check_env
from hpcenv.errors import ConfigError
from hpcenv.jobs.bindmodel import SiteMpi, preflight_args, site_mpi, standard_abi
from hpcenv.jobs.launchenv import BY_NAME, launch_layers, overridden_placement
from hpcenv.jobs.launchers import Launcher, get_launcher, launch_argv
from hpcenv.jobs.placement import Placement, job_placement
from hpcenv.jobs.plan import (
    LIBRARY,
    STEPS,
    EnvSource,
    EnvVar,
    JobPaths,
    JobPlan,
    Launch,
    Step,
    StepFile,
    step_path,
)
from hpcenv.jobs.project import PREVIEW_ACCOUNT, account_for, prelude, preview_note
from hpcenv.jobs.queues import route
from hpcenv.jobs.rendezvous import CACHES_VAR, RANK_NAMES, RANK_STEP
from hpcenv.jobs.rendezvous import environment as rendezvous_env
from hpcenv.jobs.runtimes.registry import runtime_of
from hpcenv.jobs.schedulers import Scheduler, get_scheduler
from hpcenv.jobs.shell import (
    PLACEHOLDERS,
    env_name,
    expanding,
    join,
    placeholders,
    qpath,
    word,
)
from hpcenv.jobs.spec import MANIFEST_NAME, JobSpec
from hpcenv.paths import templates_dir
from hpcenv.safe import Lines, checked_lines, finalize
from hpcenv.site import Site

if TYPE_CHECKING:
    from hpcenv.jobs.runtimes.base import ContainerLaunch
    from hpcenv.recipe import Recipe
    from hpcenv.tuning.model import MeasuredTuning


@dataclass(frozen=True)
class RenderedJob:
    """A job's plan, its script, and what submission and monitoring need to know about it."""

    plan: JobPlan
    script: str
    scheduler: Scheduler
    log_names: tuple[str | None, str | None]

    @property
    def placement(self) -> Placement:
        return self.plan.placement

    @property
    def workdir(self) -> str:
        return self.plan.paths.workdir

    @property
    def image(self) -> str | None:
        return self.plan.paths.image

    @property
    def notes(self) -> list[str]:
        return self.plan.notes

    @property
    def prelude(self) -> list[tuple[str, str]]:
        return self.plan.prelude

    @property
    def launch_argv(self) -> list[str]:
        launch = self.plan.launch
        return launch.argv if launch else []

    def prelude_line(self) -> str:
        """``NAME=value ...;`` for a shell that expands the workdir (the submit line)."""
        return "".join(f"{k}={v}; " for k, v in self.prelude)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=finalize,  # every placed value is one line unless hpcenv built it (Lines)
    )
    env.filters["quote"] = shlex.quote
    env.filters["qpath"] = qpath
    env.filters["argv"] = join
    return env


_COMMENT_LINE = re.compile(r"[ \t]*#(?!!| shellcheck )")


def code_lines(text: str) -> str:
    """``text`` without its comment lines (``#!`` and shellcheck directives stay). A step file
    as the job writes it is its code: the person reading the job sees what each one is (its
    ``what``) and where it runs (the steps); why each part is so stays in the shipped file
    (``templates/jobs``). A line inside a quoted string that spans lines is data and stays;
    a heredoc (whose lines are data too) is refused."""
    if "<<" in text:
        raise ValueError("code_lines: a heredoc's lines may start with '#'; not stripping them")
    out, quote = [], ""
    for line in text.splitlines(keepends=True):
        if quote or not _COMMENT_LINE.match(line):
            out.append(line)
            quote = _open_quote(line, quote)
    return "".join(out)


def _open_quote(line: str, quote: str) -> str:
    """The quote still open at the end of shell ``line`` (``'``, ``"``, ``$'`` or none), given
    the one open at its start; a comment ends the line's code."""
    i = 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            if c == "'":
                quote = ""
        elif quote:  # " or $': a backslash escapes the next character
            if c == "\\":
                i += 1
            elif c == quote[-1]:
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = "$'" if c == "'" and line[i - 1 : i] == "$" else c
        elif c == "#" and line[i - 1 : i] in ("", " ", "\t", ";", "|", "&", "("):
            break
        i += 1
    return quote


# Step files: the file name in the job's steps folder -> its template (templates/jobs/).
STEP_TEMPLATES = {
    "stage-in.sh": "stage_in",
    "bind-preflight.sh": "bind_preflight",
    "podman-rank.sh": "podman_rank",  # hpcenv.jobs.runtimes.podman.RANK_STEP
    "rank-env.sh": "rank_env",  # rendezvous.RANK_STEP
    "stitch.sh": "stitch",
    "stage-out.sh": "stage_out",
    "node-local.sh": "node_local",
    "lib.sh": "lib",  # plan.LIBRARY: the step library, sourced by the steps that use it
}


def step_script(name: str, *, library: bool = False, **job: str) -> str:
    """A step script (``stage_in``, ``stage_out``, ``stitch``, ``bind_preflight``,
    ``podman_rank``) as a standalone text; ``library``: as the job writes it, sourcing the step
    library (``lib.sh``, written once per job beside it) instead of carrying its own copy;
    ``job``: the job's values of arguments the template has branches for (the preflight's
    soname and model), so that it holds only the branches the job takes."""
    template = _env().get_template(f"jobs/{name}.sh.j2")
    return Lines(template.render(library=library, **job).rstrip("\n"))


@cache
def sources_library(name: str) -> bool:
    """The step template ``name`` uses the step library (includes ``jobs/_library.j2``)."""
    env = _env()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, f"jobs/{name}.sh.j2")
    return "jobs/_library.j2" in meta.find_referenced_templates(env.parse(source))


def step_file(name: str, what: str, **job: str) -> StepFile:
    """The step file ``name`` as the job writes it: its code (:func:`code_lines`), the branches
    the job takes (``job``: :func:`step_script`), and the steps that use the step library source
    the job's one copy of it (:data:`~hpcenv.jobs.plan.LIBRARY`) instead of carrying their own."""
    template = STEP_TEMPLATES[name]
    uses = sources_library(template)
    text = Lines(code_lines(step_script(template, library=uses, **job)))
    return StepFile(name=name, text=text, what=what, sources=(LIBRARY,) if uses else ())


def default_workdir(site: Site) -> str:
    """``<scratch>/hpcenv-jobs`` where the site's scratch path names a variable its system
    sets per user (``/lustre/scratch/$USER``, ``$PSCRATCH``, ``$MEMBERWORK/$PROJECT``);
    ``$HOME/hpcenv-jobs`` where it is one fixed folder shared by every user
    (``/var/tmp/hpcenv-scratch`` on the local sites). Other users share that folder: the first
    one's ``hpcenv-jobs`` (and its ``.hpcenv``) would be theirs, and every other user's job
    refused or exposed; a home folder is made by the system, per user, and nobody else can
    take its name first (issue 20, "Project-shared defaults get a per-user part")."""
    scratch = next((f.path for f in site.filesystems if f.purpose == "scratch"), None)
    if scratch is None or "$" not in scratch:
        return "$HOME/hpcenv-jobs"
    return f"{scratch}/hpcenv-jobs"


def user_folder(path: str) -> str:
    """The per-user folder under a site's node-local ``path``: ``path`` itself when it names
    ``$USER`` (``/tmp/$USER``, ``/mnt/bb/$USER``), else ``path/$USER``. Other users share the
    node, so a job's folder lives in a folder of the user's own (made 0700 and checked by
    ``templates/jobs/node_local.sh.j2``), never straight in a shared one."""
    if re.search(r"\$(USER\b|\{USER\})", path):
        return path
    return f"{path.rstrip('/') or ''}/$USER"


# World-writable sticky folders on every Linux node (FHS 3.0: /tmp, /var/tmp; /dev/shm is the
# same by convention): any user may make a name in them, none may remove another's.
SHARED_STICKY = ("/tmp", "/var/tmp", "/dev/shm")
NONCE = "HPCENV_NONCE"  # 64 random bits job.sh draws at its start (templates/jobs/job.sh.j2)


def node_local_folder(path: str, job_name: str) -> str:
    """This job's folder in a site's node-local ``path``.

    In a shared sticky folder (``/tmp/$USER``, ``/dev/shm/$USER``, ``/tmp/hpcenv-local``) any
    fixed name can be taken first by another user, who would then block every job of ours
    that needs it; there the folder is made straight in the sticky folder under a name nobody
    can guess (``$HPCENV_NONCE``), passed to the make step in the environment, not on a
    command line ``ps`` shows. Elsewhere (``/mnt/bb/$USER``, made for the user by the system)
    it is ``<per-user folder>/<job>-<id>``, and so deeper in a sticky folder too
    (``/tmp/nvme/$USER``: a folder the site made there, such as an NVMe mount, is where the data
    must go, not ``/tmp``)."""
    top = next((s for s in SHARED_STICKY if path == s or path.startswith(s + "/")), None)
    if top is not None and "/" not in path[len(top) :].strip("/"):  # top, or one name in it
        return f"{top}/hpcenv-$USER-{job_name}-${{HPCENV_JOB_ID}}-${{{NONCE}}}"
    return f"{user_folder(path)}/{job_name}-${{HPCENV_JOB_ID}}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _used_placeholders(job: JobSpec) -> set[str]:
    if not job.command and not (job.stage_in or job.stage_out or job.stitch):
        raise ConfigError("nothing to run: give a command or a staging/stitch step")
    used = set().union(*(placeholders(a) for a in job.command)) if job.command else set()
    if "task" in used and not job.array:
        raise ConfigError("{task} is only defined in a job array (--array N)")
    return used


def _paths(site: Site, job: JobSpec, used: set[str], image: str | None) -> JobPaths:
    """Work folder, this job's node-local folder, staged data and output."""
    workdir = job.workdir or default_workdir(site)
    per_node = bool(job.stage_in and job.stage_in.per_node)
    node_local: str | None = None
    if site.node_local:  # per job: a second job never touches this one's staged data
        node_local = node_local_folder(site.node_local.path, job.name)
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
    return JobPaths(
        workdir=workdir,
        chdir=job.chdir if job.chdir and job.chdir != workdir else None,
        node_local=node_local,
        data=data,
        output=output,
        image=image,
        data_source=job.stage_in.source if job.stage_in else None,
        output_dest=job.stage_out.dest if job.stage_out else None,
    )


class _EnvLayers:
    """The environment, layer by layer; a later layer's value wins, the first position stays
    (so the exports keep their order), and each variable keeps the layer that set it.

    What each layer may set is :mod:`hpcenv.envpolicy`; the site layers are checked where the
    site file is read (with its line), measured tuning where its file is read and in
    :func:`hpcenv.tuning.apply.environment`, the job's own variables here."""

    def __init__(self) -> None:
        self._vars: dict[str, EnvVar] = {}

    def add(
        self,
        values: dict[str, str],
        source: EnvSource,
        expands: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        if source == "job":
            check_env(values, source, "the job's environment")
        for name, value in values.items():
            env_name(name)
            self._vars[name] = EnvVar(name, value, source, name in expands)

    def __contains__(self, name: str) -> bool:
        return name in self._vars

    def names(self) -> list[str]:
        return list(self._vars)

    def items(self) -> list[EnvVar]:
        return list(self._vars.values())


def _cache_env(site: Site) -> tuple[dict[str, str], EnvSource, set[str]]:
    """The site's cache folders (``caches``) as the ``site-cache`` layer; ``HPCENV_CACHES``
    names the node-scope ones, which each rank's step makes where it runs (``rank-env.sh``)."""
    values = {name: c.path for name, c in site.caches.items()}
    node = [name for name, c in site.caches.items() if c.scope == "node"]
    if node:
        values[CACHES_VAR] = " ".join(node)
    return values, "site-cache", set(site.caches)


def _uses_node_local(job: JobSpec, paths: JobPaths, used: set[str]) -> bool:
    """The job stages into, or its command names, its node-local folder (made and removed)."""
    per_node = bool(job.stage_in and job.stage_in.per_node)
    return bool(paths.node_local and (per_node or used & {"node_local", "data"}))


def _container_launch(
    site: Site, job: JobSpec, paths: JobPaths, used: set[str], env: _EnvLayers
) -> ContainerLaunch:
    """How each rank enters ``paths.image``: the runtime's prefix, launcher options, variables."""
    assert paths.image is not None
    per_node = bool(job.stage_in and job.stage_in.per_node)
    binds = [paths.node_local] if paths.node_local and _uses_node_local(job, paths, used) else []
    if paths.data and paths.data not in binds and not per_node:
        binds.append(paths.data)
    local = paths.node_local or paths.workdir
    if paths.output and not paths.output.startswith((paths.workdir, local)):
        binds.append(paths.output)
    if paths.chdir:  # the container starts where the user is; the steps folder stays bound
        binds.insert(0, paths.workdir)
    binds += [c.path for c in site.caches.values() if c.scope == "shared"]
    names = [*env.names(), *PLACEHOLDERS.values(), *(["HPCENV_CHDIR"] if paths.chdir else [])]
    if job.launch == "mpi":  # rank-env.sh sets them on the node, before the runtime
        names += [n for n in RANK_NAMES if n not in names]
    from hpcenv.jobs.runtimes.base import RunContext  # runtimes.base imports hpcenv.jobs' modules

    ctx = RunContext(paths.chdir or paths.workdir, binds, names, inject_site_mpi=job.site_mpi)
    return runtime_of(site).launch(site, paths.image, ctx)


def _host_env(container: ContainerLaunch, env: _EnvLayers) -> dict[str, str]:
    """What this host's runtime needs (the runtime says: podman's hpcenv.hostconf), unless the
    job set it: expands on the node, so the variable may still be given there."""
    out = {}
    for key, path in container.host_env.items():
        conf = word(path, f"{key} path")
        if key not in env:
            out[key] = f"${{{key}:-{conf}}}"
    return out


def _launch_step(
    site: Site,
    job: JobSpec,
    placement: Placement,
    launcher: Launcher,
    container: ContainerLaunch | None,
) -> Step:
    prefix = tuple(container.prefix) if container else ()
    launcher_args = container.launcher_args if container else []
    rank_step: tuple[str, ...] = ()
    runner: tuple[str, ...] = ()
    if job.launch == "mpi":
        head = launch_argv(site, placement, launcher=launcher.name, extra=launcher_args)
        what = f"{placement.ranks} ranks, {placement.ranks_per_node} per node"
        runner = tuple(launcher.runner(site, placement, job.command))
        if launcher.sets_ranks:
            what += f", one {launcher.name} per node"
        else:  # torch's env:// names per rank from the launcher's own variables
            rank_step = ("sh", step_path(RANK_STEP))
    elif launcher_args:  # pyxis: the container is an srun option
        head = launcher.one_task(launcher_args)
        what = "one task"
    else:
        head = []
        what = "in the batch shell"
    launch = Launch(
        launcher.name if head else "",
        tuple(head),
        prefix,
        tuple(job.command),
        what,
        rank_step=rank_step,
        runner=runner,
    )
    return Step("launch", f"Run ({what}).", launch=launch)


def _injection(site: Site, job: JobSpec) -> SiteMpi | None:
    """The site MPI the job binds; for the site's image of a built-in recipe that the resolver
    builds against the MPI-5 standard ABI (:func:`hpcenv.mpi_abi.decide`), the same binding with
    ``libmpi_abi.so.1`` as the library the preflight checks (:func:`bindmodel.standard_abi`)."""
    inj = site_mpi(site) if job.site_mpi else None
    if inj is None or not job.recipe:
        return inj
    from hpcenv.mpi_abi import decide
    from hpcenv.recipe import load_recipe, recipe_names

    if job.recipe in recipe_names() and decide(site, load_recipe(job.recipe)).fits:
        return standard_abi(inj) or inj
    return inj


def _preflight_step(
    site: Site, job: JobSpec, container: ContainerLaunch
) -> tuple[StepFile, Step] | None:
    """Bind model: check once, inside the image, that the site MPI replaces the image's (not in
    a control run that keeps the image's MPI)."""
    inj = _injection(site, job)
    if inj is None or not container.prefix:
        return None
    argv = (*container.prefix, "sh", step_path("bind-preflight.sh"), *preflight_args(inj))
    what = "Bind model: check once, inside the image, that the site MPI replaces the image's (same ABI)."
    file = step_file(
        "bind-preflight.sh", "the bind-model preflight", soname=inj.soname, model=inj.model
    )
    return file, Step("preflight", what, argv)


def _staging_steps(
    job: JobSpec, paths: JobPaths, placement: Placement, launcher: Launcher
) -> tuple[list[tuple[StepFile, Step]], list[tuple[StepFile, Step]]]:
    """(steps before the launch, steps after it), each with the file it runs."""
    before: list[tuple[StepFile, Step]] = []
    after: list[tuple[StepFile, Step]] = []
    if job.stage_in:
        src = job.stage_in.source
        manifest = job.stage_in.manifest or f"{src}/{MANIFEST_NAME}"
        assert paths.data is not None
        per_node = job.stage_in.per_node
        argv = ["bash", step_path("stage-in.sh"), *map(expanding, (src, paths.data, manifest))]
        if per_node:
            argv = [*launcher.per_node(placement.nodes), *argv]
        where = "once per node to node-local storage" if per_node else "once"
        what = f"Stage-in: {src} -> {paths.data}, {where}, verified against {manifest}"
        before.append((step_file("stage-in.sh", "stage-in"), Step("stage-in", what, tuple(argv))))
    if job.stitch:
        s = job.stitch
        argv = [
            "bash",
            step_path("stitch.sh"),
            expanding(s.parts),
            str(s.count),
            s.prefix,
            s.suffix,
            expanding(s.output),
            "1" if s.force else "0",
        ]
        what = f"Stitch: {s.count} parts {s.parts}/{s.prefix}<i>{s.suffix} -> {s.output}"
        after.append((step_file("stitch.sh", "stitch"), Step("stitch", what, tuple(argv))))
    if job.stage_out:
        assert paths.output is not None
        force = "1" if job.stage_out.force else "0"
        argv = [
            "bash",
            step_path("stage-out.sh"),
            expanding(paths.output),
            expanding(job.stage_out.dest),
            force,
        ]
        what = f"Stage-out: {paths.output} -> {job.stage_out.dest}, atomic, verified"
        after.append((step_file("stage-out.sh", "stage-out"), Step("stage-out", what, tuple(argv))))
    return before, after


def _node_local_argv(
    job: JobSpec, paths: JobPaths, used: set[str], placement: Placement, launcher: Launcher
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(make, remove) the job's node-local folder, on every node when the job spans nodes."""
    if not _uses_node_local(job, paths, used):
        return (), ()
    per_node = bool(job.stage_in and job.stage_in.per_node)
    many = per_node or (job.launch == "mpi" and placement.nodes > 1)
    on_nodes = launcher.per_node(placement.nodes) if many else []
    script = ("bash", step_path("node-local.sh"))  # the folder: $HPCENV_NODE_LOCAL, not argv
    return (*on_nodes, *script, "make"), (*on_nodes, *script, "remove")


def plan_job(
    site: Site,
    job: JobSpec,
    image: str | None = None,
    *,
    submitting: bool = False,
    preview: bool = False,
    measured: MeasuredTuning | None = None,
) -> JobPlan:
    """The plan of ``job`` on ``site``; ``image`` overrides ``job.image`` (None: run on the host).

    ``submitting``: the script is about to be submitted (or shown as such), so a missing or
    placeholder account is refused with the option to give; ``preview`` (a dry run) shows it
    with a placeholder account and a note instead. ``measured``: the tuning file in
    force for this image and layout (:func:`hpcenv.tuning.apply.lookup`); its environment comes
    after the site's, and its Open MPI rules file is a step file the job writes.
    """
    if site.scheduler.kind == "none":
        raise ConfigError(f"site {site.name!r} has no batch scheduler (scheduler.kind: none)")
    scheduler = get_scheduler(site.scheduler.kind)
    launcher = get_launcher(site.scheduler.launcher)
    image = image if image is not None else job.image
    used = _used_placeholders(job)
    job, routed = route(site, job)
    placement = job_placement(site, job)
    paths = _paths(site, job, used, image)
    account = account_for(site, job.account, strict=submitting, preview=preview)

    notes = [f"tuning: {r}" for r in placement.reasons] + ([routed] if routed else [])
    if preview and account == PREVIEW_ACCOUNT:
        notes.append(preview_note(site))
    files: list[StepFile] = []
    measured_env: dict[str, str] | None = None
    expands: set[str] = set()
    if measured is not None:
        from hpcenv.tuning.apply import OMPI_RULES_ENV, RULES_NAME, environment

        rules_text = measured.rules_text()
        rules = f"{STEPS}/{RULES_NAME}" if rules_text else None
        expands = {OMPI_RULES_ENV} if rules_text and OMPI_RULES_ENV not in job.env else set()
        measured_env = environment(measured, rules)
    env = _EnvLayers()
    # the layers every launch shares (hpcenv.jobs.launchenv); a job runs under the site MPI's
    # environment, bound in or the hybrid image's own
    shared = launch_layers(site, placement, measured_env, injected=True)
    for layer, values in shared:
        env.add(values, layer, expands if layer == "measured-tuning" else set())
    env.add(*_cache_env(site))
    if measured is not None:
        if rules_text:  # numbers only (generated from validated integers), one record per line
            text = checked_lines(rules_text.splitlines(), "\n")
            files.append(
                StepFile(
                    RULES_NAME,
                    text,
                    "measured collective tuning: Open MPI "
                    "coll_tuned rules for allreduce (hpcenv tune --measure)",
                )
            )
        notes.append(
            f"measured tuning: {measured.date}, image {measured.image_id[:12]}, "
            f"{measured.layout.describe()} (hpcenv tune --show --site {site.name})"
        )
    ranks = _rank_launcher(site, job)
    if job.command and job.launch == "mpi":
        env.add(rendezvous_env(site, scheduler), "rendezvous", {"MASTER_ADDR", "MASTER_PORT"})
    env.add(job.env, "job")
    env.add(job.passed_env(), "job", set(job.pass_env))  # --env NAME: by name (issue 37)
    by_name = {n: BY_NAME for n in job.pass_env}
    notes += overridden_placement([*shared, ("job", job.env), ("job", by_name)])

    steps: list[Step] = []
    before, after = _staging_steps(job, paths, placement, launcher)
    pre = list(before)
    launch: Step | None = None
    if job.command:
        container = _container_launch(site, job, paths, used, env) if image else None
        if container is not None:
            env.add(container.env, "runtime")
            notes += container.notes
            host = _host_env(container, env)
            env.add(host, "host", set(host))
            preflight = _preflight_step(site, job, container)
            if preflight:
                pre.append(preflight)
            files += [step_file(name, what) for name, what in container.steps]
            files += container.files
        launch = _launch_step(site, job, placement, ranks, container)
        if launch.launch and launch.launch.rank_step:
            what = "torch.distributed's env:// names per rank (RANK, LOCAL_RANK, WORLD_SIZE...)"
            files.append(step_file(RANK_STEP, what, gpu_bind=placement.gpu_bind))
        if paths.output:
            launch = replace(launch, makes_output=True)
    for file, _ in [*pre, *after]:
        if file.name not in (f.name for f in files):
            files.append(file)
    steps = [s for _, s in pre] + ([launch] if launch else []) + [s for _, s in after]
    make, remove = _node_local_argv(job, paths, used, placement, launcher)
    if make:
        files.insert(
            0, step_file("node-local.sh", "this job's node-local folder, made and checked")
        )
    if any(LIBRARY in f.sources for f in files):  # once per job, before the steps that source it
        what = "the step library (hpcenv_* functions) the steps below source"
        files.insert(0, step_file(LIBRARY, what))
    return JobPlan(
        site=site.name,
        name=job.name,
        scheduler=scheduler.name,
        launcher=launcher.name,
        runtime=site.runtime.kind if image else "host (no container)",
        mpi=f"{site.mpi.model} MPI {site.mpi.spec} over {site.mpi.pmi}",
        directives=scheduler.directives(
            site,
            job.model_copy(update={"account": account}),
            placement,
            node_local=bool(job.stage_in and job.stage_in.per_node),
        ),
        modules=list(site.modules),
        prelude=prelude(site, account),
        job_id_expr=scheduler.job_id_expr,
        placement=placement,
        paths=paths,
        environment=env.items(),
        files=files,
        steps=steps,
        notes=[_one_line(n) for n in notes],
        task_id_expr=scheduler.task_id_expr if job.array else None,
        task_count=job.array.count if job.array else 0,
        node_local_setup=make,
        node_local_cleanup=remove,
        modules_purge=site.modules_purge,
        modules_unload=list(site.modules_unload),
        setup=list(site.mpi.setup) if image and job.site_mpi else [],
        cache_dirs=[c.path for c in site.caches.values() if c.scope == "shared"]
        if job.command
        else [],
        walltime=job.walltime or site.scheduler.walltime,
        device="GPU tile" if site.node.gpu_tiles > 1 else "GPU",
    )


def render_plan(plan: JobPlan) -> str:
    """The job script: ``job.sh.j2`` printing ``plan``."""
    return _env().get_template("jobs/job.sh.j2").render(plan=plan)


def _rank_launcher(site: Site, job: JobSpec) -> Launcher:
    """The launcher that starts the ranks: the job's ``launcher`` (torchrun), else the site's.
    torchrun needs torch in the image: a recipe without it is refused."""
    launcher = get_launcher(job.launcher or site.scheduler.launcher)
    if launcher.name != "torchrun":
        return launcher
    if job.launch != "mpi":
        raise ConfigError("--launcher torchrun starts ranks on every node; not with --single")
    if job.image and job.recipe:
        from hpcenv.recipe import load_recipe, recipe_names

        # A built-in by name; a recipe file (the job carries its name:) is checked where it
        # was loaded (hpcenv.jobs.service), with this function.
        if job.recipe in recipe_names():
            torchrun_needs_torch(load_recipe(job.recipe))
    return launcher


def torchrun_needs_torch(recipe: Recipe) -> None:
    """torchrun runs inside the image: a recipe without torch is refused, in one line."""
    if not recipe.wants("torch"):
        raise ConfigError(
            f"--launcher torchrun needs torch in the image; recipe {recipe.name!r} has none "
            "(use a torch recipe, or the site's launcher)"
        )


def prepare(
    site: Site,
    job: JobSpec,
    image: str | None = None,
    *,
    submitting: bool = False,
    preview: bool = False,
    measured: MeasuredTuning | None = None,
) -> RenderedJob:
    """Plan ``job`` for ``site`` and print the plan (see :func:`plan_job`)."""
    plan = plan_job(site, job, image, submitting=submitting, preview=preview, measured=measured)
    scheduler = get_scheduler(site.scheduler.kind)
    return RenderedJob(plan, render_plan(plan), scheduler, scheduler.log_names(job))


def render_job(
    site: Site, job: JobSpec, image: str | None = None, measured: MeasuredTuning | None = None
) -> str:
    """The job script text for ``job`` on ``site``; ``image`` overrides ``job.image``."""
    return prepare(site, job, image, measured=measured).script
