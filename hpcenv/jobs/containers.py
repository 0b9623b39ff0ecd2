"""Container runtimes: how each rank enters the image, per the site's ``runtime.kind``.

A runtime turns (site, image, context) into a :class:`ContainerLaunch`: options for the launcher
(pyxis), an argv prefix put before the command, and variables to export. The launcher's flags
come from :mod:`hpcenv.jobs.launchers` (one :class:`~hpcenv.jobs.placement.Placement`); a runtime
adds only how a rank enters the image.

Bind-model MPI (:mod:`hpcenv.jobs.bindmodel`): each runtime says the site MPI's injection in its
own words: Apptainer ``--bind``, ``APPTAINERENV_LD_LIBRARY_PATH``/``APPTAINERENV_LD_PRELOAD`` and
``APPTAINER_CONTAINLIBS`` for single host libraries (as OLCF's Frontier examples do); OCI
runtimes ``--volume`` and ``--env``. Runtimes whose own flags inject the site MPI (podman-hpc
``--mpi``, shifter ``--module=mpich``) get nothing added. Hybrid MPI relies on the PMI match
(``srun --mpi=pmix`` + the image's own Open MPI).

``podman`` (site ``local``) starts one rootful container per rank under ``srun --mpi=pmix``. What
makes the image's Open MPI join the host Slurm's PMIx server (measured with Slurm 22.05 + PMIx
4.2 + Open MPI 4.1.4 on both sides):

- ``--network=host``: slurmstepd's PMIx server listens on ``tcp4://127.0.0.1`` (PMIX_SERVER_URI*).
- ``--env PMIX_* --env SLURM_* --env OMPI_*``: the client finds its namespace, rank and server.
- ``--volume=$PMIX_SERVER_TMPDIR``: the server's shared-memory data store (gds ds12/ds21); without
  it clients fall back to slower hash lookups and print ``gds_ds12_lock_pthread.c`` errors.
- ``--user $(id -u):$(id -g)``: PMIx ``native`` security accepts only the job owner's uid, and the
  data store belongs to it. The image's default user ``hpc`` (uid 1000) is refused and Open MPI
  then claims it was "not built with SLURM's PMI support". Rootful podman maps uid 0 to host 0.
- ``--pid=host --ipc=host``: Open MPI's shared-memory BTL (vader) between ranks in different
  containers needs one /dev/shm and peer pids it can see (CMA single-copy); without --pid=host
  the first Allreduce segfaults in ``mca_btl_vader_sendi``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from hpcenv import naming
from hpcenv.errors import ConfigError
from hpcenv.jobs import edf
from hpcenv.jobs.bindmodel import SiteMpi, site_mpi
from hpcenv.jobs.plan import STEPS, StepFile, step_path
from hpcenv.jobs.shell import Expand, expanding
from hpcenv.site import Site

# One container per rank (templates/jobs/podman_rank.sh.j2, a step file of the job): PMIx
# store mounted when the rank runs under a PMIx server; these pass by wildcard there.
PODMAN_RANK_STEP = "podman-rank.sh"
_PODMAN_WILDCARDS = ("PMIX_", "SLURM_", "OMPI_", "HPCENV_")


@dataclass(frozen=True)
class RunContext:
    """What the container must see: host paths to bind, variables to pass, where to start."""

    workdir: str
    binds: list[str] = field(default_factory=list)
    env_names: list[str] = field(default_factory=list)
    inject_site_mpi: bool = True  # bind model: False runs the image's own MPI (a control run)


@dataclass(frozen=True)
class ContainerLaunch:
    launcher_args: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: list[StepFile] = field(default_factory=list)  # written into the steps folder


# Runtime flags that make the runtime inject the site MPI itself (NERSC podman-hpc modules
# mpich/cuda-mpich, NERSC/podman-hpc etc/modules.d, read 2026-11-22; shifter's mpich modules).
_SELF_INJECTING = {
    "podman-hpc": ("--mpi", "--cuda-mpi"),
    "shifter": ("--module=mpich", "--module=cuda-mpich"),
}


def _injection(site: Site, ctx: RunContext) -> SiteMpi | None:
    """The site MPI this runtime must inject (None: hybrid, a control run, or self-injected)."""
    if not ctx.inject_site_mpi:
        return None
    if any(f in _SELF_INJECTING.get(site.runtime.kind, ()) for f in site.runtime.flags):
        return None
    return site_mpi(site)


def _binds(site: Site, ctx: RunContext) -> list[str]:
    paths = [*site.runtime.binds, ctx.workdir, *ctx.binds]
    inj = _injection(site, ctx)
    if inj:
        paths += inj.mounts
    seen: list[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return seen


class ContainerRuntime(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch: ...


RUNTIMES: dict[str, type[ContainerRuntime]] = {}


def register_runtime(cls: type[ContainerRuntime]) -> type[ContainerRuntime]:
    """Class decorator: make ``cls`` known by its ``kind`` (a taken kind is refused). Adding a
    runtime is one class (``tests/test_jobs_render.py`` registers one)."""
    if cls.kind in RUNTIMES and RUNTIMES[cls.kind] is not cls:
        raise ValueError(f"container runtime {cls.kind!r} is already registered")
    RUNTIMES[cls.kind] = cls
    return cls


@register_runtime
class Apptainer(ContainerRuntime):
    """``apptainer exec [--nv|--rocm] --bind ... IMAGE``; host env passes by default."""

    kind = "apptainer"
    env_prefix = "APPTAINERENV_"

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        argv = [expanding(site.runtime.executable or self.kind), "exec", *site.runtime.flags]
        for path in _binds(site, ctx):
            argv += ["--bind", expanding(path)]
        argv += ["--pwd", expanding(ctx.workdir), expanding(image)]
        env: dict[str, str] = {}
        notes = []
        inj = _injection(site, ctx)
        if inj:
            env[f"{self.env_prefix}LD_LIBRARY_PATH"] = expanding(inj.ld_library_path)
            if inj.preload:
                env[f"{self.env_prefix}LD_PRELOAD"] = expanding(inj.ld_preload)
            if inj.libs:  # single host libraries, bound into the container's library folder
                env[f"{self.kind.upper()}_CONTAINLIBS"] = expanding(",".join(inj.libs))
            notes.append(_injection_note(inj))
        return ContainerLaunch(prefix=argv, env=env, notes=notes)


@register_runtime
class Singularity(Apptainer):
    kind = "singularity"
    env_prefix = "SINGULARITYENV_"


# The variable the launcher sets per rank to the GPUs it bound (srun --gpus-per-task with
# --gpu-bind; Aurora's mpiexec --gpu-bind sets ZE_AFFINITY_MASK). Apptainer and the Container
# Engine pass the rank's environment into the image; an OCI runtime (podman, podman-hpc) passes
# only the names it is given, and podman-hpc's --gpu module binds every /dev/nvidia* device and
# passes NVIDIA_VISIBLE_DEVICES alone (NERSC/podman-hpc etc/modules.d/gpu.yaml @ 01b02d6, read
# 2026-11-24): without this name each rank would see all four GPUs of its node.
GPU_VISIBILITY = {
    "nvidia": "CUDA_VISIBLE_DEVICES",
    "amd": "ROCR_VISIBLE_DEVICES",
    "intel": "ZE_AFFINITY_MASK",
}


def gpu_visibility(site: Site) -> str | None:
    """The per-rank GPU visibility variable of ``site``'s GPUs (None: no GPUs)."""
    return GPU_VISIBILITY.get(site.gpu.vendor)


def _oci_run(
    cmd: list[str], site: Site, image: str, ctx: RunContext, extra: list[str] | None = None
) -> list[str]:
    argv = list(cmd)
    inj = _injection(site, ctx)
    for path in [*_binds(site, ctx), *(inj.libs if inj else ())]:
        argv.append(expanding(f"--volume={path}:{path}"))
    argv.append(expanding(f"--workdir={ctx.workdir}"))
    visible = gpu_visibility(site)
    names = [*ctx.env_names, *([visible] if visible and visible not in ctx.env_names else [])]
    argv += [f"--env={name}" for name in names]
    return [*argv, *(extra or []), image]


def _oci_mpi_env(inj: SiteMpi | None) -> list[str]:
    """``--env`` flags that put the site MPI first on the loader path (and preload its GTL)."""
    if not inj:
        return []
    out = [expanding(f"--env=LD_LIBRARY_PATH={inj.ld_library_path}")]
    if inj.preload:
        out.append(expanding(f"--env=LD_PRELOAD={inj.ld_preload}"))
    return out


@register_runtime
class Podman(ContainerRuntime):
    """Rootful podman, one container per rank (see the module docstring for why each flag)."""

    kind = "podman"

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        # PMIX_*, SLURM_*, OMPI_*, HPCENV_* pass by wildcard in the podman-rank.sh step.
        names = [n for n in ctx.env_names if not n.startswith(_PODMAN_WILDCARDS)]
        notes = ["podman per rank: host network/ipc/pid, job owner's uid, PMIx store mounted"]
        inj = _injection(site, ctx)
        extra = _oci_mpi_env(inj)
        if inj:
            # As NERSC podman-hpc's --mpi module: bind the site MPI, put it first on the path.
            notes.append(_injection_note(inj))
        ctx = RunContext(ctx.workdir, ctx.binds, names, ctx.inject_site_mpi)
        cmd = ["bash", step_path(PODMAN_RANK_STEP)]
        return ContainerLaunch(prefix=_oci_run(cmd, site, image, ctx, extra), notes=notes)


def _injection_note(inj: SiteMpi) -> str:
    if inj.model == "site-build":
        return f"site-build model: host {inj.spec} from {inj.root} bound, as the image was built"
    return f"bind model: host {inj.spec} from {inj.root} bound over the image's"


def _self_injected(site: Site, ctx: RunContext) -> list[str]:
    flags = [f for f in site.runtime.flags if f in _SELF_INJECTING.get(site.runtime.kind, ())]
    if not ctx.inject_site_mpi:
        return [f"{site.runtime.kind}: without {' '.join(flags)}: the image keeps its own MPI"]
    if flags and site.mpi.model in ("bind", "site-build"):
        return [f"bind model: {site.runtime.kind} {flags[0]} injects the site's {site.mpi.spec}"]
    return []


def _runtime_flags(site: Site, ctx: RunContext) -> list[str]:
    """The site's runtime flags; without the site-MPI modules where the job keeps the image's
    own MPI (a control run, a framework image)."""
    if ctx.inject_site_mpi:
        return list(site.runtime.flags)
    own = _SELF_INJECTING.get(site.runtime.kind, ())
    return [f for f in site.runtime.flags if f not in own]


@register_runtime
class PodmanHpc(ContainerRuntime):
    """NERSC podman-hpc; ``runtime.flags`` carry ``--mpi``/``--gpu``/``--nccl``, whose modules
    (NERSC/podman-hpc ``etc/modules.d``) bind the site MPI, the GPU driver and the NCCL plugin."""

    kind = "podman-hpc"

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        cmd = ["podman-hpc", "run", "--rm", *_runtime_flags(site, ctx)]
        extra = _oci_mpi_env(_injection(site, ctx))
        return ContainerLaunch(
            prefix=_oci_run(cmd, site, image, ctx, extra), notes=_self_injected(site, ctx)
        )


@register_runtime
class Shifter(ContainerRuntime):
    """NERSC shifter: ``shifter --image=docker:IMAGE [--module=...] --volume=...``."""

    kind = "shifter"

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        ref = image if image.startswith(("docker:", "id:")) else f"docker:{image}"
        argv = ["shifter", f"--image={ref}", *_runtime_flags(site, ctx)]
        inj = _injection(site, ctx)
        for path in [*_binds(site, ctx), *(inj.libs if inj else ())]:
            argv.append(expanding(f"--volume={path}:{path}"))
        return ContainerLaunch(prefix=[*argv, *_oci_mpi_env(inj)], notes=_self_injected(site, ctx))


@register_runtime
class Pyxis(ContainerRuntime):
    """NVIDIA pyxis/enroot: the container is an ``srun`` option, not a command prefix."""

    kind = "pyxis"

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        mounts = ",".join(f"{p}:{p}" for p in _binds(site, ctx))
        args = [f"--container-image={image}", expanding(f"--container-workdir={ctx.workdir}")]
        if mounts:
            args.append(expanding(f"--container-mounts={mounts}"))
        return ContainerLaunch(launcher_args=[*args, *site.runtime.flags])


# The EDF the job writes for the CSCS Container Engine (a step file, hpcenv.jobs.edf).
EDF_STEP = "edf.toml"


def _edf_image(image: str) -> str:
    """The EDF ``image``: a SquashFS path as is (``${VAR}`` syntax), a registry reference in the
    engine's ``[REGISTRY#]IMAGE[:TAG]`` form (cscs-docs ``container-engine/edf.md``)."""
    if image.startswith(("/", "$", "./")):
        return edf.edf_value(image, "image")
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


@register_runtime
class ContainerEngine(ContainerRuntime):
    """CSCS Container Engine (Alps): ``srun --environment=EDF``, enroot + CSCS's pyxis.

    The container is an ``srun`` option, like pyxis; what it runs is an Environment Definition
    File (:mod:`hpcenv.jobs.edf`) that the job writes as a step file: the image, the binds as
    ``mounts``, the work folder as ``workdir``, the job's variables in ``[env]`` (the image's
    own variables would otherwise win over the host's: cscs-docs ``container-engine/edf.md``,
    "variables from the image taking precedence"), and the site's hook annotations
    (``runtime.annotations``: the aws-ofi-nccl hook, which also enables the CXI hook and sets
    NCCL's and libfabric's variables, cscs-docs ``container-engine/resource-hook.md``)."""

    kind = "cscs-ce"

    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch:
        text = edf.edf_text(
            image=_edf_image(image),
            workdir=edf.edf_value(ctx.workdir, "workdir"),
            mounts=[edf.mount(p) for p in _binds(site, ctx)],
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


def get_runtime(kind: str) -> ContainerRuntime:
    try:
        return RUNTIMES[kind]()
    except KeyError:
        raise ConfigError(
            f"unknown container runtime {kind!r}; known: {', '.join(sorted(RUNTIMES))}"
        ) from None


def default_image(site: Site, recipe: str) -> str:
    """The image a site/recipe runs by default (:func:`hpcenv.naming.default_image`: the SIF
    path on SIF runtimes, else the OCI tag hpcenv builds)."""
    scratch = next((f.path for f in site.filesystems if f.purpose == "scratch"), None)
    return naming.default_image(
        recipe=recipe, site=site.name, runtime=site.runtime.kind, scratch=scratch
    )
