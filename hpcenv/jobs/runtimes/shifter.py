"""NERSC Shifter: ``shifter --image=docker:IMAGE [--module=...] --volume=...``.

Shifter pulls images from a registry on its own side (``shifterimg pull``;
docs.nersc.gov/development/containers/shifter/how-to-use/): a build for it must push, so the
delivery is ``podman push`` to the ``--push`` reference, and the job runs that reference.
"""

from __future__ import annotations

from typing import ClassVar

from hpcenv.errors import ConfigError
from hpcenv.jobs.runtimes.base import (
    ContainerLaunch,
    ContainerRuntime,
    DeliveryStep,
    Probe,
    RunContext,
    binds,
    injection,
    oci_mpi_env,
    runtime_flags,
    self_injected,
)
from hpcenv.jobs.shell import expanding
from hpcenv.site import Site


class Shifter(ContainerRuntime):
    kind: ClassVar[str] = "shifter"
    detect_rank = 40
    probe = Probe(
        ("shifter", "--help"), "Shifter is installed by the site (NERSC); load its module"
    )

    def delivery(
        self,
        site: Site,
        recipe: str,
        tag: str,
        fmt: str,
        engine: str = "podman",
        pushed: str | None = None,
    ) -> list[DeliveryStep]:
        if pushed:  # the push is the whole delivery: the job runs that reference
            return []
        raise ConfigError(
            f"site {site.name} runs shifter, which pulls images from a registry: "
            "give --push REGISTRY/NAME:TAG"
        )

    def default_image(self, site: Site, recipe: str) -> str:
        from hpcenv import naming

        return naming.image_tag(recipe=recipe, site=site.name)  # give --image REF after --push

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        ref = image if image.startswith(("docker:", "id:")) else f"docker:{image}"
        argv = ["shifter", f"--image={ref}", *runtime_flags(site, ctx)]
        inj = injection(site, ctx)
        for path in [*binds(site, ctx), *(inj.libs if inj else ())]:
            argv.append(expanding(f"--volume={path}:{path}"))
        return ContainerLaunch(prefix=[*argv, *oci_mpi_env(inj)], notes=self_injected(site, ctx))


RUNTIME = Shifter
