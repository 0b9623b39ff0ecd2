"""NERSC podman-hpc (Perlmutter): build with ``podman-hpc build``, squash with ``migrate``,
run with ``podman-hpc run`` on the compute nodes.

NERSC builds with podman-hpc itself on a login node, so that ``podman-hpc migrate`` finds the
image in podman-hpc's store and squashes it into the store the compute nodes read
(docs.nersc.gov/development/containers/podman-hpc/overview/, "podman-hpc build", "migrate";
NERSC/podman-hpc ``podman_hpc.py``: "Migrate an image to squashed"). ``runtime.flags`` carry
``--gpu``/``--mpi``/``--nccl``, whose modules (NERSC/podman-hpc ``etc/modules.d``) bind the GPU
driver, the site MPI and the NCCL plugin.

``podman-hpc migrate`` exits 0 when it fails: its ``migrate`` command calls
``MigrateUtils.migrate_image`` and then ``sys.exit()`` whatever that returned (podman-hpc 1.2.2,
PyPI, ``podman_hpc/podman_hpc.py`` line 175; ``migrate_image`` returns False on "Image ... not
found" and on a failed mksquashfs, ``migrate2scratch.py``). So the delivery checks what the
compute nodes will see: after the migrate, ``podman-hpc images`` must list the tag read-only (the
squashed store is an additional image store, R/O) with the ID of the image the build made, else
the build fails naming the image.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from functools import partial
from typing import ClassVar

from hpcenv.errors import EnvironmentProblem
from hpcenv.jobs.runtimes.base import (
    ContainerLaunch,
    ContainerRuntime,
    DeliveryStep,
    Probe,
    RunContext,
    injection,
    oci_interactive,
    oci_mpi_env,
    oci_run,
    runtime_flags,
    self_injected,
)
from hpcenv.site import Site

#: ``podman-hpc images`` rows: name, full image ID, whether it is read-only (the squashed store).
IMAGES_FORMAT = "{{.Repository}}:{{.Tag}} {{.Id}} {{.ReadOnly}}"


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
        migrate = ("podman-hpc", "migrate", tag)
        return [DeliveryStep("command", tag, migrate, why, verify=partial(check_migrated, tag))]

    def interactive(self, prefix: Sequence[str], tty: bool) -> tuple[str, ...]:
        return oci_interactive(prefix, tty)

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        cmd = ["podman-hpc", "run", "--rm", *runtime_flags(site, ctx)]
        extra = oci_mpi_env(injection(site, ctx))
        return ContainerLaunch(
            prefix=oci_run(cmd, site, image, ctx, extra), notes=self_injected(site, ctx)
        )


def _names(tag: str) -> set[str]:
    """How ``podman-hpc images`` may print ``tag`` (podman qualifies a bare name as localhost/)."""
    first = tag.split("/", 1)[0]
    bare = "/" not in tag or not ("." in first or ":" in first or first == "localhost")
    return {tag, f"localhost/{tag}"} if bare else {tag}


def check_migrated(tag: str, env: Mapping[str, str], output: str = "") -> None:
    """After ``podman-hpc migrate TAG`` (which exits 0 when it fails; ``output`` is what it
    printed): ``podman-hpc images`` lists ``tag`` read-only, from the squashed store, with the ID
    of the image the build left in the writable store (when that one is listed too). Else
    :class:`EnvironmentProblem` naming the image and migrate's last words."""
    exe = shutil.which("podman-hpc", path=env.get("PATH"))
    if exe is None:
        raise EnvironmentProblem(f"podman-hpc is not on PATH; cannot check the migrate of {tag}")
    argv = [exe, "images", "--format", IMAGES_FORMAT]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            env=dict(env),
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"podman-hpc images did not answer in 300 s; cannot check the migrate of {tag}"
        ) from None
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        raise EnvironmentProblem(
            f"podman-hpc images failed (exit {proc.returncode}) after the migrate of {tag}: "
            f"{last[-1] if last else 'no output'}"
        )
    names = _names(tag)
    squashed: set[str] = set()
    built: set[str] = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in names:
            (squashed if parts[2] == "true" else built).add(parts[1])
    if squashed and (not built or built & squashed):
        return
    found = (
        f"the squashed copy is {', '.join(sorted(i[:12] for i in squashed))}, not the build's "
        f"{', '.join(sorted(i[:12] for i in built))}"
        if squashed
        else "it lists no read-only (squashed) image of that name"
    )
    said = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    raise EnvironmentProblem(
        f"podman-hpc migrate {tag} exited 0 but did not squash {tag}: podman-hpc images: "
        f"{found} (podman-hpc exits 0 when migrate fails); migrate said: "
        f"{said[-1] if said else 'nothing'}"
    )


RUNTIME = PodmanHpc
