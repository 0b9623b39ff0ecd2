"""Apptainer: jobs run a SIF file copied to the path the job reads.

``apptainer exec [--nv|--rocm] --bind ... IMAGE``; the host environment passes by default
(apptainer.org/docs/user/latest/environment_and_metadata.html). The build saves the OCI image and
converts it (``hpcenv.sif``); delivery copies the SIF to ``<scratch>/hpcenv/images/`` (OLCF and
ALCF: images on the project's scratch, read by every node; docs/sites/frontier.md, aurora.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from hpcenv import naming
from hpcenv.errors import EnvironmentProblem
from hpcenv.jobs.runtimes.base import (
    ContainerLaunch,
    ContainerRuntime,
    DeliveryStep,
    Probe,
    RunContext,
    binds,
    injection,
    injection_note,
    scratch,
)
from hpcenv.jobs.shell import expanding
from hpcenv.site import Site


class Apptainer(ContainerRuntime):
    kind: ClassVar[str] = "apptainer"
    image_kind = "sif"
    env_prefix: ClassVar[str] = "APPTAINERENV_"
    fields = frozenset({"binds", "flags", "executable"})
    detect_rank = 10
    probe = Probe(
        ("apptainer", "--version"),
        "install Apptainer (or load the site's module); `make host` runs it in a helper container",
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
        path = naming.site_sif_path(recipe=recipe, site=site.name, scratch=scratch(site))
        return [DeliveryStep("sif-copy" if fmt in ("sif", "both") else "needs-sif", path)]

    def check_local_image(self, site: Site, image: str, *, inject: bool, force: bool) -> None:
        if image.startswith("/") and "$" not in image and not Path(image).is_file():
            raise EnvironmentProblem(
                f"SIF {image} not found; build it first (hpcenv build --site {site.name} "
                "--format sif) or pass --image / --no-container"
            )

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        argv = [expanding(site.runtime.executable or self.kind), "exec", *site.runtime.flags]
        for path in binds(site, ctx):
            argv += ["--bind", expanding(path)]
        argv += ["--pwd", expanding(ctx.workdir), expanding(image)]
        env: dict[str, str] = {}
        notes = []
        inj = injection(site, ctx)
        if inj:
            env[f"{self.env_prefix}LD_LIBRARY_PATH"] = expanding(inj.ld_library_path)
            if inj.preload:
                env[f"{self.env_prefix}LD_PRELOAD"] = expanding(inj.ld_preload)
            if inj.libs:  # single host libraries, bound into the container's library folder
                env[f"{self.kind.upper()}_CONTAINLIBS"] = expanding(",".join(inj.libs))
            notes.append(injection_note(inj))
        return ContainerLaunch(prefix=argv, env=env, notes=notes)


RUNTIME = Apptainer
