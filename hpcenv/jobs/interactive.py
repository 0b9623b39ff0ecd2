"""``hpcenv run`` and ``hpcenv shell``: a job's own script, run inside an allocation one holds.

Debugging a hang needs the job's image, binds, environment and launch line, not a copy of them
(CSCS's Container Engine, pyxis, Apptainer and SkyPilot all offer this, issue 37). So nothing
here builds a launch: :func:`prepare_run` plans the job with submit's own
:func:`hpcenv.jobs.service._job_spec` and :func:`hpcenv.jobs.render.prepare`, and :func:`execute`
runs the very script ``submit`` would hand to ``sbatch``/``qsub``/``bsub``, with ``bash``, in
the allocation the shell is in (the scheduler's job id variable, which the script itself reads:
``Scheduler.job_id_expr``). The directives are comments to bash; the steps, their order and the
launch line are the plan's.

``hpcenv shell`` is the same plan with one change to its launch step: one task on the first
node of the allocation (:data:`SHELL_HEAD`, by launcher), the runtime's prefix made to read this
terminal (:meth:`ContainerRuntime.interactive`), and ``bash`` instead of the command; the steps
after the launch (stitch, stage-out) are left out.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcenv.errors import ConfigError

if TYPE_CHECKING:
    from hpcenv.jobs.plan import JobPlan
    from hpcenv.jobs.schedulers import Scheduler
    from hpcenv.jobs.service import Notify, SubmitRequest
    from hpcenv.site import Site

# How a user gets an interactive allocation, per scheduler: the command that gives a shell in
# one, which takes the batch directives' options (salloc(1): "salloc ... obtain a Slurm job
# allocation ... and then execute a command"; PBS Professional User's Guide 2022.1 section 6.11
# "Running Your Job Interactively": qsub -I; IBM Spectrum LSF 10.1 bsub -Is: "submits an
# interactive job and creates a pseudo-terminal with shell mode support").
ALLOCATE: dict[str, tuple[str, ...]] = {
    "slurm": ("salloc",),
    "pbs": ("qsub", "-I"),
    "lsf": ("bsub", "-Is"),
}
# Directive options that name files of a batch job: an interactive allocation writes none.
_LOG_FLAGS = {"--output", "--error", "-o", "-e"}
# What runs one task on the allocation's first node, by launcher (the shell's launch head).
# srun (srun(1) -N1 -n1; --pty on a terminal: "Execute task zero in pseudo terminal mode");
# PBS's qsub -I shell already runs on the first node of the job (the "mother superior", PBS
# User's Guide 6.11), so no launcher; LSF's bsub -Is shell runs on a launch node (OLCF Summit
# user guide, "Interactive Jobs"): jsrun one resource set of one task (jsrun(1) -n/-a/-c/-r).
SHELL_HEAD: dict[str, tuple[str, ...]] = {
    "srun": ("srun", "--nodes=1", "--ntasks=1", "--mpi=none"),
    "mpiexec": (),
    "mpirun": (),
    "jsrun": ("jsrun", "-n", "1", "-a", "1", "-c", "1", "-r", "1"),
}
PTY = {"srun": "--pty"}  # the launcher's pseudo-terminal option, given on a terminal only
# Options of submit that have no meaning for a command run here and now.
_NOT_HERE = {
    "after": "--after",
    "array": "--array",
    "wait": "--wait",
    "timeout": "--timeout",
    "stdout": "-o/--output",
    "stderr": "-e/--error",
}


@dataclass(frozen=True)
class InteractiveRun:
    """What ``hpcenv run``/``shell`` runs: the plan, its script and where."""

    verb: str  # run or shell
    site: str
    scheduler: str
    variable: str  # the scheduler's job id variable (SLURM_JOB_ID)
    allocation: str | None  # its value here; None: not inside one (a dry run only)
    allocate: list[str]  # how to get an allocation of the job's shape
    plan: JobPlan
    script: str
    env: dict[str, str]  # variables the scheduler's client commands need (SLURM_CONF)
    prelude: str = ""  # the site's variables the workdir may name (submit's prelude line)

    @property
    def start(self) -> str:
        """What runs the script (``$0``) as submit's host step does before the scheduler takes
        it: the workdir made, the script started there."""
        from hpcenv.jobs.shell import qpath

        workdir = qpath(self.plan.paths.workdir)
        return f'{self.prelude}mkdir -p -- {workdir} && cd -- {workdir} && exec bash "$0"'

    @property
    def launch_line(self) -> str:
        launch = self.plan.launch
        return launch.line() if launch else ""

    def lines(self) -> list[str]:
        """The command lines the script runs, in order (the launch among them)."""
        return [s.line() for s in self.plan.steps]

    def to_dict(self) -> dict[str, Any]:
        return {
            "verb": self.verb,
            "site": self.site,
            "scheduler": self.scheduler,
            "allocation": {"variable": self.variable, "id": self.allocation},
            "allocate": self.allocate,
            "run": ["bash", "-c", self.start, "JOB_SCRIPT"],
            "commands": self.lines(),
            "launch": self.launch_line,
            "plan": self.plan.to_dict(),
            "script": self.script,
        }

    def text(self) -> str:
        """The dry run: where it runs, then the exact command lines, one per line."""
        from hpcenv.jobs.shell import join

        where = (
            f"inside allocation {self.allocation} (${self.variable})"
            if self.allocation
            else f"not inside an allocation (${self.variable} is unset); get one with: "
            f"{join(self.allocate)}"
        )
        what = (
            "the job script submit would write with its launch made one shell"
            if self.verb == "shell"
            else "the job script submit would write (hpcenv submit --dry-run shows it)"
        )
        head = [
            f"# hpcenv {self.verb} on {self.site} ({self.scheduler}), {where}",
            f"# bash runs {what}; its commands:",
        ]
        return "\n".join([*head, *self.lines()]) + "\n"


def allocation_variable(scheduler: Scheduler) -> str:
    """The variable that holds the job id inside an allocation: the one the job script reads."""
    found = re.fullmatch(r"\$\{?(\w+)\}?", scheduler.job_id_expr)
    if not found:  # every registered scheduler names one variable (tests/test_run_in_allocation)
        raise ConfigError(f"scheduler {scheduler.name}: no job id variable to find an allocation")
    return found.group(1)


def allocate_argv(scheduler: Scheduler, plan: JobPlan) -> list[str]:
    """The interactive allocation of the job's shape: the directives' options after the
    scheduler's own interactive command (no log files: the allocation writes none)."""
    from hpcenv.jobs.schedulers import option_pair

    argv = list(ALLOCATE.get(scheduler.name, ()))
    for line in plan.directives:
        text = line.removeprefix(scheduler.prefix).strip()
        flag, value = option_pair(text)
        if flag in _LOG_FLAGS:
            continue
        if value is None:
            argv.append(flag)
        elif flag.startswith("--"):
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, value]
    if scheduler.name == "lsf":
        argv.append("bash")  # bsub -Is runs a command: the shell
    return argv


def _refuse_options(req: SubmitRequest, verb: str) -> None:
    from hpcenv.choices import TransportKind

    for field, flag in _NOT_HERE.items():
        value = getattr(req, field)
        if value not in (None, False, ()):
            raise ConfigError(
                f"{flag} is for hpcenv submit; hpcenv {verb} runs now, in this allocation, "
                "and prints to this terminal"
            )
    if req.transport is not TransportKind.local:
        raise ConfigError(
            f"--transport {req.transport.value}: hpcenv {verb} runs in the allocation this "
            "shell is in (log in to the site, get one, and run it there)"
        )


def _shell_plan(site: Site, plan: JobPlan, tty: bool) -> JobPlan:
    """The plan with its launch made one interactive ``bash`` on the first node."""
    from hpcenv.jobs.plan import Launch
    from hpcenv.jobs.runtimes.registry import runtime_of

    launch = plan.launch
    if launch is None:
        raise ConfigError("hpcenv shell: the job has no launch step")
    name = site.scheduler.launcher
    if launch.head:  # the container is a launcher option (pyxis, CSCS's EDF): srun carries it
        head = launch.head
    elif name in SHELL_HEAD:
        head = SHELL_HEAD[name]
    else:
        raise ConfigError(f"hpcenv shell: no interactive form for launcher {name!r}")
    if tty and head and head[0] in PTY:
        head = (head[0], PTY[head[0]], *head[1:])
    prefix = runtime_of(site).interactive(launch.prefix, tty) if launch.prefix else ()
    shell = Launch(
        name if head else "",
        tuple(head),
        prefix,
        ("bash",),
        "one interactive shell on the first node",
    )
    steps = []
    for step in plan.steps:
        if step.launch is not None:
            steps.append(replace(step, launch=shell, what="Shell (one task, the first node)."))
            break
        steps.append(step)
    return replace(plan, steps=steps)


def prepare_run(
    req: SubmitRequest, *, shell: bool = False, tty: bool = False, notify: Notify | None = None
) -> InteractiveRun:
    """Plan ``req``'s job as submit does and say where it runs; refuse what cannot run here.

    Outside an allocation only a dry run is answered (it prints how to get one)."""
    from hpcenv.jobs.measured import for_job
    from hpcenv.jobs.render import prepare, render_plan
    from hpcenv.jobs.schedulers import client_env, get_scheduler
    from hpcenv.jobs.service import _ignore, _job_spec, check_here
    from hpcenv.site import load_site

    held: list[str] = []  # notes and warnings, shown unless the run is refused
    tell = held.append
    verb = "shell" if shell else "run"
    _refuse_options(req, verb)
    if shell and req.command:
        raise ConfigError("hpcenv shell takes no command (hpcenv run -- COMMAND runs one)")
    if not shell and not req.command:
        raise ConfigError("hpcenv run: give the command after -- (hpcenv shell opens a shell)")
    site = load_site(req.site)
    if site.scheduler.kind == "none":
        raise ConfigError(f"site {site.name!r} has no batch scheduler (scheduler.kind: none)")
    scheduler = get_scheduler(site.scheduler.kind)
    variable = allocation_variable(scheduler)
    allocation = os.environ.get(variable) or None
    if shell:  # bash in the image: one task (pyxis's and the EDF's srun options kept)
        req = replace(req, command=("bash",), launcher=None, single=True)
    job = _job_spec(req, site, tell)
    check_here(req, site, job, tell)
    measured, warning = for_job(site, job, job.image)
    if warning:
        tell(f"warning: {warning}")
    rendered = prepare(site, job, preview=req.dry_run, measured=measured)
    plan = rendered.plan
    script = rendered.script
    if shell:
        plan = _shell_plan(site, plan, tty)
        script = render_plan(plan)
    allocate = allocate_argv(scheduler, plan)
    env = client_env(site)
    run = InteractiveRun(
        verb,
        site.name,
        scheduler.name,
        variable,
        allocation,
        allocate,
        plan,
        script,
        env,
        rendered.prelude_line(),
    )
    if allocation is None and not req.dry_run:
        from hpcenv.jobs.shell import join

        raise ConfigError(
            f"hpcenv {verb} runs inside an allocation and ${variable} is not set here; get one "
            f"first ({join(allocate)}), then run hpcenv {verb} in it"
        )
    for line in held:
        (notify or _ignore)(line)
    if not req.dry_run:
        from hpcenv.jobs.service import check_chdir, check_local_image

        if job.chdir and not shell:
            check_chdir(job.chdir, tuple(job.command))
        if job.image:
            check_local_image(site, job.image, job.site_mpi, req.force)
    return run


def execute(run: InteractiveRun) -> int:
    """Run the job script with bash here, in the allocation; its exit status.

    The script is written to a private temporary file (0600) and removed after; stdin, stdout
    and stderr are this terminal's, so ``hpcenv shell`` reads what the user types."""
    fd, path = tempfile.mkstemp(prefix=f"hpcenv-{run.verb}-", suffix=".sh")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(run.script)
        env = {**os.environ, **run.env}
        proc = subprocess.Popen(["bash", "-c", run.start, path], env=env)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the terminal sent it to bash too: let the job end
                continue
    finally:
        Path(path).unlink(missing_ok=True)
