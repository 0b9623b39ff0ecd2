"""CSCS Container Engine (Alps): ``srun --environment=EDF``, enroot + CSCS's pyxis.

Delivery, as CSCS's container guide builds an image for the engine (cscs-docs
``build-install/containers.md`` and the Gemma-7B "LLM inference" tutorial under
``docs/tutorials/ml/``, read 2026-11-28): podman builds on a compute node with its storage in ``/dev/shm`` (tmpfs, gone
when the allocation ends), so in the same allocation the image is imported with
``enroot import -x mount -o FILE.sqsh podman://IMAGE`` into a folder on scratch striped with
CSCS's recommended Lustre layout (``lfs setstripe -E 4M -c 1 -E 64M -c 4 -E -1 -c -1 -S 4M``).
hpcenv imports to ``FILE.sqsh.partial`` and renames, so a job never reads half a file. The job's
EDF names that file: the job runs exactly what the delivery made.

The container is an ``srun`` option, like pyxis; what it runs is an Environment Definition File
(:mod:`hpcenv.jobs.edf`) that the job writes as a step file: the image, the binds as ``mounts``,
the work folder as ``workdir``, the job's variables in ``[env]`` (the image's own variables
would otherwise win over the host's: cscs-docs ``container-engine/edf.md``, "variables from the
image taking precedence"), and the site's hook annotations (``runtime.annotations``: the
aws-ofi-nccl hook, which also enables the CXI hook and sets NCCL's and libfabric's variables,
cscs-docs ``container-engine/resource-hook.md``).
"""

from __future__ import annotations

import posixpath
from typing import ClassVar

from hpcenv import naming
from hpcenv.jobs import edf
from hpcenv.jobs.plan import STEPS, StepFile
from hpcenv.jobs.runtimes.base import (
    ContainerLaunch,
    ContainerRuntime,
    DeliveryStep,
    Probe,
    RunContext,
    binds,
    scratch,
)
from hpcenv.jobs.shell import Expand
from hpcenv.site import Site

#: The EDF every ``srun --environment`` step of the job reads (a step file).
EDF_STEP = "edf.toml"
#: CSCS's recommended layout for a folder of container images (cscs-docs, "Container image
#: directory with recommended LUSTRE settings").
STRIPE = ("-E", "4M", "-c", "1", "-E", "64M", "-c", "4", "-E", "-1", "-c", "-1", "-S", "4M")


def edf_image(image: str) -> str:
    """The EDF ``image``: a SquashFS path as is (``${VAR}`` syntax), a registry reference in the
    engine's ``[REGISTRY#]IMAGE[:TAG]`` form (cscs-docs ``container-engine/edf.md``)."""
    if image.startswith(("/", "$", "./")):
        return edf.edf_value(image, "image")
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


class ContainerEngine(ContainerRuntime):
    kind: ClassVar[str] = "cscs-ce"
    image_kind = "sqsh"
    fields = frozenset({"binds", "flags", "annotations"})
    probe = Probe(
        ("enroot", "version"),
        "the Container Engine (enroot + CSCS's pyxis) is on Alps' compute nodes; build and "
        "import there, in one allocation (srun --pty bash)",
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
        sqsh = naming.site_sqsh_path(recipe=recipe, site=site.name, scratch=scratch(site))
        folder = posixpath.dirname(sqsh)
        partial = f"{sqsh}.partial"
        return [
            DeliveryStep("command", folder, ("mkdir", "-p", folder), "the images folder"),
            DeliveryStep(
                "command",
                folder,
                ("lfs", "setstripe", *STRIPE, folder),
                "CSCS's Lustre layout for container images",
            ),
            DeliveryStep(
                "command",
                partial,
                ("enroot", "import", "-x", "mount", "-o", partial, f"podman://{tag}"),
                "in the build's allocation: its podman storage in /dev/shm goes with it",
            ),
            DeliveryStep(
                "command", sqsh, ("mv", "-f", partial, sqsh), "the EDF's image, whole or not at all"
            ),
        ]

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        text = edf.edf_text(
            image=edf_image(image),
            workdir=edf.edf_value(ctx.workdir, "workdir"),
            mounts=[edf.mount(p) for p in binds(site, ctx)],
            env={name: f"${{{name}:-}}" for name in ctx.env_names},
            annotations=site.runtime.annotations,
        )
        what = "the Container Engine environment (EDF) every srun --environment step reads"
        hooks = ", ".join(f"{k}={v}" for k, v in site.runtime.annotations.items()) or "none"
        return ContainerLaunch(
            launcher_args=[Expand(f"--environment={STEPS}/{EDF_STEP}")],
            files=[StepFile(EDF_STEP, text, what)],
            notes=[f"CSCS Container Engine: srun --environment=<EDF>; hooks: {hooks}"],
        )


RUNTIME = ContainerEngine
