"""What every container runtime owns, and the parts runtimes share.

A runtime turns a site and a recipe into: the image a job runs (:meth:`ContainerRuntime.default_image`,
which is by construction the output of its last delivery step), the steps that make that image from
a build (:meth:`ContainerRuntime.delivery`), and how each rank enters it
(:meth:`ContainerRuntime.launch` -> :class:`ContainerLaunch`: options for the launcher, an argv
prefix, variables, step files). Its doctor probe and host detection are data (:class:`Probe`).

Bind-model MPI (:mod:`hpcenv.jobs.bindmodel`): each runtime says the site MPI's injection in its
own words: Apptainer ``--bind``, ``APPTAINERENV_LD_LIBRARY_PATH``/``APPTAINERENV_LD_PRELOAD`` and
``APPTAINER_CONTAINLIBS`` for single host libraries (as OLCF's Frontier examples do); OCI
runtimes ``--volume`` and ``--env``. Runtimes whose own flags inject the site MPI (podman-hpc
``--mpi``, shifter ``--module=mpich``) get nothing added. Hybrid MPI relies on the PMI match
(``srun --mpi=pmix`` + the image's own Open MPI).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from hpcenv import naming
from hpcenv.jobs.bindmodel import SiteMpi, site_mpi
from hpcenv.jobs.plan import StepFile
from hpcenv.jobs.shell import expanding, join
from hpcenv.site import Site

ImageKind = Literal["oci", "sif", "sqsh"]
StepKind = Literal["sif-copy", "needs-sif", "command", "in-place"]


@dataclass(frozen=True)
class DeliveryStep:
    """One step from a built image to what the job runs; ``target`` is what it makes (a path or
    a reference). ``command`` steps run where their tool is on this host, else they are
    reported pending with the exact command (``site_tool``) or fail (the build engine)."""

    kind: StepKind
    target: str
    command: tuple[str, ...] = ()
    why: str = ""
    site_tool: bool = True
    #: Run after the command exits 0, with the environment it ran in and its output: raises
    #: :class:`~hpcenv.errors.EnvironmentProblem` when the step did not do its work (a tool
    #: that exits 0 on failure, as ``podman-hpc migrate`` does).
    verify: Callable[[Mapping[str, str], str], None] | None = field(
        default=None, compare=False, repr=False
    )

    def shown(self) -> str:
        """The command as a person types it on the site (``$SCRATCH`` still expands)."""
        return join(expanding(word) for word in self.command)

    def describe(self) -> str:
        if self.kind == "sif-copy":
            return f"copy the SIF to {self.target} (the path the job script runs)"
        if self.kind == "needs-sif":
            return f"none: the site's jobs run a SIF at {self.target}; build with --format sif"
        if self.kind == "command":
            return self.shown() + (f" ({self.why})" if self.why else "")
        return f"none: the job runs {self.target} from this host's image storage"


@dataclass(frozen=True)
class Probe:
    """How ``doctor`` and ``sites init`` find a runtime on a host: run ``argv``; it is there
    when the command succeeds (and its output holds ``expect``, when given). ``fix`` is the
    hint a missing one gets."""

    argv: tuple[str, ...]
    fix: str
    expect: str | None = None


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
    #: shipped step scripts the job writes into its steps folder: (file name, what it does)
    steps: list[tuple[str, str]] = field(default_factory=list)
    #: what this host's runtime needs to run, by variable (the job keeps a value it sets)
    host_env: dict[str, str] = field(default_factory=dict)


def scratch(site: Site) -> str | None:
    """The path of the site's scratch file system (None: it has none)."""
    return next((f.path for f in site.filesystems if f.purpose == "scratch"), None)


class ContainerRuntime(ABC):
    """One way a site runs images. Subclasses set the class facts and implement :meth:`launch`;
    the defaults fit an OCI runtime that runs from the build host's image storage."""

    kind: ClassVar[str]
    #: What the runtime runs: an OCI reference, a SIF file or an enroot SquashFS file.
    image_kind: ClassVar[ImageKind] = "oci"
    #: Doctor and detection probe; None: not detectable by a command of its own.
    probe: ClassVar[Probe | None] = None
    #: Whether this host's podman storage holds the images it runs (tuning keys, local checks).
    runs_local_podman_images: ClassVar[bool] = False
    #: Site ``runtime`` fields this runtime reads; a site file that sets another is refused
    #: (hpcenv.runtime_kinds.readers, asked by the site model).
    fields: ClassVar[frozenset[str]] = frozenset({"binds", "flags"})
    #: ``sites init`` tries runtimes with a rank in rank order (None: not detected by a
    #: command of its own, the site file names it).
    detect_rank: ClassVar[int | None] = None

    def build_engine(self, site: Site) -> str:
        """The engine that builds this site's images (its own store where the runtime has one)."""
        return site.build.engine

    def default_format(self) -> str:
        """The ``--format`` a build takes by default for this runtime (``oci``, ``sif``)."""
        return "sif" if self.image_kind == "sif" else "oci"

    def delivery(
        self,
        site: Site,
        recipe: str,
        tag: str,
        fmt: str,
        engine: str = "podman",
        pushed: str | None = None,
    ) -> list[DeliveryStep]:
        """The steps after a build that make what the job runs; the last one's target is the
        image the job names (:meth:`default_image`). ``pushed``: the build also pushes there
        (:func:`hpcenv.delivery.plan_delivery` puts that step first)."""
        return [] if pushed else [DeliveryStep("in-place", tag)]

    def default_image(self, site: Site, recipe: str) -> str:
        """The image a job runs for ``recipe``: by construction the target of the last delivery
        step of a build of it (the job cannot name an artifact no step makes)."""
        tag = naming.image_tag(recipe=recipe, site=site.name)
        steps = self.delivery(site, recipe, tag, self.default_format(), self.build_engine(site))
        return steps[-1].target

    def check_local_image(self, site: Site, image: str, *, inject: bool, force: bool) -> None:
        """Fail before queueing when this host can see that ``image`` is not there (or cannot
        take the site's injected MPI); a runtime whose images live on the site checks nothing."""
        return None

    def image_identity(self, image: str) -> str | None:
        """What identifies ``image``'s content on this host (tuning keys: a measurement is for
        one image), None where this host cannot see it."""
        return None

    @abstractmethod
    def launch(self, site: Site, image: str, ctx: RunContext) -> ContainerLaunch: ...

    def interactive(self, prefix: Sequence[str], tty: bool) -> tuple[str, ...]:
        """``prefix`` for one task that reads this terminal (``hpcenv shell``); as it is where
        the runtime passes stdin on by itself (apptainer exec, shifter)."""
        return tuple(prefix)


def oci_interactive(prefix: Sequence[str], tty: bool) -> tuple[str, ...]:
    """:func:`oci_run`'s prefix (options, then the image) with stdin kept open and, on a
    terminal, a pseudo-terminal (podman-run(1) --interactive, --tty)."""
    *options, image = prefix
    return (*options, "--interactive", *(["--tty"] if tty else []), image)


# Runtime flags that make the runtime inject the site MPI itself (NERSC podman-hpc modules
# mpich/cuda-mpich, NERSC/podman-hpc etc/modules.d, read 2026-11-22; shifter's mpich modules).
SELF_INJECTING: dict[str, tuple[str, ...]] = {
    "podman-hpc": ("--mpi", "--cuda-mpi"),
    "shifter": ("--module=mpich", "--module=cuda-mpich"),
}


def injection(site: Site, ctx: RunContext) -> SiteMpi | None:
    """The site MPI this runtime must inject (None: hybrid, a control run, or self-injected)."""
    if not ctx.inject_site_mpi:
        return None
    if any(f in SELF_INJECTING.get(site.runtime.kind, ()) for f in site.runtime.flags):
        return None
    return site_mpi(site)


def binds(site: Site, ctx: RunContext) -> list[str]:
    paths = [*site.runtime.binds, ctx.workdir, *ctx.binds]
    inj = injection(site, ctx)
    if inj:
        paths += inj.mounts
    seen: list[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return seen


def injection_note(inj: SiteMpi) -> str:
    if inj.model == "site-build":
        return f"site-build model: host {inj.spec} from {inj.root} bound, as the image was built"
    return f"bind model: host {inj.spec} from {inj.root} bound over the image's"


def self_injected(site: Site, ctx: RunContext) -> list[str]:
    flags = [f for f in site.runtime.flags if f in SELF_INJECTING.get(site.runtime.kind, ())]
    if not ctx.inject_site_mpi:
        return [f"{site.runtime.kind}: without {' '.join(flags)}: the image keeps its own MPI"]
    if flags and site.mpi.model in ("bind", "site-build"):
        return [f"bind model: {site.runtime.kind} {flags[0]} injects the site's {site.mpi.spec}"]
    return []


def runtime_flags(site: Site, ctx: RunContext) -> list[str]:
    """The site's runtime flags; without the site-MPI modules where the job keeps the image's
    own MPI (a control run, a framework image)."""
    if ctx.inject_site_mpi:
        return list(site.runtime.flags)
    own = SELF_INJECTING.get(site.runtime.kind, ())
    return [f for f in site.runtime.flags if f not in own]


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


def oci_run(
    cmd: list[str], site: Site, image: str, ctx: RunContext, extra: list[str] | None = None
) -> list[str]:
    """``cmd`` (``podman run``-like) with the binds, work folder and passed names, then ``image``."""
    argv = list(cmd)
    inj = injection(site, ctx)
    for path in [*binds(site, ctx), *(inj.libs if inj else ())]:
        argv.append(expanding(f"--volume={path}:{path}"))
    argv.append(expanding(f"--workdir={ctx.workdir}"))
    visible = gpu_visibility(site)
    names = [*ctx.env_names, *([visible] if visible and visible not in ctx.env_names else [])]
    argv += [f"--env={name}" for name in names]
    return [*argv, *(extra or []), image]


def oci_mpi_env(inj: SiteMpi | None) -> list[str]:
    """``--env`` flags that put the site MPI first on the loader path (and preload its GTL)."""
    if not inj:
        return []
    out = [expanding(f"--env=LD_LIBRARY_PATH={inj.ld_library_path}")]
    if inj.preload:
        out.append(expanding(f"--env=LD_PRELOAD={inj.ld_preload}"))
    return out
