"""NVIDIA pyxis/enroot: the container is an ``srun`` option (``--container-image``), not a
command prefix (github.com/NVIDIA/pyxis, "Usage"). Pyxis is a Slurm SPANK plugin, so ``srun
--help`` lists its options where it is installed."""

from __future__ import annotations

from typing import ClassVar

from hpcenv.jobs.runtimes.base import ContainerLaunch, ContainerRuntime, Probe, RunContext, binds
from hpcenv.jobs.shell import expanding
from hpcenv.site import Site


class Pyxis(ContainerRuntime):
    kind: ClassVar[str] = "pyxis"
    probe = Probe(
        ("srun", "--help"),
        "pyxis is a Slurm SPANK plugin installed by the site (srun --container-image)",
        expect="--container-image",
    )

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        mounts = ",".join(f"{p}:{p}" for p in binds(site, ctx))
        args = [f"--container-image={image}", expanding(f"--container-workdir={ctx.workdir}")]
        if mounts:
            args.append(expanding(f"--container-mounts={mounts}"))
        return ContainerLaunch(launcher_args=[*args, *site.runtime.flags])


RUNTIME = Pyxis
