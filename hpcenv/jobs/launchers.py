"""Launchers: each turns a :class:`Placement` into its own argv (ReFrame's ``command(job)``).

A launcher is one class with ``flags(site, placement)`` (the placement in its own words) and
``per_node(nodes)`` (one task per node, for staging); ``command`` puts its name, flags, the
site's documented launcher options (``scheduler.launcher_flags``, only for the site's own
launcher: srun's ``--cpu-bind`` or jsrun's ``--smpiargs`` mean nothing to ``mpirun``) and the
runtime's launcher options together. Launchers register by name with
:func:`register_launcher` (``srun``, ``jsrun``, ``mpiexec``, ``mpirun``); an unknown name is a
ConfigError. ``torchrun`` (a job's ``--launcher torchrun``) runs one per node under the site's
launcher. Adding a launcher is one class here (``tests/test_launchers.py`` registers one).

What a job's command may be under a launcher is decided here too: :func:`check_command` refuses a
command that starts a launcher of its own (``torchrun`` under srun: one torchrun per rank), and
:func:`torchrun_runs_python` says whether torchrun runs the command with its Python (a script,
``-m module``) or as a program (``--no-python``).

Nothing else builds a launch line: jobs, smoke, bench and tune all call :func:`launch_argv`;
the Slurm directives reuse :func:`slurm_shape`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from pathlib import PurePosixPath
from typing import ClassVar

from hpcenv.errors import ConfigError
from hpcenv.jobs.placement import Placement, core_ranges
from hpcenv.jobs.shell import Expand
from hpcenv.site import Site


def pmi_plugin(site: Site) -> str:
    """``srun --mpi=`` value: the site's ``scheduler.mpi_plugin``, else from ``mpi.pmi``."""
    if site.scheduler.mpi_plugin:
        return site.scheduler.mpi_plugin
    pmi = site.mpi.pmi.split("@")[0]
    return {"pmix": "pmix", "pmi2": "pmi2", "cray-pmi": "cray_shasta"}.get(pmi, "none")


def slurm_shape(site: Site, p: Placement) -> list[str]:
    """The job shape in Slurm's words, shared by ``#SBATCH`` lines and ``srun``.

    Slurm refuses per-node task/CPU counts beyond the node even with ``-O``, so a forced
    over-subscription asks for tasks only. ``--cpus-per-task`` counts Slurm CPUs: hardware
    threads where the site's Slurm counts them (``scheduler.cpus_per_core``).
    """
    if p.oversubscribed:
        shape = [f"--nodes={p.nodes}", f"--ntasks={p.ranks}", "--overcommit"]
    else:
        shape = [
            f"--nodes={p.nodes}",
            f"--ntasks-per-node={p.ranks_per_node}",
            f"--cpus-per-task={p.cores_per_rank * site.scheduler.cpus_per_core}",
        ]
    if p.gpus_per_rank and p.gpu_bind == "all":
        # Every rank sees the node's GPUs (gpu.visible: node), as NERSC's and CSCS's PyTorch
        # examples ask: --gpus-per-node, no per-task binding.
        shape.append(f"--gpus-per-node={p.gpus_per_rank * p.ranks_per_node}")
    elif p.gpus_per_rank:
        shape.append(f"--gpus-per-task={p.gpus_per_rank}")
    return shape


class Launcher(ABC):
    name: ClassVar[str]
    # The launcher sets torch's RANK/LOCAL_RANK/WORLD_SIZE itself (torchrun); the others get
    # them per rank from the job's rank-env.sh step (hpcenv.jobs.rendezvous).
    sets_ranks: ClassVar[bool] = False

    @abstractmethod
    def flags(self, site: Site, p: Placement) -> list[str]:
        """The launcher's options that start ``p.ranks`` ranks placed as ``p`` says."""

    @abstractmethod
    def per_node(self, nodes: int) -> list[str]:
        """argv that runs one task on each of ``nodes`` nodes (staging)."""

    def command(self, site: Site, p: Placement, extra: Sequence[str] = ()) -> list[str]:
        """argv before the program: ``extra`` are a runtime's launcher options (pyxis)."""
        own = site.scheduler.launcher_flags if site.scheduler.launcher == self.name else []
        return [self.name, *self.flags(site, p), *own, *extra]

    def runner(self, site: Site, p: Placement, command: Sequence[str] = ()) -> list[str]:
        """argv that runs first inside the image, before the user's ``command`` (torchrun)."""
        return []

    def one_task(self, extra: Sequence[str]) -> list[str]:
        """argv for one task on one node carrying a runtime's launcher options (pyxis)."""
        if self.name != "srun":
            raise ConfigError(f"{self.name} takes no container options (pyxis needs srun)")
        return ["srun", "--ntasks=1", "--nodes=1", *extra]


LAUNCHERS: dict[str, type[Launcher]] = {}


def register_launcher(cls: type[Launcher]) -> type[Launcher]:
    """Class decorator: make ``cls`` known by its ``name`` (a taken name is refused)."""
    if cls.name in LAUNCHERS and LAUNCHERS[cls.name] is not cls:
        raise ValueError(f"launcher {cls.name!r} is already registered")
    LAUNCHERS[cls.name] = cls
    return cls


@register_launcher
class Srun(Launcher):
    name = "srun"

    def flags(self, site: Site, p: Placement) -> list[str]:
        argv = slurm_shape(site, p)
        if not p.oversubscribed:
            # A step inherits the batch shell's SLURM_NTASKS (the job's ranks): a step of
            # another shape (torchrun's one task per node) must say its own count.
            argv.insert(1, f"--ntasks={p.ranks}")
        if p.gpu_bind == "closest":
            argv.append("--gpu-bind=closest")
        return [*argv, f"--mpi={pmi_plugin(site)}"]

    def per_node(self, nodes: int) -> list[str]:
        return [
            "srun",
            f"--nodes={nodes}",
            f"--ntasks={nodes}",
            "--ntasks-per-node=1",
            "--mpi=none",
        ]


@register_launcher
class Jsrun(Launcher):
    """IBM jsrun (Summit): one resource set per rank (Spectrum MPI options such as
    ``--smpiargs=...`` come from the site's ``scheduler.launcher_flags``)."""

    name = "jsrun"

    def flags(self, site: Site, p: Placement) -> list[str]:
        if site.scheduler.resource_set == "node":
            # OLCF's deep-learning layout (software/analytics/ibm-wml-ce.rst, olcf-user-docs
            # d900d52^, read 2026-11-24): `jsrun -r1 -g6 -a6 -c42 -bpacked:7`, one resource
            # set per node so that every rank sees all of the node's GPUs.
            rpn = p.ranks_per_node
            argv = ["-n", str(p.ranks // rpn), "-r", "1", "-a", str(rpn)]
            argv += ["-c", str(rpn * p.cores_per_rank), "-g", str(rpn * p.gpus_per_rank)]
            return [*argv, "-b", f"packed:{p.cores_per_rank}"]
        argv = ["-n", str(p.ranks), "-r", str(p.ranks_per_node), "-a", "1"]
        argv += ["-c", str(p.cores_per_rank), "-g", str(p.gpus_per_rank)]
        return [*argv, "-b", f"packed:{p.cores_per_rank}"]

    def per_node(self, nodes: int) -> list[str]:
        return ["jsrun", "-n", str(nodes), "-r", "1", "-a", "1", "-c", "1"]


@register_launcher
class Mpiexec(Launcher):
    """PALS/MPICH ``mpiexec`` (Aurora under PBS Pro): explicit ``--cpu-bind list:``."""

    name = "mpiexec"

    def flags(self, site: Site, p: Placement) -> list[str]:
        argv = ["-n", str(p.ranks), "--ppn", str(p.ranks_per_node)]
        argv += ["--cpu-bind", "list:" + ":".join(core_ranges(d) for d in p.compute_cores)]
        if p.gpu_bind == "list":
            argv += ["--gpu-bind", "list:" + ":".join(",".join(ids) for ids in p.gpu_ids)]
        return argv

    def per_node(self, nodes: int) -> list[str]:
        return ["mpiexec", "-n", str(nodes), "--ppn", "1"]


@register_launcher
class Mpirun(Launcher):
    """Open MPI ``mpirun`` inside an allocation (or on one host: the smoke suite, bench)."""

    name = "mpirun"

    def flags(self, site: Site, p: Placement) -> list[str]:
        return ["-np", str(p.ranks), *self.placement_flags(p)]

    @staticmethod
    def placement_flags(p: Placement) -> list[str]:
        """Where ranks run, without how many (the smoke suite's checks each give ``-np``)."""
        if p.ranks_per_socket:
            argv = ["--map-by", f"ppr:{p.ranks_per_socket}:socket:pe={p.cores_per_rank}"]
        else:
            argv = ["--map-by", f"ppr:{p.ranks_per_node}:node:pe={p.cores_per_rank}"]
        argv += ["--bind-to", "none" if p.oversubscribed else "core"]
        if p.oversubscribed:
            argv.append("--oversubscribe")
        return argv

    def per_node(self, nodes: int) -> list[str]:
        return ["mpirun", "-np", str(nodes), "--map-by", "ppr:1:node"]

    @staticmethod
    def unplaced(ranks: int) -> list[str]:
        """``mpirun`` for ``ranks`` ranks with no placement (more ranks than cores allowed)."""
        return ["mpirun", "-np", str(ranks), "--oversubscribe"]


def per_node(p: Placement) -> Placement:
    """``p`` as one task per node that holds all of that node's ranks' cores and GPUs."""
    cores = tuple(c for d in p.compute_cores for c in d)
    gpus = tuple(g for ids in p.gpu_ids for g in ids)
    return replace(
        p,
        ranks_per_node=1,
        ranks_per_socket=None,
        cores_per_rank=p.cores_per_rank * p.ranks_per_node,
        gpus_per_rank=p.gpus_per_rank * p.ranks_per_node,
        # The task sees all of them (--gpus-per-node): a step's --gpus-per-task beyond the
        # job's per-task count is refused, and a step that names no GPU gets the job's
        # per-task count (one GPU), both measured with Slurm 22.05 on the twins.
        gpu_bind="all" if p.gpus_per_rank else "none",
        gpu_ids=(gpus,) if gpus else (),
        compute_cores=(cores,) if cores else (),
    )


@register_launcher
class Torchrun(Launcher):
    """``torchrun``: one per node, started by the site's own launcher as one task per node
    that holds the node's cores and GPUs, inside the image; it starts ``ranks_per_node``
    workers and sets their ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` itself. The nodes meet at
    the job's ``MASTER_ADDR:MASTER_PORT`` (c10d rendezvous, hpcenv.jobs.rendezvous), the job
    id naming the rendezvous. The command is what a torchrun user types: a script
    (``train.py --arg x``) or ``-m pkg.mod``, run by torchrun with the image's Python, or a
    program (``python3 train.py``, ``./run.sh``), run as given with ``--no-python``: see
    :func:`torchrun_runs_python`.

    As NERSC's "Launchers" page shows (docs.nersc.gov/machinelearning/launchers, read
    2026-11-24); OLCF advises srun over torchrun on Frontier, where torchrun's workers share one
    core unless bound (software/analytics/pytorch_frontier.rst, read 2026-11-24)."""

    name = "torchrun"
    sets_ranks = True

    def _site(self, site: Site) -> Launcher:
        return get_launcher(site.scheduler.launcher)

    def flags(self, site: Site, p: Placement) -> list[str]:
        return self._site(site).flags(site, per_node(p))

    def per_node(self, nodes: int) -> list[str]:
        raise ConfigError("torchrun starts ranks only; staging runs with the site's launcher")

    def command(self, site: Site, p: Placement, extra: Sequence[str] = ()) -> list[str]:
        return self._site(site).command(site, per_node(p), extra)

    def runner(self, site: Site, p: Placement, command: Sequence[str] = ()) -> list[str]:
        argv = [
            "torchrun",
            f"--nnodes={p.nodes}",
            f"--nproc-per-node={p.ranks_per_node}",
            "--rdzv-backend=c10d",
            Expand("--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT"),
            Expand("--rdzv-id=$HPCENV_JOB_ID"),
        ]
        return argv if torchrun_runs_python(command) else [*argv, "--no-python"]


TORCHRUN_MODULE_FLAGS = ("-m", "--module")  # torchrun's flag: the script is a module name


def torchrun_runs_python(command: Sequence[str]) -> bool:
    """Whether torchrun starts ``command`` with its own Python (its default) rather than as a
    program (``--no-python``); the command's first word decides:

    - ``train.py ...`` (a word ending in ``.py``, any path): a script, as torchrun users type
      it (``torchrun ... train.py --arg x``). torchrun's default: each worker runs
      ``python -u train.py ...`` with the interpreter torchrun itself runs under (the image's;
      ``PYTHON_EXEC`` overrides it).
    - ``-m pkg.mod ...`` (or ``--module``): torchrun's own flag, given before the module name:
      each worker runs ``python -u -m pkg.mod ...``. torchrun refuses it with ``--no-python``.
    - anything else is a program, run as given with ``--no-python`` (no Python put in front):
      ``python3 train.py``, ``/opt/venv/bin/python3 x.py``, ``./run.sh``, ``bash -c ...``; the
      same command as under the site's launcher.

    torchrun's arguments: pytorch.org/docs/stable/elastic/run.html (``torchrun --help``:
    ``training_script``, ``-m``/``--module``, ``--no-python``) and, for what a worker runs,
    ``config_from_args`` in torch/distributed/run.py (torch 2.13, read 2026-11-28). No command
    (a staging-only job): a program."""
    if not command:
        return False
    first = command[0]
    return first in TORCHRUN_MODULE_FLAGS or first.endswith(".py")


# Programs that start ranks themselves, besides the registered launchers (LAUNCHERS): as a
# job's command under a launcher, every rank (or torchrun worker) would start its own set.
# Debian's alternatives carry the MPI's name (mpirun.openmpi, mpiexec.hydra).
_OTHER_LAUNCHERS = re.compile(r"horovodrun|(mpirun|mpiexec)\.(openmpi|mpich|hydra)")
_PYTHON = re.compile(r"python[0-9.]*")
_TORCH_LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_PYTHON_TAKES_VALUE = ("-W", "-X")


def _python_module(args: Sequence[str]) -> tuple[str, int] | None:
    """The module ``python ARGS`` runs (``-m mod``, ``-mmod``) and how many of ``args`` up to
    and including its name, if any (options before it skipped; a script or ``-c``: none)."""
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "-m":
            return (args[i + 1], i + 2) if i + 1 < len(args) else None
        elif arg.startswith("-m"):
            return arg[2:], i + 1
        elif arg in _PYTHON_TAKES_VALUE:
            skip = True
        elif arg == "-c" or not arg.startswith("-"):
            return None
    return None


def command_launcher(command: Sequence[str]) -> str | None:
    """The rank launcher ``command`` starts with, as the user wrote it, if any: a launcher
    program by name or path (a registered launcher, ``srun``, ``/opt/venv/bin/torchrun``; or
    ``horovodrun``, ``mpirun.openmpi``), ``python3 -m torch.distributed.run`` (torchrun's
    module; ``.launch``, its predecessor), or that module after torchrun's own ``-m``."""
    if not command:
        return None
    first = command[0]
    program = PurePosixPath(first).name
    if program in LAUNCHERS or _OTHER_LAUNCHERS.fullmatch(program):
        return first
    if first in TORCHRUN_MODULE_FLAGS and len(command) > 1:
        found: tuple[str, int] | None = (command[1], 1)
    elif _PYTHON.fullmatch(program):
        found = _python_module(command[1:])
    else:
        return None
    if found is None or found[0] not in _TORCH_LAUNCH_MODULES:
        return None
    return " ".join(command[: found[1] + 1])


def check_command(command: Sequence[str], launcher: str | None) -> None:
    """Refuse a ``command`` that cannot run under ``launcher`` (a job's ``--launcher``; None:
    the site's), every rank starting it, in one line that says what to give instead:

    - a command that starts a launcher (:func:`command_launcher`): each rank would start ranks
      of its own (``srun ... torchrun train.py`` is what ``--launcher torchrun`` renders);
    - ``-m`` first, torchrun's own module flag: only under ``--launcher torchrun``, and with a
      module name after it."""
    torchrun = launcher == "torchrun"
    under = "--launcher torchrun" if torchrun else launcher or "the site's launcher"
    if command and command[0] in TORCHRUN_MODULE_FLAGS:
        if not torchrun:
            raise ConfigError(
                f"`{command[0]}` first runs a module only under --launcher torchrun: give "
                f"--launcher torchrun, or `python3 -m MODULE` under {under}"
            )
        if len(command) < 2:
            raise ConfigError(f"`{command[0]}` needs a module name after it: -- -m pkg.mod")
    found = command_launcher(command)
    if found is None:
        return
    program = PurePosixPath(found.split()[0]).name
    size = "hpcenv starts the ranks: give -N/--nodes and --ranks-per-node"
    if program == "torchrun" or "torch.distributed" in found:
        if torchrun:
            why = "a torchrun in every worker of --launcher torchrun"
            instead = "drop it (--launcher torchrun starts one per node)"
        else:
            why = f"one torchrun per rank under {under}"
            instead = "drop it and give --launcher torchrun"
    elif torchrun:
        why = f"one {program} in every worker of --launcher torchrun"
        instead = f"drop it and --launcher torchrun ({size})"
    else:
        why = f"one {program} per rank under {under}"
        instead = f"drop it ({size})"
    raise ConfigError(f"`{found}` in the command would start {why}: {instead}")


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]()
    except KeyError:
        raise ConfigError(
            f"unknown launcher {name!r}; known: {', '.join(sorted(LAUNCHERS))}"
        ) from None


def launch_argv(
    site: Site, placement: Placement, *, launcher: str | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """The one builder of rank-launch lines: ``launcher`` (default: the site's) starting the
    placement's ranks, with ``extra`` runtime options. Jobs (the plan's launch), smoke, bench
    and tune (``mpirun`` inside one image) all call it; what runs inside the image before the
    command (torchrun) is :meth:`Launcher.runner`."""
    return get_launcher(launcher or site.scheduler.launcher).command(site, placement, extra)
