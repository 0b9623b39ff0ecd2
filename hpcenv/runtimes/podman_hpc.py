"""NERSC podman-hpc (Perlmutter): build with ``podman-hpc build``, squash with ``migrate``,
run with ``podman-hpc run`` on the compute nodes.

NERSC builds with podman-hpc itself on a login node, so that ``podman-hpc migrate`` finds the
image in podman-hpc's store and squashes it into the store the compute nodes read
(docs.nersc.gov/development/containers/podman-hpc/overview/, "podman-hpc build", "migrate";
NERSC/podman-hpc ``podman_hpc.py``: "Migrate an image to squashed"). ``runtime.flags`` carry
``--gpu``/``--mpi``/``--nccl``, whose modules (NERSC/podman-hpc ``etc/modules.d``) bind the GPU
driver, the site MPI and the NCCL plugin.
"""

from __future__ import annotations

from typing import ClassVar

from hpcenv.runtimes.base import (
    ContainerLaunch,
    ContainerRuntime,
    DeliveryStep,
    Probe,
    RunContext,
    injection,
    oci_mpi_env,
    oci_run,
    runtime_flags,
    self_injected,
)
from hpcenv.site import Site


class PodmanHpc(ContainerRuntime):
    kind: ClassVar[str] = "podman-hpc"
    runs_local_podman_images = True
    detect_rank = 30
    probe = Probe(
        ("podman-hpc", "--help"),
        "podman-hpc is NERSC's wrapper (Perlmutter login and compute nodes; PyPI podman-hpc); "
        "on other systems pick the site's own runtime",
    )

    def build_engine(self, site: Site) -> str:
        return "podman-hpc"

    def image_identity(self, image: str) -> str | None:
        from hpcenv.engines import get_engine

        return get_engine(self.kind).find_image_id(image)

    def delivery(
        self,
        site: Site,
        recipe: str,
        tag: str,
        fmt: str,
        engine: str = "podman",
        pushed: str | None = None,
    ) -> list[DeliveryStep]:
        why = "compute nodes read the squashed store"
        return [DeliveryStep("command", tag, ("podman-hpc", "migrate", tag), why)]

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        cmd = ["podman-hpc", "run", "--rm", *runtime_flags(site, ctx)]
        extra = oci_mpi_env(injection(site, ctx))
        return ContainerLaunch(
            prefix=oci_run(cmd, site, image, ctx, extra), notes=self_injected(site, ctx)
        )


RUNTIME = PodmanHpc
