"""Launchers: each turns a :class:`Placement` into its own argv (ReFrame's ``command(job)``).

A launcher is one class with ``flags(site, placement)`` (the placement in its own words) and
``per_node(nodes)`` (one task per node, for staging); ``command`` puts its name, flags and the
runtime's launcher options together. Registered by name (``srun``, ``jsrun``, ``mpiexec``,
``mpirun``); an unknown name is a ConfigError. Adding a launcher is one class here.

Nothing else builds launcher flags: the Slurm directives reuse :func:`slurm_shape`, the
benchmark and the smoke suite call :meth:`Mpirun.command`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from hpcenv.errors import ConfigError
from hpcenv.jobs.tuning import Placement, core_ranges
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
    if p.gpus_per_rank:
        shape.append(f"--gpus-per-task={p.gpus_per_rank}")
    return shape


class Launcher(ABC):
    name: ClassVar[str]

    @abstractmethod
    def flags(self, site: Site, p: Placement) -> list[str]:
        """The launcher's options that start ``p.ranks`` ranks placed as ``p`` says."""

    @abstractmethod
    def per_node(self, nodes: int) -> list[str]:
        """argv that runs one task on each of ``nodes`` nodes (staging)."""

    def command(self, site: Site, p: Placement, extra: Sequence[str] = ()) -> list[str]:
        """argv before the program: ``extra`` are a runtime's launcher options (pyxis)."""
        return [self.name, *self.flags(site, p), *site.scheduler.launcher_flags, *extra]

    def one_task(self, extra: Sequence[str]) -> list[str]:
        """argv for one task on one node carrying a runtime's launcher options (pyxis)."""
        if self.name != "srun":
            raise ConfigError(f"{self.name} takes no container options (pyxis needs srun)")
        return ["srun", "--ntasks=1", "--nodes=1", *extra]


class Srun(Launcher):
    name = "srun"

    def flags(self, site: Site, p: Placement) -> list[str]:
        argv = slurm_shape(site, p)
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


class Jsrun(Launcher):
    """IBM jsrun (Summit): one resource set per rank (Spectrum MPI options such as
    ``--smpiargs=...`` come from the site's ``scheduler.launcher_flags``)."""

    name = "jsrun"

    def flags(self, site: Site, p: Placement) -> list[str]:
        argv = ["-n", str(p.ranks), "-r", str(p.ranks_per_node), "-a", "1"]
        argv += ["-c", str(p.cores_per_rank), "-g", str(p.gpus_per_rank)]
        return [*argv, "-b", f"packed:{p.cores_per_rank}"]

    def per_node(self, nodes: int) -> list[str]:
        return ["jsrun", "-n", str(nodes), "-r", "1", "-a", "1", "-c", "1"]


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


class Mpirun(Launcher):
    """Open MPI ``mpirun`` inside an allocation (or on one host: the smoke suite, bench)."""

    name = "mpirun"

    def flags(self, site: Site, p: Placement) -> list[str]:
        if p.ranks_per_socket:
            argv = ["--map-by", f"ppr:{p.ranks_per_socket}:socket:pe={p.cores_per_rank}"]
        else:
            argv = ["--map-by", f"ppr:{p.ranks_per_node}:node:pe={p.cores_per_rank}"]
        argv += ["--bind-to", "none" if p.oversubscribed else "core"]
        if p.oversubscribed:
            argv.append("--oversubscribe")
        return ["-np", str(p.ranks), *argv]

    def per_node(self, nodes: int) -> list[str]:
        return ["mpirun", "-np", str(nodes), "--map-by", "ppr:1:node"]

    @staticmethod
    def unplaced(ranks: int) -> list[str]:
        """``mpirun`` for ``ranks`` ranks with no placement (more ranks than cores allowed)."""
        return ["mpirun", "-np", str(ranks), "--oversubscribe"]


LAUNCHERS: dict[str, type[Launcher]] = {c.name: c for c in (Srun, Jsrun, Mpiexec, Mpirun)}


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]()
    except KeyError:
        raise ConfigError(
            f"unknown launcher {name!r}; known: {', '.join(sorted(LAUNCHERS))}"
        ) from None
