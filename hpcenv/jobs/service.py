"""Job services behind the commands: a typed request in, one function, a result out.

Issue 18 ("a thin CLI"): a command parses its options into a typed object and calls one
service function; it no longer builds jobs. :class:`SubmitRequest` is ``hpcenv submit``'s
options as data; :func:`submit_request` checks how they combine, builds the
:class:`~hpcenv.jobs.spec.JobSpec`, looks up measured tuning, prepares the plan and script,
and (unless a dry run) checks the job records folder, makes the transport, checks the local
image and dataset manifest (all before anything is queued),
submits and waits. :func:`job_status` and :func:`cancel_job` find a job's record (or ask a
site's scheduler) for ``status`` and ``cancel``; ``logs`` reads through
:mod:`hpcenv.jobs.logtail`.

Nothing here prints: lines for stderr (warnings, a manifest written, ``--wait``'s state
changes) go to the callbacks given, and the results say what the command shows. Heavy imports
stay inside the functions, as in the CLI, so importing this module is cheap.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcenv.choices import SshClient, TransportKind
from hpcenv.errors import JobError

if TYPE_CHECKING:
    from hpcenv.jobs.render import RenderedJob
    from hpcenv.jobs.schedulers import Scheduler
    from hpcenv.jobs.spec import JobSpec
    from hpcenv.jobs.status import JobStatus
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import Transport
    from hpcenv.recipe import Recipe
    from hpcenv.site import Site

WAIT_MAX_POLL = 30.0  # submit --wait backs off to this (seconds): kind to the scheduler

Notify = Callable[[str], None]


def _ignore(_: str) -> None:
    return None


@dataclass(frozen=True)
class SshOptions:
    """Explicit SSH settings; each None falls back to the site's ``ssh`` section."""

    host: str | None = None
    port: int | None = None
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    config: str | None = None  # ``ssh -F FILE`` (openssh)
    client: SshClient = SshClient.openssh


@dataclass(frozen=True)
class SubmitRequest:
    """``hpcenv submit``'s options, parsed: what to run where, and how to submit it."""

    site: str
    command: tuple[str, ...] = ()
    recipe: str | None = None
    requirements: tuple[Path, ...] = ()  # with pip: build's short form (image NAME-user)
    pip: tuple[str, ...] = ()
    launcher: str | None = None
    nodes: int = 1
    ntasks: int | None = None  # total, as in Slurm
    ranks_per_node: int | None = None
    cpus_per_task: int | None = None
    cores_per_rank: int | None = None
    gpus_per_task: int | None = None
    gpus_per_node: int | None = None
    ccl_workers: int | None = None
    image: str | None = None
    no_container: bool = False
    name: str | None = None
    workdir: str | None = None
    chdir: str | None = None  # where the command runs; None: the folder submit is called from
    walltime: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    account: str | None = None
    queue: str | None = None
    qos: str | None = None
    constraint: str | None = None
    options: tuple[str, ...] = ()
    option_override: bool = False
    single: bool = False
    stage_in: str | None = None
    stage_out: str | None = None
    array: str | int | None = None  # a task count, or Slurm's 0-LAST[%P] (ArraySpec.parse)
    after: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # --env NAME=VALUE, or NAME: passed by name (spec.user_env)
    force: bool = False
    dry_run: bool = False
    site_mpi: bool = True
    transport: TransportKind = TransportKind.local
    ssh: SshOptions = field(default_factory=SshOptions)
    wait: bool = False
    timeout: float | None = None  # --wait: None waits as long as the job lives


@dataclass(frozen=True)
class SubmitResult:
    """A dry run's rendered job, or a submission (with its final status after ``--wait``)."""

    site: str
    rendered: RenderedJob
    submission: Submission | None = None
    status: JobStatus | None = None
    via: str = ""  # the transport, in words
    after: list[str] = field(default_factory=list)  # a dry run's --after, for its submit line

    def to_dict(self) -> dict[str, Any]:
        if self.submission is None:
            from hpcenv.jobs.preview import log_files, submit_line

            r = self.rendered
            return {
                "site": self.site,
                "scheduler": r.scheduler.name,
                "image": r.image,
                "workdir": r.workdir,
                "placement": r.placement.to_dict(),
                "tuning": r.placement.to_dict(),  # the old name of "placement", kept for scripts that read it
                "plan": r.plan.to_dict(),
                "script": r.script,
                "submit_command": submit_line(r, self.after),
                "logs": log_files(r, r.plan.name),
            }
        doc = self.submission.to_dict()
        if self.status is not None:
            doc["status"] = self.status.to_dict()
        return doc

    def text(self) -> str:
        """What a person reads: the script (dry run), or a line per submission and status."""
        if self.submission is None:
            return self.rendered.script
        sub = self.submission
        lines = [
            f"submitted {sub.job_id} ({sub.name}) to {sub.scheduler} via {self.via}; "
            f"workdir {sub.workdir}"
        ]
        if self.status is not None:
            lines.append(self.status.message())
        return "\n".join(lines) + "\n"


def refuse_empty(**options: str | None) -> None:
    """An option given as '' is a mistake, not "use the default" (``--image ''`` ran a sweep)."""
    from hpcenv.errors import ConfigError

    for name, value in options.items():
        if value is not None and not value.strip():
            raise ConfigError(
                f"--{name.replace('_', '-')} is empty: give a value or leave the option out"
            )


def make_transport(site: Site, kind: TransportKind, ssh: SshOptions) -> Transport:
    from hpcenv.jobs.schedulers import client_env
    from hpcenv.jobs.transport import LocalTransport, ssh_spec
    from hpcenv.jobs.transport import make_transport as make_ssh

    if kind is TransportKind.local:
        return LocalTransport(client_env(site))
    spec = ssh_spec(
        site,
        ssh.host,
        ssh.port,
        ssh.user,
        ssh.key,
        ssh.known_hosts,
        env=client_env(site),
        client=ssh.client.value,
        ssh_config=ssh.config,
    )
    return make_ssh(spec)


def check_local_image(site: Site, image: str, inject: bool, force: bool) -> None:
    """Fail early when this host can tell the job's image is not there or cannot take the
    site's injected MPI (the site's runtime checks: hpcenv.jobs.runtimes)."""
    from hpcenv.jobs.runtimes.registry import runtime_of

    runtime_of(site).check_local_image(site, image, inject=inject, force=force)


def ensure_manifest(directory: Path, notify: Notify = _ignore) -> None:
    """For a local dataset without a manifest, write one now (trusting the current files)."""
    from hpcenv.jobs.spec import MANIFEST_NAME
    from hpcenv.jobs.staging import write_manifest

    if directory.is_dir() and not (directory / MANIFEST_NAME).is_file():
        write_manifest(directory)
        notify(f"wrote {directory / MANIFEST_NAME} (no manifest was there)")


# Programs whose first argument that is not an option is the script they run.
_INTERPRETER = re.compile(r"(python[0-9.]*|bash|sh|zsh|ksh|Rscript|julia|perl|ruby|node)")
_NO_SCRIPT = {"-m", "-c", "-"}  # python -m module, -c code, read stdin
_TAKES_VALUE = {"-W", "-X", "-o", "-O", "--init-file", "--rcfile"}


def command_script(command: tuple[str, ...]) -> str | None:
    """The local script ``command`` runs, when it names one by a relative path:
    ``python3 train.py`` -> ``train.py``, ``./run.sh`` -> ``./run.sh``. An absolute path may be
    inside the image, a bare program name is looked up on PATH: neither is a local file."""
    if not command:
        return None
    prog = command[0]
    if "/" in prog:
        return None if prog.startswith("/") else prog
    if not _INTERPRETER.fullmatch(prog):
        return None
    skip = False
    for arg in command[1:]:
        if skip:
            skip = False
        elif arg in _NO_SCRIPT:
            return None
        elif arg in _TAKES_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return None if arg.startswith("/") or "$" in arg or "{" in arg else arg
    return None


def check_chdir(chdir: str, command: tuple[str, ...]) -> None:
    """Before anything is queued: the job's folder exists here, and so does the script its
    command names (relative to that folder). Paths naming variables expand on the node."""
    from hpcenv.errors import ConfigError

    if "$" in chdir:
        return
    folder = Path(chdir)
    if not folder.is_dir():
        raise ConfigError(f"--chdir {chdir}: no such folder; the job would start nowhere")
    script = command_script(command)
    if script and not (folder / script).is_file():
        raise ConfigError(
            f"{script}: no such file in {chdir} (the job runs there; cd to the script's "
            "folder or pass --chdir)"
        )


def check_recipe(site: Site, recipe: Recipe, req: SubmitRequest) -> str | None:
    """The recipe's image can run on ``site`` as ``build`` decides it: a GPU recipe on a site
    without GPUs is build's own refusal (the resolver's accelerator). A recipe without a GPU
    stack on a GPU site would hold every GPU the placement binds and use none: the job asks
    for no GPUs, and the returned note says so (None: nothing to change). Only where the
    recipe's image runs (not with ``--image`` or ``--no-container``); a recipe on a prebuilt
    base is checked by build."""
    from hpcenv.resolver import Resolver

    if req.image or req.no_container or recipe.content.base:
        return None
    accel = Resolver(site, recipe, {}).accelerator()  # ConflictError: GPU recipe, no GPUs
    asked = (req.gpus_per_node, req.gpus_per_task) != (None, None)
    if accel != "none" or site.gpu.vendor == "none" or asked:
        return None
    return (
        f"note: recipe {recipe.name} has no GPU stack (accelerator: {recipe.accelerator}): the "
        f"job asks {site.name} for no GPUs (give --gpus-per-node N to hold them anyway)"
    )


def check_launcher(site: Site, name: str) -> None:
    """``--launcher``: the site's own (``scheduler.launcher``, what its MPI and scheduler take)
    or torchrun (one per node, started by the site's); another is refused in one line, also
    when the scheduler would take it (``mpirun`` on a Cray MPICH site has no mpirun)."""
    from hpcenv.errors import ConfigError, did_you_mean
    from hpcenv.jobs.launchers import LAUNCHERS
    from hpcenv.knowledge import kb

    own = site.scheduler.launcher
    offered = [own, "torchrun"]
    if name in offered:
        return
    give = f"give {' or '.join(offered)}, or leave --launcher out"
    if name not in LAUNCHERS:
        raise ConfigError(
            f"--launcher {name}: no such launcher{did_you_mean(name, offered)}; {give}"
        )
    kind = site.scheduler.kind
    fits = kb()["launchers"].get(kind, [])
    if name not in fits:
        raise ConfigError(
            f"--launcher {name}: scheduler {kind} does not take it (it takes "
            f"{', '.join(fits) or 'none'}); {give}"
        )
    raise ConfigError(
        f"--launcher {name}: site {site.name} starts ranks with {own} (scheduler.launcher, "
        f"for its {site.mpi.spec}); {give}"
    )


def _job_spec(req: SubmitRequest, site: Site, notify: Notify = _ignore) -> JobSpec:
    """The request's job, after the checks that need the options together."""
    from pydantic import ValidationError

    from hpcenv.errors import ConfigError
    from hpcenv.jobs.runtimes.registry import default_image
    from hpcenv.jobs.schedulers import option_pair
    from hpcenv.jobs.spec import ArraySpec, JobSpec, StageIn, StageOut, user_env
    from hpcenv.safe import validation_message

    for opt in req.options:
        option_pair(opt)  # one clear line per bad --option, before the job model
    env, passed = user_env(req.env)
    if req.transport is TransportKind.local:  # the submitting shell is this one
        unset = [n for n in passed if n not in os.environ]
        if unset:
            raise ConfigError(
                f"--env {unset[0]}: not set in this shell, so the job would not get it: export "
                f"{unset[0]} first, or give --env {unset[0]}=VALUE"
            )
    elif passed:
        notify(
            f"note: --env {', '.join(passed)}: the job gets the value the login shell over "
            "SSH has (set it there, e.g. in ~/.bashrc)"
        )
    refuse_empty(
        image=req.image,
        stage_in=req.stage_in,
        stage_out=req.stage_out,
        chdir=req.chdir,
        output=req.stdout,
        error=req.stderr,
    )
    image = req.image
    from hpcenv.recipe import is_path, load_recipe, recipe_name, with_additions

    no_gpus = None
    if req.recipe:  # a mistyped name is one line with did-you-mean, as in build
        no_gpus = check_recipe(site, load_recipe(req.recipe), req)
        if no_gpus:
            notify(no_gpus)
    if req.launcher is not None:
        check_launcher(site, req.launcher)
    recipe = recipe_name(req.recipe) if req.recipe else None  # a recipe file: its name
    image_recipe = recipe
    if req.requirements or req.pip:  # the short form: the image `build` made with the same options
        if not req.recipe:
            raise ConfigError("--requirements/--pip add to a recipe: give --recipe too")
        loaded = load_recipe(req.recipe)
        image_recipe = with_additions(loaded, list(req.requirements), list(req.pip)).name
    if req.launcher == "torchrun" and req.recipe and is_path(req.recipe) and not req.no_container:
        from hpcenv.jobs.render import torchrun_needs_torch

        torchrun_needs_torch(load_recipe(req.recipe))
    site_mpi = req.site_mpi
    if site_mpi and req.recipe and is_path(req.recipe) and not req.no_container:
        from hpcenv.prebuilt import known_bases

        base = load_recipe(req.recipe).content.base
        if base in known_bases():  # a framework image: its own MPI (or none), not the site's
            site_mpi = False
            notify(
                f"note: {base} is a framework image with its own communication stack: the "
                f"site's MPI is not bound into it (torch.distributed over NCCL/RCCL needs none)"
            )
    if image and req.no_container:
        raise ConfigError("--image and --no-container exclude each other")
    if not image and not req.no_container:
        if not req.recipe:
            raise ConfigError("give --recipe (default image), --image, or --no-container")
        from hpcenv.image_records import read_record

        built = read_record(site.name, image_recipe or "")  # build --on-login: where it landed
        image = built["image"] if built else default_image(site, image_recipe or "")
    try:
        job = JobSpec(
            name=req.name or recipe or "hpcenv",
            command=list(req.command),
            launch="single" if req.single else "mpi",
            launcher=req.launcher,
            nodes=req.nodes,
            ntasks=req.ntasks,
            ranks_per_node=req.ranks_per_node,
            cpus_per_task=req.cpus_per_task,
            cores_per_rank=req.cores_per_rank,
            gpus_per_task=req.gpus_per_task,
            gpus_per_node=0 if no_gpus else req.gpus_per_node,
            ccl_workers=req.ccl_workers,
            recipe=recipe,
            image=None if req.no_container else image,
            workdir=req.workdir,
            chdir=_chdir(req),
            walltime=req.walltime,
            stdout=req.stdout,
            stderr=req.stderr,
            account=req.account,
            queue=req.queue,
            qos=req.qos,
            constraint=req.constraint,
            scheduler_options=list(req.options),
            env=env,
            pass_env=passed,
            option_override=req.option_override,
            stage_in=StageIn(source=req.stage_in) if req.stage_in is not None else None,
            stage_out=(
                StageOut(dest=req.stage_out, force=req.force) if req.stage_out is not None else None
            ),
            array=ArraySpec.parse(str(req.array)) if req.array is not None else None,
            force=req.force,
            site_mpi=site_mpi,
        )
    except ValidationError as err:
        raise ConfigError(validation_message(err, "invalid job")) from None
    folder = _log_folder(req, site, job)
    return job if folder is None else job.model_copy(update={"stdout": folder, "stderr": folder})


def _log_folder(req: SubmitRequest, site: Site, job: JobSpec) -> str | None:
    """Issue 37: where no ``-o``/``-e`` is given, the logs go beside the folder ``submit`` was
    called from (or ``--chdir``), as the schedulers write them: sbatch(1) "By default both
    standard output and standard error are directed to a file of the name slurm-%j.out", a
    relative name in the batch script's working directory, sbatch's own unless --chdir
    (man.archlinux.org/man/sbatch.1, read 2026-11-28); bsub -o "If only a file name is
    specified, LSF writes the output file to the current working directory" (IBM LSF 10.1
    bsub -o, read 2026-11-28). hpcenv's default names (``NAME-%j.out``) in that folder. They
    stay in hpcenv's workdir when ``--workdir`` names it (its help: "steps, logs"), when the
    job is not submitted from this machine, when the site says not to run jobs from that
    folder (``submit_here: false``, ``read_only_on_compute``: submit warns), when this user
    cannot write to it, when its name has characters a log path may not carry, or when the
    scheduler expands no job id in a name (PBS: one fixed file)."""
    from hpcenv.jobs.spec import LOG_NAME
    from hpcenv.jobs.submitdir import folder_warning

    chdir = job.chdir
    if req.stdout or req.stderr or req.workdir or not chdir:
        return None  # --workdir is "hpcenv's folder for the job (steps, logs)": asked for there
    if req.transport is not TransportKind.local:
        return None
    folder = chdir.rstrip("/") + "/"
    if "$" in chdir or not re.fullmatch(LOG_NAME, folder):
        return None
    if site.scheduler.kind == "none" or _scheduler(site).default_log_names(job)[0] is None:
        return None
    if folder_warning(site, chdir, os.environ) is not None:
        return None
    if not os.access(chdir, os.W_OK):  # the scheduler could not open the files: the job fails
        return None
    return folder


def _scheduler(site: Site) -> Scheduler:
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.schedulers import get_scheduler

    if site.scheduler.kind == "none":
        raise ConfigError(f"site {site.name!r} has no batch scheduler (scheduler.kind: none)")
    return get_scheduler(site.scheduler.kind)


def _not_checked(req: SubmitRequest, job: JobSpec) -> list[str]:
    """What only a real submit checks, because it is on the machine that submits (the site's
    login node): the job's folder and script, the image, the stage-in data's manifest."""
    out = []
    if job.chdir and req.transport is TransportKind.local:
        script = command_script(tuple(job.command))
        if req.chdir is not None or script:
            out.append(f"{script + ' in ' if script else ''}the job's folder {job.chdir}")
    if job.image and req.transport is TransportKind.local:
        out.append(f"that the image {job.image} exists")
    if req.stage_in:
        out.append(f"the stage-in data {req.stage_in} and its manifest")
    return out


def _chdir(req: SubmitRequest) -> str | None:
    """Where the command runs: ``--chdir``, else (Slurm's default) the folder ``submit`` was
    called from, when the job is submitted from this machine; over SSH that folder is not on the
    login node, so the job runs in its workdir unless ``--chdir`` says otherwise."""
    if req.chdir is not None:
        return req.chdir if req.chdir.startswith(("/", "$")) else str(Path(req.chdir).absolute())
    return str(Path.cwd()) if req.transport is TransportKind.local else None


def check_here(req: SubmitRequest, site: Site, job: JobSpec, notify: Notify) -> None:
    """What ``submit``, ``run`` and ``shell`` check on this host before a job runs: the job's
    folder is one the site lets jobs run from (a warning), and the project's image is not
    stale (issue 37: its inputs changed since it was built; a ConfigError)."""
    if req.transport is not TransportKind.local:
        return
    if job.chdir:
        from hpcenv.jobs.submitdir import folder_warning

        folder = folder_warning(site, job.chdir, os.environ)
        if folder:
            notify(f"warning: {folder}")
    if not req.image and not req.no_container:
        from hpcenv.jobs.image_freshness import check_image_inputs

        check_image_inputs(site, req.recipe, req.requirements, req.pip, job.image)


def submit_request(
    req: SubmitRequest,
    *,
    notify: Notify = _ignore,
    on_change: Callable[[JobStatus], None] | None = None,
) -> SubmitResult:
    """Render ``req``'s job for its site and, unless a dry run, submit it (and wait).

    ``notify`` gets one-line warnings and notes (the CLI puts them on stderr); ``on_change``
    gets each state change while waiting."""
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.measured import for_job
    from hpcenv.jobs.render import prepare
    from hpcenv.jobs.submit import records_dir, submit
    from hpcenv.site import load_site, retirement_warning

    s = load_site(req.site)
    retired = retirement_warning(s)
    if retired:
        notify(retired)
    job = _job_spec(req, s, notify)
    check_here(req, s, job, notify)
    after = _scheduler(s).check_after(req.after) if req.after else []
    measured, warning = for_job(s, job, job.image)
    if warning:
        notify(f"warning: {warning}")
    rendered = prepare(s, job, submitting=True, preview=req.dry_run, measured=measured)
    if req.ntasks and req.nodes > 1 and req.ranks_per_node is None:
        notify(
            f"note: -n/--ntasks {req.ntasks} is the total, as in Slurm: "
            f"{rendered.placement.ranks_per_node} per node on {req.nodes} nodes "
            "(for a count per node, give --ntasks-per-node)"
        )
    for note in rendered.notes:
        if note.endswith("(scheduler.queue_limits)") or note.startswith("dry run:"):
            notify(f"note: {note}")
    if req.dry_run:
        unchecked = _not_checked(req, job)
        if unchecked:
            notify(
                "note: dry run: not checked here (a real submit checks them where it submits): "
                + "; ".join(unchecked)
            )
        from hpcenv.jobs.preview import notes as preview

        for line in preview(rendered, after):  # the exact submit command line, the log paths
            notify(line)
        return SubmitResult(s.name, rendered, after=after)
    if job.chdir and req.transport is TransportKind.local:
        check_chdir(job.chdir, tuple(job.command))
    try:  # local checks first, so nothing is queued (nor a manifest written) that cannot be recorded
        records_dir(probe=True)
    except ConfigError as err:
        raise ConfigError(f"{err}; nothing was submitted") from None
    local = req.transport is TransportKind.local
    t = make_transport(s, req.transport, req.ssh)
    st = None
    try:
        if job.image and local:
            check_local_image(s, job.image, job.site_mpi, req.force)
        if req.stage_in and local and "$" not in req.stage_in:
            ensure_manifest(Path(req.stage_in), notify)
        sub = submit(s, job, t, after=after, rendered=rendered)
        if req.wait:
            st = follow(sub, t, req.timeout, on_change)
    finally:
        t.close()
    return SubmitResult(s.name, rendered, sub, st, t.describe())


class WaitInterrupted(JobError):
    """Ctrl-C while waiting: the job is left as it is (the message says so); exit 130."""

    exit_code = 130


def follow(
    sub: Submission,
    t: Transport,
    timeout: float | None,
    on_change: Callable[[JobStatus], None] | None = None,
) -> JobStatus:
    """Wait while the job lives (``timeout`` None), polling with backoff to
    :data:`WAIT_MAX_POLL` and asking again at once when the job's script marks its end
    (hpcenv.jobs.ended); a pending reason that needs someone to act is reported through
    ``on_change`` (``blocked``), not given up on: the job is still queued. Ctrl-C is
    :class:`WaitInterrupted`, which names the job and how to follow or cancel it."""
    from hpcenv.jobs.ended import end_signal
    from hpcenv.jobs.submit import wait

    try:
        return wait(
            sub,
            t,
            timeout=timeout,
            poll=1.0,
            max_poll=WAIT_MAX_POLL,
            blocked_after=None,
            on_change=on_change,
            ended=end_signal(sub),
        )
    except KeyboardInterrupt:
        raise WaitInterrupted(
            f"stopped waiting for job {sub.job_id}; the job was left as it is "
            f"(hpcenv status {sub.job_id} --wait follows it again, hpcenv cancel {sub.job_id} "
            "cancels it)"
        ) from None


@dataclass(frozen=True)
class JobRow:
    """One line of ``hpcenv status`` without an id: a record and its state, or why not."""

    submission: Submission | None
    status: JobStatus | None = None
    error: str | None = None
    record: str = ""  # the record file

    def to_dict(self) -> dict[str, Any]:
        return {
            "record": self.record,
            "submission": self.submission.to_dict() if self.submission else None,
            "status": self.status.to_dict() if self.status else None,
            "error": self.error,
        }


def list_jobs(site: str | None = None, on: str | None = None, limit: int = 20) -> list[JobRow]:
    """The jobs hpcenv submitted from here (its job records, every transport), newest
    ``limit`` (0: all), each with its state from the scheduler. One connection per
    transport; a transport that cannot be reached is that error on each of its rows (asked
    once, not once per job), and a record that cannot be read is its own row."""
    from hpcenv.errors import HpcenvError
    from hpcenv.jobs.submit import all_records, status, transport_for
    from hpcenv.jobs.transport import TransportError

    records = all_records()
    rows: list[JobRow] = []
    for path, sub in records:
        if isinstance(sub, HpcenvError):
            rows.append(JobRow(None, error=str(sub), record=str(path)))
        elif (site is None or sub.site == site) and (
            on is None or on in (sub.transport.kind, sub.transport.host)
        ):
            rows.append(JobRow(sub, record=str(path)))
    rows = rows[-limit:] if limit else rows
    transports: dict[str, Transport | HpcenvError] = {}
    out: list[JobRow] = []
    try:
        for row in rows:
            if row.submission is None:
                out.append(row)
                continue
            key = row.submission.transport.model_dump_json()
            t = transports.get(key)
            if t is None:
                try:
                    t = transports[key] = transport_for(row.submission)
                except HpcenvError as err:
                    t = transports[key] = err
            if isinstance(t, HpcenvError):
                out.append(JobRow(row.submission, error=str(t), record=row.record))
                continue
            try:
                out.append(JobRow(row.submission, status(row.submission, t), record=row.record))
            except TransportError as err:
                transports[key] = err
                out.append(JobRow(row.submission, error=str(err), record=row.record))
            except HpcenvError as err:
                out.append(JobRow(row.submission, error=str(err), record=row.record))
    finally:
        for t in transports.values():
            if not isinstance(t, HpcenvError):
                t.close()
    return out


def wait_job(
    job_id: str,
    site: str | None = None,
    on: str | None = None,
    timeout: float | None = None,
    on_change: Callable[[JobStatus], None] | None = None,
) -> JobStatus:
    """``hpcenv status ID --wait``: :func:`follow` a submitted job until it ends."""
    sub, t = find_job(job_id, site, on)
    try:
        return follow(sub, t, timeout, on_change)
    finally:
        t.close()


def find_job(job_id: str, site: str | None, on: str | None = None) -> tuple[Submission, Transport]:
    """A submitted job's record, or a bare one for ``site`` (local transport)."""
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


def job_status(job_id: str, site: str | None = None, on: str | None = None) -> JobStatus:
    """A job's state in the scheduler's own words."""
    from hpcenv.jobs.submit import status

    sub, t = find_job(job_id, site, on)
    try:
        return status(sub, t)
    finally:
        t.close()


def cancel_job(job_id: str, site: str | None = None, on: str | None = None) -> None:
    from hpcenv.jobs.submit import cancel

    sub, t = find_job(job_id, site, on)
    try:
        cancel(sub, t)
    finally:
        t.close()
