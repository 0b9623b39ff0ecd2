"""Sites: where an image runs. A typed, validated model of a site file in ``site-configs/``.

Unknown keys, duplicate keys, YAML aliases, newlines and control characters are rejected; errors
name the file, line and field. Every value has a shape (:mod:`hpcenv.safe`): shell words and
paths, URLs, image references, versions, walltimes, bounded counts. Names are checked against
the knowledge base: the MPI family, the PMI flavour, the launchers that fit the scheduler, a GPU
driver or ROCm for GPU sites, and a hybrid-model MPI that hpcenv can install in the image.
Everything is quoted again where it is rendered.

This module is the model only: finding and reading site files (search path, ``extends:``,
origins) is :mod:`hpcenv.site.load`, which imports this one and not the other way round; the
words it checks (directive flags, placeholder accounts) are :mod:`hpcenv.site.words`, so that
the site imports nothing from :mod:`hpcenv.jobs` (issue 18: following ``--site`` goes down).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from hpcenv.credentials import redact_url
from hpcenv.errors import ConfigError
from hpcenv.naming import SquashfsCompressor
from hpcenv.safe import (
    Count,
    EnvName,
    HostPath,
    ImageRef,
    Name,
    SafeModel,
    ShellPath,
    ShellText,
    ShellWord,
    Url,
    Walltime,
    Word,
)
from hpcenv.site.words import directive_pairs, is_placeholder
from hpcenv.versions import is_version, parse_spec

__all__ = ["ShellPath", "ShellText", "ShellWord", "Site", "parse_spec"]


def _version(value: str) -> str:
    if not is_version(value):
        raise ValueError(f"{value!r} is not a version")
    return value


Version = Annotated[str, AfterValidator(_version)]
Arch = Literal["x86_64", "ppc64le", "aarch64"]
Text = Annotated[str, Field(max_length=500)]
NodeCount = Annotated[int, Field(ge=1, le=1_000_000, strict=True)]
# An EDF annotation key: dotted TOML bare keys (com.hooks.aws_ofi_nccl.enabled).
AnnotationKey = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$", max_length=200)
]


class Strict(SafeModel):
    """Site parts: unknown keys refused, frozen, no control characters (see :mod:`hpcenv.safe`)."""


class Node(Strict):
    """One compute node's topology (bounded: a typo like ``1e9`` is an error, not a plan)."""

    sockets: int = Field(ge=1, le=64, strict=True)
    cores_per_socket: int = Field(ge=1, le=1024, strict=True)
    threads_per_core: int = Field(default=1, ge=1, le=8, strict=True)
    memory_gb: int = Field(ge=1, le=65536, strict=True)
    gpus: int = Field(default=0, ge=0, le=64, strict=True)
    gpu_model: Text | None = None
    gpu_tiles: int = Field(
        default=1,
        ge=1,
        le=16,
        strict=True,
        description="tiles per GPU that ranks bind to separately (Aurora: 2)",
    )
    nics: int = Field(default=1, ge=0, le=64, strict=True)
    nic_model: Text | None = None
    reserved_cores: list[Annotated[int, Field(ge=0, le=65535, strict=True)]] = Field(
        default=[],
        max_length=1024,
        description="cores the system keeps (never given to a rank), e.g. low-noise",
    )
    ranks_per_node: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        strict=True,
        description="the site's documented default ranks per node",
    )
    gpu_closest: list[Annotated[int, Field(ge=0, le=1023, strict=True)]] = Field(
        default=[],
        max_length=1024,
        description="the GPU closest to each equal group of cores, in core order, as Slurm's "
        "gres.conf Cores= says (Frontier's L3 regions: [4,5,2,3,6,7,0,1]); empty: GPU i is "
        "closest to group i",
    )

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    def closest_gpu(self, core: int) -> int:
        """The GPU closest to ``core`` (``gpu_closest``; empty: the identity over GPUs)."""
        order = self.gpu_closest or list(range(self.gpus))
        return order[core * len(order) // self.cores]

    @model_validator(mode="after")
    def _reserved(self) -> Node:
        bad = [c for c in self.reserved_cores if c >= self.cores]
        if bad:
            raise ValueError(f"reserved_cores {bad} beyond the node's {self.cores} cores")
        per_socket = [
            sum(1 for c in set(self.reserved_cores) if c // self.cores_per_socket == s)
            for s in range(self.sockets)
        ]
        if max(per_socket) >= self.cores_per_socket:
            raise ValueError("reserved_cores leave a socket without a usable core")
        if self.gpu_closest:
            order = self.gpu_closest
            if sorted(order) != list(range(self.gpus)) or self.cores % len(order):
                raise ValueError(
                    f"gpu_closest {order} must list each of the node's {self.gpus} GPUs once, "
                    f"one per equal group of its {self.cores} cores"
                )
        return self


class Gpu(Strict):
    """The GPUs' vendor and the host driver/runtime that an image's toolkit must fit."""

    vendor: Literal["nvidia", "amd", "intel", "none"] = "none"
    driver: Version | None = None
    rocm: Version | None = None
    visible: Literal["rank", "node"] = Field(
        default="rank",
        description="what a rank sees, as the site's PyTorch example has it: 'rank', its own "
        "GPUs, bound closest (LOCAL_RANK then counts its own devices: 0 with one; OLCF's "
        "Frontier example); 'node', every GPU of the node, picked by LOCAL_RANK (NERSC's and "
        "CSCS's examples)",
    )

    @model_validator(mode="after")
    def _runtime_named(self) -> Gpu:
        if self.vendor == "nvidia" and not self.driver:
            raise ValueError("an NVIDIA site needs 'driver' (nvidia-smi's driver version)")
        if self.vendor == "amd" and not self.rocm:
            raise ValueError("an AMD site needs 'rocm' (the ROCm version on the nodes)")
        return self


class HostMpi(Strict):
    """The site's MPI and how containers use it (bind: inject host MPI; hybrid: PMI match;
    site-build: the image is built on the site against the host MPI, mounted at build time,
    and the job binds the same MPI as in the bind model)."""

    spec: str = Field(description="host MPI as name@version, e.g. spectrum-mpi@10.4")
    pmi: str = Field(description="PMI flavour as name@version: pmix@4, pmi2, cray-pmi@6")
    model: Literal["bind", "hybrid", "site-build"]
    fabric: Literal["ucx", "libfabric", "verbs", "shm"] = "shm"
    root: ShellPath | None = Field(
        default=None,
        description="host MPI prefix to bind (bind model); site-build: also mounted at the "
        "same path while the image builds",
    )
    bind_paths: list[ShellPath] = Field(default=[], max_length=64)
    library_path: list[ShellPath] = Field(
        default=[],
        description="bind model: the loader path inside the container, host MPI first "
        "(default <root>/lib); entries may name variables the site's modules set",
    )
    host_libs: list[ShellPath] = Field(
        default=[], description="bind model: single host libraries the host MPI links to"
    )
    preload: list[ShellPath] = Field(
        default=[], description="bind model: libraries to LD_PRELOAD (e.g. a GPU transport layer)"
    )
    env: dict[EnvName, ShellWord] = Field(default={}, max_length=128)
    setup: list[ShellPath] = Field(
        default=[],
        max_length=16,
        description="host scripts every job sources after its modules, before any launch "
        "(the site's library list for its MPI in containers, e.g. OLCF's requiredmpilibs.source)",
    )

    @field_validator("spec")
    @classmethod
    def _known_family(cls, spec: str) -> str:
        from hpcenv.knowledge import mpi_family

        try:
            name, _ = parse_spec(spec)
            mpi_family(name)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return spec

    @field_validator("pmi")
    @classmethod
    def _known_pmi(cls, pmi: str) -> str:
        from hpcenv.knowledge import kb

        try:
            name, _ = parse_spec(pmi)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        known = [k for k in kb()["pmi"] if k != "source"]
        if name not in known:
            raise ValueError(f"unknown PMI {name!r}; known: {', '.join(known)}")
        return pmi

    @model_validator(mode="after")
    def _model_fits(self) -> HostMpi:
        from hpcenv.knowledge import mpi_family

        if self.model == "bind" and not self.root:
            raise ValueError("bind model needs 'root' (the host MPI prefix to bind into the image)")
        if self.model == "site-build" and not self.root:
            raise ValueError(
                "site-build model needs 'root' (the host MPI prefix mounted into the build and "
                "bound into the job, e.g. $MPI_ROOT)"
            )
        name, version = parse_spec(self.spec)
        releases: list[str] = mpi_family(name).get("releases") or []
        if self.model == "hybrid" and not releases:
            raise ValueError(
                f"hybrid model runs the host's MPI family inside the image, and hpcenv cannot "
                f"install {name} there; use model: bind (the image gets an ABI-compatible MPI)"
            )
        if self.model == "hybrid" and version is not None and version not in releases:
            raise ValueError(
                f"hybrid model installs {name} {version} in the image, not a known release "
                f"(known: {', '.join(releases)})"
            )
        return self

    @property
    def name(self) -> str:
        return parse_spec(self.spec)[0]

    @property
    def version(self) -> str | None:
        return parse_spec(self.spec)[1]


class WalltimeBin(Strict):
    """The longest job a node-count range may ask for (OLCF's "bins")."""

    nodes: tuple[NodeCount, NodeCount] = Field(description="[fewest, most] nodes of the bin")
    max_walltime: Walltime


class QueueLimits(Strict):
    """What one queue or partition (``selects: queue``) or QOS (``selects: qos``) takes, as the
    site documents it; a job outside it is refused, or sent to another that takes it."""

    selects: Literal["queue", "qos"] = Field(
        default="queue", description="queue/partition (--partition) or QOS (--qos)"
    )
    nodes: tuple[NodeCount, NodeCount] | None = Field(
        default=None, description="[fewest, most] nodes a job may ask for"
    )
    walltime: tuple[Walltime, Walltime] | None = Field(
        default=None, description="[shortest, longest] time a job may ask for"
    )
    bins: list[WalltimeBin] = Field(
        default=[], max_length=32, description="longest time by node count, where the site has bins"
    )
    route: bool = Field(
        default=True,
        description="hpcenv may send a job here when the default does not take it "
        "(false: by request only, preemptable, debug-only)",
    )

    @field_validator("nodes")
    @classmethod
    def _range(cls, nodes: tuple[int, int] | None) -> tuple[int, int] | None:
        if nodes and nodes[0] > nodes[1]:
            raise ValueError(f"fewest nodes {nodes[0]} > most {nodes[1]}")
        return nodes


class Scheduler(Strict):
    kind: Literal["slurm", "lsf", "pbs", "none"]
    launcher: Literal["srun", "jsrun", "mpiexec", "mpirun"]
    mpi_plugin: Word | None = Field(default=None, description="srun --mpi=VALUE")
    account: Word | None = None
    queue: Word | None = Field(default=None, description="partition (Slurm) or queue")
    qos: Word | None = Field(default=None, description="default QOS (Slurm --qos)")
    queue_limits: dict[Word, QueueLimits] = Field(
        default={},
        max_length=64,
        description="node-count and walltime limits of each queue/partition or QOS, as the site "
        "documents them (in the order hpcenv tries them when routing); a job outside its "
        "queue's limits is refused or routed at render (qsub/sbatch would reject it)",
    )
    cpus_per_core: int = Field(
        default=1,
        ge=1,
        le=8,
        description="Slurm CPUs per physical core: 2 where Slurm counts hardware threads",
    )
    launcher_flags: list[ShellWord] = Field(
        default=[],
        max_length=64,
        description="launcher options the site documents for every rank launch",
    )
    resource_set: Literal["rank", "node"] = Field(
        default="rank",
        description="jsrun: one resource set per rank (-a1 -g1), or per node (all of the "
        "node's ranks, cores and GPUs in one, so every rank sees every GPU)",
    )
    walltime: Walltime = Field(
        default="00:30:00", description="MM (minutes), HH:MM:SS or D-HH[:MM[:SS]]"
    )
    extra_directives: list[ShellText] = Field(default=[], max_length=64)
    login_host: Word | None = None
    conf: ShellPath | None = Field(
        default=None,
        description="client configuration the scheduler commands read (Slurm: SLURM_CONF), "
        "for a login host that serves more than one cluster",
    )
    account_required: bool = Field(
        default=False, description="the site refuses jobs without a project/account"
    )

    @field_validator("extra_directives")
    @classmethod
    def _directives(cls, words: list[str]) -> list[str]:
        try:
            directive_pairs(words)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return words

    @field_validator("launcher")
    @classmethod
    def _fits_scheduler(cls, launcher: str, info: ValidationInfo) -> str:
        from hpcenv.knowledge import kb

        kind = info.data.get("kind")
        fits = kb()["launchers"].get(kind, [])
        if kind and launcher not in fits:
            raise ValueError(
                f"launcher {launcher} does not fit scheduler {kind} (use {', '.join(fits)})"
            )
        return launcher


class Ssh(Strict):
    """How ``hpcenv submit`` reaches the login node (key auth, known_hosts checked)."""

    host: Word
    user: Word | None = None
    port: int = Field(default=22, ge=1, le=65535, strict=True)
    key_file: HostPath | None = None
    known_hosts: HostPath | None = None


def _runtime_kind(value: str) -> str:
    from hpcenv.runtime_kinds import check_kind

    try:
        return check_kind(value)
    except ConfigError as err:
        raise ValueError(str(err)) from None


def _readers(field: str) -> list[str]:
    """The runtime kinds whose backends read site field ``runtime.<field>`` (each runtime owns
    the list of its fields: hpcenv.jobs.runtimes)."""
    from hpcenv.runtime_kinds import readers

    return readers(field)


def _known_runtimes() -> list[str]:
    from hpcenv.runtime_kinds import known_kinds

    return known_kinds()


class Runtime(Strict):
    kind: Annotated[
        str,
        AfterValidator(_runtime_kind),
        Field(
            json_schema_extra={"enum": list(_known_runtimes())},
            description="the container runtime (one module of hpcenv/runtimes)",
        ),
    ]
    binds: list[ShellPath] = Field(default=[], max_length=64)
    flags: list[ShellWord] = Field(default=[], max_length=64)
    annotations: dict[AnnotationKey, ShellWord] = Field(
        default={},
        max_length=64,
        description="cscs-ce: EDF [annotations] every job's environment file carries "
        "(Container Engine hooks, e.g. com.hooks.aws_ofi_nccl.enabled: 'true')",
    )
    executable: ShellPath | None = Field(
        default=None, description="the runtime's command where it is not `kind` on the PATH"
    )

    @field_validator("annotations", "executable")
    @classmethod
    def _read_by_kind(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("kind")  # validated before, in field order; absent when invalid
        field = info.field_name or ""
        readers: list[str] = _readers(field) if value and kind else [str(kind)]
        if kind not in readers:
            many = len(readers) > 1
            raise ValueError(
                f"runtime.{field} applies to the {' and '.join(readers)} "
                f"runtime{'s' if many else ''}, not {kind}"
            )
        return value


class SiteVariable(Strict):
    """A variable the site provides (``$MEMBERWORK``); the job script keeps the site's value and
    falls back to the documented ``default`` where it is unset."""

    default: ShellPath | None = Field(
        default=None, description="documented value; none: the site always sets it"
    )
    source: str = Field(description="where the site documents it, and the date read")


class Filesystem(Strict):
    name: Word
    kind: Literal["lustre", "gpfs", "nfs", "local"]
    path: ShellPath
    purpose: Literal["scratch", "home", "project", "software", "datasets"]
    purged: bool = False
    read_only_on_compute: bool = False
    submit_here: bool = True


class NodeLocal(Strict):
    """Node-local storage for staging: NVMe burst buffer, /dev/shm or /tmp."""

    kind: Literal["nvme", "shm", "tmp", "ssd"]
    path: ShellPath
    size_gb: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)
    request: list[ShellText] = Field(
        default=[], description="scheduler directive words that allocate it", max_length=16
    )


class Build(Strict):
    """How images for this site are built; mirrors and CA are used at build time only."""

    engine: Literal["podman", "docker", "buildah"] = "podman"
    base_image: ImageRef | None = None
    bootstrap_base: bool = Field(
        default=False, description="make the base with debootstrap when no registry is reachable"
    )
    apt_mirror: Url | None = None
    pip_index_url: Url | None = None
    pip_extra_index_urls: list[Url] = Field(default=[], max_length=16)
    pip_find_links: list[HostPath] = Field(default=[], max_length=16)
    ca_bundle: HostPath | None = None
    jobs: Count = Field(default=2, description="parallel compile jobs")
    flags: list[ShellWord] = Field(
        default=[],
        max_length=16,
        description="options the site documents for every image build (podman build --net=host)",
    )
    storage: ShellPath | None = Field(
        default=None,
        description="where the build host's engine keeps its layers, when the site says where "
        "(a login node's NVMe); the build host must be set up for it",
    )
    archive: Literal["oci-archive", "docker-archive"] = Field(
        default="oci-archive",
        description="the archive an image is saved as before apptainer build turns it into a SIF",
    )
    sif_compression: SquashfsCompressor | None = Field(
        default=None,
        description="the squashfs compressor of the SIFs built for this site (apptainer build "
        "--mksquashfs-args '-comp X'); none: Apptainer's default (gzip). Name one only where "
        "every Apptainer or Singularity that runs the site's SIFs is known to mount it",
    )

    @field_serializer("apt_mirror", "pip_index_url", "pip_extra_index_urls", when_used="json")
    def _redacted(self, value: str | list[str] | None) -> str | list[str] | None:
        """Shown (``sites show/init --json``) without ``user:password@``: those reach only the
        build secrets (:mod:`hpcenv.credentials`)."""
        if isinstance(value, list):
            return [redact_url(u) for u in value]
        return None if value is None else redact_url(value)


class NetworkPlugin(Strict):
    """The libfabric plugin NCCL/RCCL need on Slingshot (aws-ofi-nccl), and where it comes from.

    ``host``: the site injects its own build at run time (``how`` says how: a module, a runtime
    flag); ``image``: hpcenv builds it into the image.
    """

    source: Literal["host", "image"]
    version: Version | None = Field(default=None, description="aws-ofi-nccl version, if known")
    how: ShellText = Field(description="how the job gets it, e.g. 'module load rccl-net-plugin'")


DnsDomain = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$",
        max_length=200,
    ),
]


class Rendezvous(Strict):
    """torch.distributed's ``env://`` rendezvous (``MASTER_ADDR``, ``MASTER_PORT``) as the site
    documents it; :mod:`hpcenv.jobs.rendezvous` turns it into the job's exports.

    ``address``: ``first-node``, the allocation's first node as the scheduler names it (Slurm's
    ``scontrol show hostnames``, PBS's node file, LSF's first compute host), with ``domain``
    appended to its short name where the site names its high-speed network that way (Aurora's
    ``<node>.hsn.cm.aurora.alcf.anl.gov``); ``batch-host-ip``, the address of the host the
    batch shell runs on (``hostname -i``, Frontier's documented form; under Slurm and PBS the
    batch shell runs on the first node). ``port``: the site's documented port; none: one
    derived from the job id (20000 + id mod 12000, then the first free one of 16 from there where
    the batch shell runs on the rendezvous host), so two jobs sharing a node do not collide.
    """

    address: Literal["first-node", "batch-host-ip"] = "first-node"
    domain: DnsDomain | None = Field(
        default=None, description="appended to the first node's short name (its HSN name)"
    )
    port: int | None = Field(
        default=None, ge=1024, le=65535, strict=True, description="none: derived from the job id"
    )

    @model_validator(mode="after")
    def _domain_names_a_node(self) -> Rendezvous:
        if self.domain and self.address != "first-node":
            raise ValueError("rendezvous.domain applies to address first-node")
        return self


class CacheDir(Strict):
    """A folder a framework writes its cache to, as the site documents it (MIOpen's database on
    Frontier, Hugging Face's on a scratch file system): exported under its variable's name in the
    job's ``site-cache`` layer. ``scope``: ``node``, a node-local path (``/tmp``) that each rank's
    step (``rank-env.sh``) makes where the rank runs; ``shared``, a path on a shared file system
    that the job makes once before the launch and binds into the container."""

    path: ShellPath
    scope: Literal["node", "shared"] = "shared"


class Reference(Strict):
    """A performance reference for one smoke figure, ReFrame-style: the run passes while the
    value stays within ``[value*(1+lower), value*(1+upper)]``; outside on the bad side it is a
    regression (``better`` says which side that is), on the good side an improvement."""

    value: float = Field(gt=0)
    lower: float = Field(ge=-1, le=0, description="lower bound as a fraction of value, e.g. -0.5")
    upper: float | None = Field(default=None, ge=0, description="upper bound fraction; none: open")
    unit: Annotated[str, StringConstraints(pattern=r"^[A-Za-z/%]+$")]
    better: Literal["higher", "lower"]


FigureName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_-]+)+$")]


class Provenance(Strict):
    """Which values are verified facts (with a source), assumptions, or placeholders to replace.

    Keys are dotted field paths (``scheduler.account``); values say where the fact was read,
    why the value was assumed, or what the user must put there (``sites validate`` flags
    placeholders; ``submit`` refuses them unless given on the command line).
    """

    verified: dict[str, Text] = Field(default={}, description="field -> where it was read")
    assumed: dict[str, Text] = Field(default={}, description="field -> why this value")
    placeholder: dict[str, Text] = Field(
        default={}, description="field -> what to put there before submitting"
    )


RetiredOn = Annotated[str, StringConstraints(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]


class Site(Strict):
    name: Name
    description: Text
    retired: RetiredOn | None = Field(
        default=None,
        description="the day the system was retired (YYYY-MM-DD): build and submit warn once",
    )
    arch: Arch
    os: Literal["debian-12", "debian-13", "ubuntu-22.04", "centos-8"] = "debian-12"
    node: Node
    gpu: Gpu = Gpu()
    mpi: HostMpi
    scheduler: Scheduler
    runtime: Runtime
    filesystems: list[Filesystem] = Field(default=[], max_length=64)
    node_local: NodeLocal | None = None
    modules: list[Word] = Field(default=[], max_length=64)
    modules_purge: bool = Field(
        default=False, description="start the job with `module purge` (before `module load`)"
    )
    modules_unload: list[Word] = Field(
        default=[], max_length=64, description="modules the job unloads after `module load`"
    )
    variables: dict[EnvName, SiteVariable] = Field(
        default={}, description="site-provided variables with their documented defaults"
    )
    recipes: list[Name] = Field(default=[], max_length=64)
    build: Build = Build()
    network_plugin: NetworkPlugin | None = None
    rendezvous: Rendezvous = Rendezvous()
    caches: dict[EnvName, CacheDir] = Field(
        default={},
        max_length=32,
        description="framework cache folders the site documents (MIOPEN_USER_DB_PATH, HF_HOME)",
    )
    defaults: dict[str, str] = Field(default={}, description="component pins, as for --set")
    tuning: dict[EnvName, ShellWord] = Field(
        default={},
        description="environment knobs for jobs (e.g. HOROVOD_FUSION_THRESHOLD)",
        max_length=256,
    )
    ssh: Ssh | None = None
    references: dict[FigureName, Reference] = Field(
        default={}, description="smoke figure -> performance reference (hpcenv smoke compares)"
    )
    provenance: Provenance = Provenance()

    @field_validator("defaults")
    @classmethod
    def _pins(cls, defaults: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        from hpcenv.pins import check_pin

        for name, value in defaults.items():
            try:
                check_pin(name, value, "site defaults")
            except ConfigError as err:
                raise ValueError(str(err)) from None
        return defaults

    @model_validator(mode="after")
    def _consistent(self) -> Site:
        plugin = self.network_plugin
        if plugin and plugin.source == "image" and not plugin.version:
            raise ValueError("network_plugin.source image needs network_plugin.version")
        if self.gpu.vendor == "none" and self.node.gpus:
            raise ValueError("node.gpus > 0 but gpu.vendor is 'none'")
        if self.gpu.vendor != "none" and not self.node.gpus:
            raise ValueError(f"gpu.vendor is {self.gpu.vendor!r} but node.gpus is 0")
        data = self.model_dump()
        for kind in ("verified", "assumed", "placeholder"):
            for dotted in getattr(self.provenance, kind):
                if not _has_path(data, dotted):
                    raise ValueError(
                        f"provenance.{kind} names {dotted!r}, not a field of this site"
                    )
        return self

    @model_validator(mode="after")
    def _environment(self) -> Site:
        """A name that changes how a shell, the loader or an interpreter starts (BASH_ENV,
        LD_PRELOAD...) only with its source in ``provenance.verified`` (:mod:`hpcenv.envpolicy`);
        the error names the variable's own field, so the file and line are shown."""
        from pydantic import ValidationError
        from pydantic_core import InitErrorDetails, PydanticCustomError

        from hpcenv.envpolicy import refused

        documented = self.provenance.verified
        layers: list[tuple[tuple[str, ...], Any, dict[str, str]]] = [
            (("mpi", "env"), "site-mpi", self.mpi.env),
            (("tuning",), "site-environment", self.tuning),
            (("caches",), "site-cache", {n: c.path for n, c in self.caches.items()}),
        ]
        for loc, layer, values in layers:
            field = ".".join(loc)
            for name, value in values.items():
                why = refused(name, layer, {n for n in values if f"{field}.{n}" in documented})
                if why is not None:
                    error = PydanticCustomError("env_not_allowed", "{why}", {"why": why})
                    detail = InitErrorDetails(type=error, loc=(*loc, name), input=value)
                    raise ValidationError.from_exception_data("Site", [detail])
        return self


def retirement_warning(site: Site) -> str | None:
    """The one line ``build`` and ``submit`` print for a retired system, else None."""
    if not site.retired:
        return None
    source = site.provenance.verified.get("retired", "")
    return (
        f"warning: site {site.name} was retired on {site.retired}; hpcenv renders and builds "
        f"for it as documented{f' ({source})' if source else ''}"
    )


def _has_path(data: Any, dotted: str) -> bool:
    cur = data
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False
    return True


def placeholders(site: Site) -> dict[str, str]:
    """Fields to replace before submitting: marked in ``provenance.placeholder``, or an account
    that is an obvious example value (``PROJ123``, ``m0000``)."""
    found = dict(site.provenance.placeholder)
    account = site.scheduler.account
    if account and is_placeholder(account) and "scheduler.account" not in found:
        found["scheduler.account"] = f"{account!r} is an example value: your project id"
    return found


def json_schema() -> dict[str, Any]:
    """The JSON Schema of site files: a whole site, or (with ``extends:``) the changes to one,
    where every field is optional at every level since the base supplies the rest (as
    ``hpcenv sites validate`` reads such a file)."""
    import copy

    full = Site.model_json_schema()
    defs = full.pop("$defs", {})
    partial = _without_required(copy.deepcopy(full), "#/$defs/", "#/$defs/Partial")
    both = {
        f"Partial{name}": _without_required(copy.deepcopy(d), "#/$defs/", "#/$defs/Partial")
        for name, d in defs.items()
    }
    return {
        **{k: v for k, v in full.items() if k in ("title", "description")},
        "$defs": {**defs, **both, "Site": full, "PartialSite": partial},
        "type": "object",
        "if": {"required": ["extends"]},
        "then": {"$ref": "#/$defs/PartialSite"},
        "else": {"$ref": "#/$defs/Site"},
    }


def _without_required(node: Any, ref: str, to: str) -> Any:
    """``node`` with no ``required`` lists, each property also taking ``null`` (an ``extends:``
    file's ``null`` gives a field back to its default), and its ``$ref``s pointed at the partial
    copies."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "required":
                continue
            if key == "$ref" and isinstance(value, str):
                out[key] = value.replace(ref, to, 1)
            elif key == "properties" and isinstance(value, dict):
                out[key] = {
                    name: {"anyOf": [_without_required(prop, ref, to), {"type": "null"}]}
                    for name, prop in value.items()
                }
            else:
                out[key] = _without_required(value, ref, to)
        return out
    if isinstance(node, list):
        return [_without_required(v, ref, to) for v in node]
    return node
