"""Rootful podman, one container per rank (the ``local`` sites and the rehearsals).

The job runs the image from this host's podman storage, where ``hpcenv build`` left it. Each rank
starts one container under ``srun --mpi=pmix`` through the ``podman-rank.sh`` step
(templates/jobs/podman_rank.sh.j2). What makes the image's Open MPI join the host Slurm's PMIx
server (measured with Slurm 22.05 + PMIx 4.2 + Open MPI 4.1.4 on both sides):

- ``--network=host``: slurmstepd's PMIx server listens on ``tcp4://127.0.0.1`` (PMIX_SERVER_URI*).
- ``--env PMIX_* --env SLURM_* --env OMPI_*``: the client finds its namespace, rank and server.
- ``--volume=$PMIX_SERVER_TMPDIR``: the server's shared-memory data store (gds ds12/ds21); without
  it clients fall back to slower hash lookups and print ``gds_ds12_lock_pthread.c`` errors.
- ``--preserve-fds=1`` and ``PMI_FD=3`` under ``srun --mpi=pmi2`` (a site whose MPI takes
  PMI-2 only, such as PyPI's MPICH 5 wheel): the rank's PMI-2 client talks over the descriptor
  slurmstepd left open (``PMI_FD``); podman passes descriptors from 3 up only, so the wrapper
  moves it to 3 first, as NERSC's podman-hpc does (its ``pmi_fd()``, podman-hpc 1.2.2).
- ``--user $(id -u):$(id -g)``: PMIx ``native`` security accepts only the job owner's uid, and the
  data store belongs to it. The image's default user ``hpc`` (uid 1000) is refused and Open MPI
  then claims it was "not built with SLURM's PMI support". Rootful podman maps uid 0 to host 0.
- ``--pid=host --ipc=host``: Open MPI's shared-memory BTL (vader) between ranks in different
  containers needs one /dev/shm and peer pids it can see (CMA single-copy); without --pid=host
  the first Allreduce segfaults in ``mca_btl_vader_sendi``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar

from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.jobs.plan import step_path
from hpcenv.jobs.runtimes.base import (
    ContainerLaunch,
    ContainerRuntime,
    Probe,
    RunContext,
    injection,
    injection_note,
    oci_interactive,
    oci_mpi_env,
    oci_run,
)
from hpcenv.site import Site

#: The per-rank wrapper the job writes into its steps folder (a shipped step template).
RANK_STEP = "podman-rank.sh"
# PMIX_*, SLURM_*, OMPI_*, PMI_*, HPCENV_* pass by wildcard in the podman-rank.sh step.
_WILDCARDS = ("PMIX_", "SLURM_", "OMPI_", "PMI_", "HPCENV_")


class Podman(ContainerRuntime):
    kind: ClassVar[str] = "podman"
    runs_local_podman_images = True
    detect_rank = 90
    probe = Probe(("podman", "--version"), "`make host` installs podman and runc (apt)")

    def image_identity(self, image: str) -> str | None:
        from hpcenv.engines import get_engine

        return get_engine(self.kind).find_image_id(image)

    def check_local_image(self, site: Site, image: str, *, inject: bool, force: bool) -> None:
        """The image is in this host's podman storage, and its MPI takes the site's (bind
        model; ``force`` leaves that to the job's preflight)."""
        from hpcenv.engines import get_engine
        from hpcenv.jobs.bindmodel import image_mismatch

        engine = get_engine("podman")
        if not engine.image_exists(image):
            raise EnvironmentProblem(
                f"image {image} not found in local podman storage; build it first "
                f"(hpcenv build --site {site.name} --recipe ...) or pass --image / --no-container"
            )
        if inject and not force and site.mpi.model in ("bind", "site-build"):
            raw = engine.labels(image).get("io.hpcenv.lock")
            why = image_mismatch(site, image, json.loads(raw)) if raw else None
            if why:
                raise ConfigError(why)

    def interactive(self, prefix: Sequence[str], tty: bool) -> tuple[str, ...]:
        return oci_interactive(prefix, tty)

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        names = [n for n in ctx.env_names if not n.startswith(_WILDCARDS)]
        notes = ["podman per rank: host network/ipc/pid, job owner's uid, PMIx store mounted"]
        inj = injection(site, ctx)
        extra = oci_mpi_env(inj)
        if inj:
            # As NERSC podman-hpc's --mpi module: bind the site MPI, put it first on the path.
            notes.append(injection_note(inj))
        ctx = RunContext(ctx.workdir, ctx.binds, names, ctx.inject_site_mpi)
        cmd = ["bash", step_path(RANK_STEP)]
        return ContainerLaunch(
            prefix=oci_run(cmd, site, image, ctx, extra),
            notes=notes,
            steps=[(RANK_STEP, "the per-rank podman wrapper")],
            host_env=_host_conf(),
        )


def _host_conf() -> dict[str, str]:
    """What this host's podman needs to run (hpcenv.hostconf: containers.conf for runc and the
    ulimits root may not raise), by variable name."""
    from hpcenv.hostconf import podman_conf

    return dict(podman_conf().env)


RUNTIME = Podman
