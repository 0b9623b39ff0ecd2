"""The job plan: one typed description of a job, which ``templates/jobs/job.sh.j2`` only prints.

The image side goes site + recipe -> resolver -> lock -> blocks -> emitters; the job side goes
site + :class:`~hpcenv.jobs.spec.JobSpec` -> :func:`hpcenv.jobs.render.plan_job` -> :class:`JobPlan`
-> the job script. A plan holds everything the script does, as data:

- the scheduler's directives and the site's module and prelude lines;
- one :class:`~hpcenv.jobs.placement.Placement` (where the ranks run);
- the environment as :class:`EnvVar` items, each with the layer it came from (placement, site MPI,
  site environment, measured collective tuning, job, container runtime, host), later layers winning;
- the paths (work folder, node-local folder, staged data, output, image);
- the step files the job writes into its steps folder (``$HPCENV_STEPS``): shipped shell scripts
  that take arguments (stage-in, the bind-model preflight, the per-rank podman wrapper, stitch,
  stage-out), the step library those of them that need it source (:data:`LIBRARY`, written
  once per job), and data files (measured Open MPI rules);
- the ordered steps, each an argv (:class:`~hpcenv.jobs.shell.Expand` items keep their variables),
  the launch among them as a :class:`Launch` (launcher argv, container prefix, the user's command).

The script opens, after the scheduler's directives, with :meth:`JobPlan.summary` (nodes, ranks,
devices per rank, image, data in and out, walltime), for the person who reviews it before
spending an allocation. ``hpcenv submit --dry-run --json`` prints :meth:`JobPlan.to_dict`;
tests assert on plan data, as Spack's container tests assert on context properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hpcenv.jobs.placement import Placement
from hpcenv.jobs.shell import Expand, command_arg, join, q

STEPS = "$HPCENV_STEPS"  # the job's steps folder, as the job script names it
LIBRARY = "lib.sh"  # the step library: one step file per job, sourced by the steps that use it


def step_path(name: str) -> str:
    """A step file's path as an argv item that expands in the job (and on every rank)."""
    return Expand(f"{STEPS}/{name}")


# Where an environment variable's value came from, in the order the layers apply.
EnvSource = Literal[
    "placement",
    "site-mpi",
    "site-environment",
    "site-cache",
    "measured-tuning",
    "rendezvous",
    "job",
    "runtime",
    "host",
]
StepKind = Literal["stage-in", "preflight", "launch", "stitch", "stage-out"]


@dataclass(frozen=True)
class EnvVar:
    """One exported variable; ``expands``: hpcenv wrote ``${...}`` in it to expand in the job."""

    name: str
    value: str
    source: EnvSource
    expands: bool = False

    def quoted(self) -> str:
        return f'"{self.value}"' if self.expands else q(self.value)

    @property
    def runs(self) -> bool:
        """Its value runs a command (``$(...)``): assigned before it is exported, so that a
        failing command fails the job (``export X="$(...)"`` would hide it)."""
        return self.expands and "$(" in self.value


@dataclass(frozen=True)
class StepFile:
    """A file the job writes into its steps folder before the steps run (a quoted heredoc)."""

    name: str
    text: str
    what: str
    sources: tuple[str, ...] = ()  # step files it sources from its own folder (LIBRARY)

    @property
    def marker(self) -> str:
        """The heredoc's end marker: ``stage-in.sh`` -> ``HPCENV_STAGE_IN``."""
        stem = self.name.split(".")[0]
        return "HPCENV_" + stem.upper().replace("-", "_")


@dataclass(frozen=True)
class Launch:
    """The rank launch: launcher argv, the per-rank step on the node (``rank-env.sh``: torch's
    env:// names), the runtime's per-rank prefix, what runs first inside the image (torchrun),
    then the user's command."""

    launcher: str
    head: tuple[str, ...]
    prefix: tuple[str, ...]
    command: tuple[str, ...]
    what: str
    rank_step: tuple[str, ...] = ()
    runner: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        """argv before quoting: Expand items name variables, command items may hold
        ``{data}``-style placeholders."""
        return [*self.head, *self.rank_step, *self.prefix, *self.runner, *self.command]

    def line(self) -> str:
        parts = (
            join(self.head),
            join(self.rank_step),
            join(self.prefix),
            join(self.runner),
            " ".join(command_arg(a) for a in self.command),
        )
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class Step:
    """One ordered step of the job: what it does (a comment) and its command."""

    kind: StepKind
    what: str
    argv: tuple[str, ...] = ()
    launch: Launch | None = None
    makes_output: bool = False  # mkdir -p "$HPCENV_OUTPUT" before it runs

    def line(self) -> str:
        return self.launch.line() if self.launch else join(self.argv)


@dataclass(frozen=True)
class JobPaths:
    """Where the job keeps its things. ``workdir``: hpcenv's own (the steps folder ``.hpcenv``,
    logs, default output); ``chdir``: where the launch runs and the container starts, the
    folder ``submit`` was called from by default (Slurm's default), exported as
    ``$HPCENV_CHDIR`` (None: the workdir). Staged data is found through ``$HPCENV_DATA``;
    ``data_source`` is where stage-in copies it from, ``output_dest`` where stage-out
    publishes ``output``."""

    workdir: str
    chdir: str | None = None
    node_local: str | None = None
    data: str | None = None
    output: str | None = None
    image: str | None = None
    data_source: str | None = None
    output_dest: str | None = None


@dataclass(frozen=True)
class JobPlan:
    """Everything one job script does, in order (see the module docstring)."""

    site: str
    name: str
    scheduler: str
    launcher: str
    runtime: str
    mpi: str
    directives: list[str]
    modules: list[str]
    prelude: list[tuple[str, str]]
    job_id_expr: str
    placement: Placement
    paths: JobPaths
    environment: list[EnvVar]
    files: list[StepFile]
    steps: list[Step]
    notes: list[str] = field(default_factory=list)
    task_id_expr: str | None = None
    task_count: int = 0
    node_local_setup: tuple[str, ...] = ()  # argv that makes the node-local folder (every node)
    node_local_cleanup: tuple[str, ...] = ()  # argv that removes it when the job ends
    modules_purge: bool = False  # `module purge` before `module load` (site modules_purge)
    modules_unload: list[str] = field(default_factory=list)  # after `module load`
    setup: list[str] = field(default_factory=list)  # site scripts sourced before the steps
    cache_dirs: list[str] = field(default_factory=list)  # shared cache folders, made before launch
    walltime: str = ""  # the time limit the directives ask for
    device: str = "GPU"  # what a rank's GPUs are: GPUs, or tiles of one (node.gpu_tiles)

    @property
    def launch(self) -> Launch | None:
        return next((s.launch for s in self.steps if s.launch), None)

    def summary(self) -> list[str]:
        """What the job spends and moves, one line each, for the person about to submit it:
        the script opens with these lines as comments, right after the scheduler's directives
        (which must come first for the scheduler to read them)."""
        p, launch, paths = self.placement, self.launch, self.paths
        by = f", by {launch.launcher}" if launch and launch.launcher else ""
        ranks = f" ({launch.what}{by})" if launch else ""
        image = f"{paths.image} ({self.runtime}; {self.mpi})" if paths.image else None
        lines = [
            f"hpcenv job {self.name} on {self.site} ({self.scheduler}):",
            f"  nodes     {p.nodes}{ranks}",
            f"  per rank  {p.cores_per_rank} cores, {self._gpus_per_rank()}",
            f"  image     {image or f'none, on the host ({self.mpi})'}",
        ]
        if paths.data_source:
            lines.append(f"  data in   {paths.data_source} -> {paths.data}, verified")
        if paths.output:
            dest = f" -> {paths.output_dest}, verified" if paths.output_dest else ""
            lines.append(f"  data out  {paths.output}{dest}")
        lines.append(f"  walltime  {self.walltime}")
        if launch is not None:
            lines.append(f"  command   {' '.join(command_arg(a) for a in launch.command)}")
        return lines

    def _gpus_per_rank(self) -> str:
        p = self.placement
        if not p.gpus_per_rank:
            return "the node's GPUs, shared and unbound" if p.gpu_bind == "shared" else "no GPU"
        count = f"{p.gpus_per_rank} {self.device}{'s' if p.gpus_per_rank > 1 else ''}"
        bound = {
            "closest": "bound closest",
            "list": "bound by list",
            "mask": "bound by ZE_AFFINITY_MASK",
        }.get(p.gpu_bind)
        return f"{count} ({bound})" if bound else count

    def env(self) -> dict[str, str]:
        return {v.name: v.value for v in self.environment}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``submit --dry-run --json`` prints under ``plan``."""
        launch = self.launch
        return {
            "site": self.site,
            "name": self.name,
            "scheduler": self.scheduler,
            "launcher": self.launcher,
            "runtime": self.runtime,
            "mpi": self.mpi,
            "directives": self.directives,
            "modules": self.modules,
            "modules_purge": self.modules_purge,
            "modules_unload": self.modules_unload,
            "setup": self.setup,
            "cache_dirs": self.cache_dirs,
            "prelude": dict(self.prelude),
            "placement": self.placement.to_dict(),
            "paths": {
                "workdir": self.paths.workdir,
                "chdir": self.paths.chdir or self.paths.workdir,
                "node_local": self.paths.node_local,
                "data": self.paths.data,
                "output": self.paths.output,
                "image": self.paths.image,
                "data_source": self.paths.data_source,
                "output_dest": self.paths.output_dest,
                "steps": "$HPCENV_WORKDIR/.hpcenv/$HPCENV_JOB_ID",
            },
            "walltime": self.walltime,
            "summary": self.summary(),
            "environment": [
                {"name": v.name, "value": v.value, "source": v.source} for v in self.environment
            ],
            "files": [{"name": f.name, "what": f.what} for f in self.files],
            "steps": [{"kind": s.kind, "what": s.what, "command": s.line()} for s in self.steps],
            "launch": None
            if launch is None
            else {
                "launcher": launch.launcher,
                "argv": launch.argv,
                "launcher_argv": list(launch.head),
                "rank_step": list(launch.rank_step),
                "container_prefix": list(launch.prefix),
                "runner": list(launch.runner),
                "command": list(launch.command),
            },
            "array": {"count": self.task_count} if self.task_id_expr else None,
            "notes": self.notes,
        }
