"""Sites: where an image runs. A typed, validated model of a site file in ``site-configs/``.

Unknown keys are rejected; errors name the file, line and field. Every string that can reach
a shell script is checked against a conservative pattern (``ShellWord``/``ShellPath``) here,
and quoted again where it is rendered.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from hpcenv.errors import ConfigError
from hpcenv.paths import site_configs_dir
from hpcenv.yamlsrc import validate_file

# A word safe in a shell script without quoting: no spaces, quotes, ;|&<>`\ or $( .
ShellWord = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:@%+=/-]+$")]
# A path that may use environment variables ($USER, ${PROJ}) but nothing else of the shell.
ShellPath = Annotated[
    str, StringConstraints(pattern=r"^(?:[A-Za-z0-9_.,:@%+=/-]|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)+$")
]
# Free text that is always shlex-quoted when rendered; still no quotes or metacharacters.
ShellText = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:@%+=/ -]+$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9][0-9A-Za-z.+_-]*$")]
Arch = Literal["x86_64", "ppc64le", "aarch64"]

_SPEC = re.compile(r"^(?P<name>[a-z][a-z0-9-]*)(?:@(?P<version>[0-9][0-9A-Za-z.+_-]*))?$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split a spack-style ``name@version`` spec."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"not a name@version spec: {spec!r}")
    return m["name"], m["version"]


class Node(Strict):
    """One compute node's topology."""

    sockets: int = Field(ge=1)
    cores_per_socket: int = Field(ge=1)
    threads_per_core: int = Field(default=1, ge=1)
    memory_gb: int = Field(ge=1)
    gpus: int = Field(default=0, ge=0)
    gpu_model: str | None = None
    gpu_tiles: int = Field(
        default=1, ge=1, description="tiles per GPU that ranks bind to separately (Aurora: 2)"
    )
    nics: int = Field(default=1, ge=0)
    nic_model: str | None = None
    reserved_cores: list[Annotated[int, Field(ge=0)]] = Field(
        default=[], description="cores the system keeps (never given to a rank), e.g. low-noise"
    )
    ranks_per_node: int | None = Field(
        default=None, ge=1, description="the site's documented default ranks per node"
    )

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

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
        return self


class Gpu(Strict):
    """The GPUs' vendor and the host driver/runtime that an image's toolkit must fit."""

    vendor: Literal["nvidia", "amd", "intel", "none"] = "none"
    driver: Version | None = None
    rocm: Version | None = None


class HostMpi(Strict):
    """The site's MPI and how containers use it (bind: inject host MPI; hybrid: PMI match)."""

    spec: str = Field(description="host MPI as name@version, e.g. spectrum-mpi@10.4")
    pmi: str = Field(description="PMI flavour as name@version: pmix@4, pmi2, cray-pmi@6")
    model: Literal["bind", "hybrid"]
    fabric: Literal["ucx", "libfabric", "verbs", "shm"] = "shm"
    root: ShellPath | None = Field(default=None, description="host MPI prefix to bind (bind model)")
    bind_paths: list[ShellPath] = []
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
    env: dict[ShellWord, ShellWord] = {}

    @model_validator(mode="after")
    def _specs(self) -> HostMpi:
        parse_spec(self.spec)
        parse_spec(self.pmi)
        if self.model == "bind" and not self.root:
            raise ValueError("bind model needs 'root' (the host MPI prefix to bind into the image)")
        return self

    @property
    def name(self) -> str:
        return parse_spec(self.spec)[0]

    @property
    def version(self) -> str | None:
        return parse_spec(self.spec)[1]


class Scheduler(Strict):
    kind: Literal["slurm", "lsf", "pbs", "none"]
    launcher: Literal["srun", "jsrun", "mpiexec", "mpirun"]
    mpi_plugin: ShellWord | None = Field(default=None, description="srun --mpi=VALUE")
    account: ShellWord | None = None
    queue: ShellWord | None = Field(default=None, description="partition (Slurm) or queue")
    qos: ShellWord | None = Field(default=None, description="default QOS (Slurm --qos)")
    cpus_per_core: int = Field(
        default=1,
        ge=1,
        le=8,
        description="Slurm CPUs per physical core: 2 where Slurm counts hardware threads",
    )
    launcher_flags: list[ShellWord] = Field(
        default=[], description="launcher options the site documents for every rank launch"
    )
    walltime: Annotated[str, StringConstraints(pattern=r"^[0-9:-]+$")] = "00:30:00"
    extra_directives: list[ShellText] = []
    login_host: ShellWord | None = None
    conf: ShellPath | None = Field(
        default=None,
        description="client configuration the scheduler commands read (Slurm: SLURM_CONF), "
        "for a login host that serves more than one cluster",
    )
    account_required: bool = Field(
        default=False, description="the site refuses jobs without a project/account"
    )


class Ssh(Strict):
    """How ``hpcenv submit`` reaches the login node (key auth, known_hosts checked)."""

    host: ShellWord
    user: ShellWord | None = None
    port: int = 22
    key_file: str | None = None
    known_hosts: str | None = None


class Runtime(Strict):
    kind: Literal["apptainer", "singularity", "podman-hpc", "shifter", "podman", "pyxis"]
    binds: list[ShellPath] = []
    flags: list[ShellWord] = []


class SiteVariable(Strict):
    """A variable the site provides (``$MEMBERWORK``); the job script keeps the site's value and
    falls back to the documented ``default`` where it is unset."""

    default: ShellPath | None = Field(
        default=None, description="documented value; none: the site always sets it"
    )
    source: str = Field(description="where the site documents it, and the date read")


class Filesystem(Strict):
    name: ShellWord
    kind: Literal["lustre", "gpfs", "nfs", "local"]
    path: ShellPath
    purpose: Literal["scratch", "home", "project", "software", "datasets"]
    purged: bool = False
    read_only_on_compute: bool = False


class NodeLocal(Strict):
    """Node-local storage for staging: NVMe burst buffer, /dev/shm or /tmp."""

    kind: Literal["nvme", "shm", "tmp", "ssd"]
    path: ShellPath
    size_gb: int | None = None
    request: list[ShellText] = Field(
        default=[], description="scheduler directive words that allocate it"
    )


class Build(Strict):
    """How images for this site are built; mirrors and CA are used at build time only."""

    engine: Literal["podman", "docker", "buildah"] = "podman"
    base_image: str | None = None
    bootstrap_base: bool = Field(
        default=False, description="make the base with debootstrap when no registry is reachable"
    )
    apt_mirror: str | None = None
    pip_index_url: str | None = None
    pip_extra_index_urls: list[str] = []
    pip_find_links: list[str] = []
    ca_bundle: str | None = None
    jobs: int = Field(default=2, ge=1, description="parallel compile jobs")


class Provenance(Strict):
    """Which values are verified facts (with a source) and which are assumptions."""

    verified: dict[str, str] = {}
    assumed: dict[str, str] = {}


class Site(Strict):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*$")]
    description: str
    arch: Arch
    os: Literal["debian-12", "ubuntu-22.04"] = "debian-12"
    node: Node
    gpu: Gpu = Gpu()
    mpi: HostMpi
    scheduler: Scheduler
    runtime: Runtime
    filesystems: list[Filesystem] = []
    node_local: NodeLocal | None = None
    modules: list[ShellWord] = []
    variables: dict[ShellWord, SiteVariable] = Field(
        default={}, description="site-provided variables with their documented defaults"
    )
    recipes: list[str] = []
    build: Build = Build()
    defaults: dict[str, str] = Field(default={}, description="component pins, as for --set")
    tuning: dict[ShellWord, ShellWord] = Field(
        default={}, description="environment knobs for jobs (e.g. HOROVOD_FUSION_THRESHOLD)"
    )
    ssh: Ssh | None = None
    provenance: Provenance = Provenance()

    @model_validator(mode="after")
    def _consistent(self) -> Site:
        if self.gpu.vendor == "none" and self.node.gpus:
            raise ValueError("node.gpus > 0 but gpu.vendor is 'none'")
        if self.gpu.vendor != "none" and not self.node.gpus:
            raise ValueError(f"gpu.vendor is {self.gpu.vendor!r} but node.gpus is 0")
        data = self.model_dump()
        for kind in ("verified", "assumed"):
            for dotted in getattr(self.provenance, kind):
                if not _has_path(data, dotted):
                    raise ValueError(
                        f"provenance.{kind} names {dotted!r}, not a field of this site"
                    )
        return self


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


def search_path() -> list[Path]:
    """Folders searched for NAME.yaml: ``HPCENV_SITE_PATH`` (colon-separated), then built-ins."""
    extra = [Path(p) for p in os.environ.get("HPCENV_SITE_PATH", "").split(":") if p]
    return [*extra, site_configs_dir()]


def site_file(name_or_path: str) -> Path:
    """Resolve ``--site`` to a file: an existing path, else NAME.yaml on the search path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if candidate.is_file():
            return candidate
        raise ConfigError(f"site file not found: {name_or_path}")
    for folder in search_path():
        path = folder / f"{name_or_path}.yaml"
        if path.is_file():
            return path
    raise ConfigError(
        f"unknown site {name_or_path!r}; known: {', '.join(site_names())} "
        "(or give a path to a site file, or add a folder to HPCENV_SITE_PATH)"
    )


def load_site(name_or_path: str) -> Site:
    return validate_file(Site, site_file(name_or_path))


def site_names() -> list[str]:
    names = {p.stem for folder in search_path() if folder.is_dir() for p in folder.glob("*.yaml")}
    return sorted(names)


def json_schema() -> dict[str, Any]:
    return Site.model_json_schema()
