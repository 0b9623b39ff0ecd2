"""Launchers: ``command(...) -> argv`` for all ranks, and ``per_node(...)`` for one task per node.

Registered by name (``srun``, ``jsrun``, ``mpiexec``, ``mpirun``); an unknown name is a
ConfigError. Launchers hold no state; they read the site and the tuning.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from hpcenv.errors import ConfigError
from hpcenv.jobs.tuning import LaunchTuning
from hpcenv.site import Site


def pmi_plugin(site: Site) -> str:
    """``srun --mpi=`` value: the site's ``scheduler.mpi_plugin``, else from ``mpi.pmi``."""
    if site.scheduler.mpi_plugin:
        return site.scheduler.mpi_plugin
    pmi = site.mpi.pmi.split("@")[0]
    return {"pmix": "pmix", "pmi2": "pmi2", "cray-pmi": "cray_shasta"}.get(pmi, "none")


class Launcher(ABC):
    name: ClassVar[str]

    @abstractmethod
    def command(self, site: Site, tuning: LaunchTuning, extra: list[str]) -> list[str]:
        """argv that starts ``tuning.ranks`` ranks; ``extra`` are launcher options (pyxis)."""

    @abstractmethod
    def per_node(self, nodes: int) -> list[str]:
        """argv that runs one task on each of ``nodes`` nodes (staging)."""


class Srun(Launcher):
    name = "srun"

    def command(self, site: Site, tuning: LaunchTuning, extra: list[str]) -> list[str]:
        return ["srun", *tuning.srun, f"--mpi={pmi_plugin(site)}", *extra]

    def per_node(self, nodes: int) -> list[str]:
        return [
            "srun",
            f"--nodes={nodes}",
            f"--ntasks={nodes}",
            "--ntasks-per-node=1",
            "--mpi=none",
        ]


class Jsrun(Launcher):
    """IBM jsrun (Summit): one resource set per rank; CUDA-aware Spectrum MPI needs -gpu."""

    name = "jsrun"

    def command(self, site: Site, tuning: LaunchTuning, extra: list[str]) -> list[str]:
        argv = ["jsrun", *tuning.jsrun]
        if site.gpu.vendor == "nvidia" and site.mpi.name == "spectrum-mpi":
            argv.append("--smpiargs=-gpu")
        return [*argv, *extra]

    def per_node(self, nodes: int) -> list[str]:
        return ["jsrun", "-n", str(nodes), "-r", "1", "-a", "1", "-c", "1"]


class Mpiexec(Launcher):
    """PALS/MPICH ``mpiexec`` (Aurora under PBS Pro)."""

    name = "mpiexec"

    def command(self, site: Site, tuning: LaunchTuning, extra: list[str]) -> list[str]:
        return ["mpiexec", *tuning.mpiexec, *extra]

    def per_node(self, nodes: int) -> list[str]:
        return ["mpiexec", "-n", str(nodes), "--ppn", "1"]


class Mpirun(Launcher):
    """Open MPI ``mpirun`` inside an allocation."""

    name = "mpirun"

    def command(self, site: Site, tuning: LaunchTuning, extra: list[str]) -> list[str]:
        return ["mpirun", "-np", str(tuning.ranks), *tuning.openmpi, *extra]

    def per_node(self, nodes: int) -> list[str]:
        return ["mpirun", "-np", str(nodes), "--map-by", "ppr:1:node"]


LAUNCHERS: dict[str, type[Launcher]] = {c.name: c for c in (Srun, Jsrun, Mpiexec, Mpirun)}


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]()
    except KeyError:
        raise ConfigError(
            f"unknown launcher {name!r}; known: {', '.join(sorted(LAUNCHERS))}"
        ) from None
