"""Placement: one neutral description of where a job's ranks run, derived from node topology.

:func:`place` returns a :class:`Placement` (nodes, ranks per node, cores and core lists per rank,
GPUs per rank and their binding, environment); it names no launcher flag. Each launcher
(:mod:`hpcenv.jobs.launchers`: srun, jsrun, mpiexec, mpirun) and each container runtime
(:mod:`hpcenv.jobs.runtimes`) turns it into its own flags, so a launch line is built in one
place. ``Placement.env`` is a plain mapping that later layers (site tuning, measured tuning files)
extend; nothing else carries environment.

Cores are numbered socket-major (socket ``s`` owns cores ``s*C .. s*C+C-1``, first hardware
thread of each core), which is how Linux numbers physical cores on the sites hpcenv knows. Cores
the site reserves for the system (``node.reserved_cores``: Frontier's low-noise core 0 of each L3
region, Aurora's cores 0 and 52) are never given to a rank. Each local rank gets a contiguous
*domain* of ``cores_per_rank`` usable cores inside one socket when the ranks divide evenly over
sockets. With oneCCL, the last ``ccl_workers`` cores of each domain run the CCL workers and are
kept out of the compute threads' domain: ``OMP_NUM_THREADS``, the ``I_MPI_PIN_DOMAIN`` masks and
PALS ``--cpu-bind list:`` cover only the compute cores, and ``CCL_WORKER_AFFINITY`` lists exactly
the worker cores. With one core per rank, the one worker oneCCL always runs is pinned to
the rank's own core (its default would put every rank's worker on the node's last core).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from hpcenv.errors import ConfigError
from hpcenv.site import Site

if TYPE_CHECKING:
    from hpcenv.jobs.spec import JobSpec

# closest: Slurm binds each rank's GPUs by their cores (gres.conf Cores=); list: the launcher's
# explicit per-rank list (ALCF's mpiexec --gpu-bind=list of tiles); mask: rank-env.sh sets each
# rank's ZE_AFFINITY_MASK (tiles as FLAT devices, where --gpu-bind=list fails); all: every rank
# sees the node's GPUs and picks by LOCAL_RANK.
GpuBind = Literal["none", "closest", "list", "mask", "shared", "all"]
GPU_BIND_VAR = "HPCENV_GPU_BIND"  # read by rank-env.sh (templates/jobs/rank_env.sh.j2)
# Each local rank's ZE_AFFINITY_MASK under "mask", by local rank, space-separated (rank-env.sh).
GPU_MASKS_VAR = "HPCENV_GPU_MASKS"
# The Level Zero device hierarchy a site's jobs run under (its tuning): FLAT makes each tile a
# device, numbered GPU * tiles + tile.
HIERARCHY_VAR = "ZE_FLAT_DEVICE_HIERARCHY"


@dataclass(frozen=True)
class Placement:
    """Where one job shape's ranks run; launchers and runtimes turn it into their flags."""

    site: str
    nodes: int
    ranks_per_node: int
    ranks_per_socket: int | None
    cores_per_rank: int
    omp_threads: int
    ccl_workers: int
    gpus_per_rank: int
    gpu_bind: GpuBind
    gpu_ids: tuple[tuple[str, ...], ...]
    oversubscribed: bool
    compute_cores: tuple[tuple[int, ...], ...]
    worker_cores: tuple[tuple[int, ...], ...]
    env: dict[str, str]
    reasons: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def with_env(self, env: Mapping[str, str], reason: str) -> Placement:
        """This placement with ``env`` added (later layers win: site tuning, measured tuning
        files, MCA parameters as ``OMPI_MCA_*``), the reason recorded."""
        return replace(self, env={**self.env, **env}, reasons=[*self.reasons, reason])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_CCL_WORKERS = 4


# The components that put oneCCL in an image: oneCCL itself, and torch-ccl (which bundles its
# own oneCCL: intel/torch-ccl README, "oneCCL ... is bundled").
ONECCL_COMPONENTS = ("oneccl", "torch-ccl")


def _recipe_has_oneccl(recipe: str | None) -> bool:
    """Whether the recipe (built-in name or file; the lock is resolved from its components)
    puts oneCCL in the image (a required component: an optional one the lock may leave out). A
    recipe hpcenv cannot read (an ``--image`` of unknown content)
    has none it knows of."""
    if recipe is None:
        return False
    from hpcenv.errors import ConfigError
    from hpcenv.recipe import load_recipe

    try:
        loaded = load_recipe(recipe)
    except ConfigError:
        return False
    return any(loaded.requires(c) for c in ONECCL_COMPONENTS)  # optional ones may be left out


def default_ccl_workers(site: Site, recipe: str | None) -> int:
    """oneCCL workers by default only where oneCCL is in play: the recipe's components (not its
    name: ``torch-nccl`` has none) or the site's tuning."""
    uses_ccl = _recipe_has_oneccl(recipe) or any(k.startswith("CCL_") for k in site.tuning)
    return DEFAULT_CCL_WORKERS if uses_ccl else 0


def core_ranges(cores: tuple[int, ...]) -> str:
    """``(0,1,2,5)`` -> ``0-2,5``."""
    out: list[str] = []
    start = prev = cores[0]
    for c in cores[1:]:
        if c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = c
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


def _mask(cores: tuple[int, ...]) -> str:
    return hex(sum(1 << c for c in cores))


def usable_cores(site: Site) -> list[list[int]]:
    """Per socket, the cores a job may use (the site's ``node.reserved_cores`` left out)."""
    node = site.node
    reserved = set(node.reserved_cores)
    return [
        [
            c
            for c in range(s * node.cores_per_socket, (s + 1) * node.cores_per_socket)
            if c not in reserved
        ]
        for s in range(node.sockets)
    ]


def default_ranks_per_node(site: Site) -> tuple[int, str]:
    """The site's documented default, else one rank per GPU, else per socket (at least 2)."""
    node = site.node
    if node.ranks_per_node:
        return node.ranks_per_node, "the site's documented default (node.ranks_per_node)"
    if node.gpus:
        if node.gpu_tiles > 1:
            return node.gpus * node.gpu_tiles, "one per GPU tile (default)"
        return node.gpus, "one per GPU (default)"
    usable = sum(len(s) for s in usable_cores(site))
    if node.sockets == 1 and usable >= 2:
        # One rank on a one-socket node makes every collective a no-op (world size 1).
        return 2, "two on a one-socket node, so collectives cross ranks (default)"
    return node.sockets, "one per socket (default)"


def place(
    site: Site,
    nodes: int = 1,
    ranks_per_node: int | None = None,
    *,
    cores_per_rank: int | None = None,
    ccl_workers: int | None = None,
    recipe: str | None = None,
    force: bool = False,
    gpus_per_rank: int | None = None,
    gpus_per_node: int | None = None,
) -> Placement:
    """The placement of ``nodes`` x ``ranks_per_node`` ranks on ``site``.

    Defaults: the site's ``node.ranks_per_node``, else one rank per GPU, else one per socket
    (two on a one-socket node); usable cores split evenly among a socket's ranks. Raises
    ConfigError on over-subscription (more cores asked than the node leaves to jobs, or no core
    left for compute threads after the CCL workers) unless ``force``. GPUs: ``gpus_per_rank``
    (Slurm ``--gpus-per-task``) and ``gpus_per_node`` default to every GPU (or tile) split evenly
    among a node's ranks; more ranks than GPUs would share them without a per-rank binding, and
    that is a ConfigError too unless ``force`` (``gpus_per_rank=0``: CPU-only ranks).
    """
    node = site.node
    sockets = node.sockets
    sockets_cores = usable_cores(site)
    flat = [c for sc in sockets_cores for c in sc]
    per_socket = min(len(sc) for sc in sockets_cores)
    cores = len(flat)
    if nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    reasons: list[str] = []
    if node.reserved_cores:
        reasons.append(
            f"cores {core_ranges(tuple(node.reserved_cores))} reserved for the system "
            f"(node.reserved_cores): {cores} of {node.cores} cores usable"
        )
    if ranks_per_node is None:
        ranks_per_node, why = default_ranks_per_node(site)
        reasons.append(f"{ranks_per_node} ranks per node: {why}")
    if ranks_per_node < 1:
        raise ConfigError("--ranks-per-node must be at least 1")
    k = ranks_per_node
    workers = default_ccl_workers(site, recipe) if ccl_workers is None else ccl_workers
    if workers < 0:
        raise ConfigError("--ccl-workers must be >= 0")

    per_socket_ranks: int | None = None
    if k % sockets == 0 and k // sockets <= per_socket:
        per_socket_ranks = k // sockets
    if cores_per_rank is None:
        if per_socket_ranks:
            cores_per_rank = max(1, per_socket // per_socket_ranks)
            reasons.append(
                f"{per_socket_ranks} rank(s) per socket x {sockets} socket(s); "
                f"{per_socket} usable cores per socket -> {cores_per_rank} cores per rank"
            )
        else:
            cores_per_rank = max(1, cores // k)
            reasons.append(
                f"{k} ranks do not split evenly over {sockets} socket(s); "
                f"{cores} usable cores / {k} -> {cores_per_rank} cores per rank, "
                "ranks may span sockets"
            )
    elif cores_per_rank < 1:
        raise ConfigError("cores per rank must be at least 1")
    if per_socket_ranks and per_socket_ranks * cores_per_rank > per_socket:
        per_socket_ranks = None  # an explicit cores_per_rank that does not fit a socket
    shared_worker = False
    if ccl_workers is None and workers and workers >= cores_per_rank == 1:
        # oneCCL always runs a worker; left to CCL_WORKER_AFFINITY=auto, every rank's worker
        # lands on the node's last core. One worker per rank on the rank's own core instead.
        reasons.append(
            "1 core per rank: one oneCCL worker shares the rank's core (oneCCL always runs "
            "one; its default affinity puts every rank's worker on the node's last core)"
        )
        workers, shared_worker = 1, True
    elif ccl_workers is None and workers and workers >= cores_per_rank:
        # The default must leave a compute core: fewer workers.
        reasons.append(
            f"{cores_per_rank} core(s) per rank leave room for {max(0, cores_per_rank - 1)} "
            f"oneCCL worker(s), not the default {workers}"
        )
        workers = max(0, cores_per_rank - 1)

    problems: list[str] = []
    if k * cores_per_rank > cores:
        problems.append(
            f"{k} ranks x {cores_per_rank} cores = {k * cores_per_rank} cores per node, "
            f"but a {site.name} node has {cores} usable ({sockets} x {node.cores_per_socket}"
            + (f", {len(node.reserved_cores)} reserved" if node.reserved_cores else "")
            + ")"
        )
    if workers >= cores_per_rank and not shared_worker:
        problems.append(
            f"{workers} CCL workers leave no core of a rank's {cores_per_rank} for compute threads"
        )
    if problems and not force:
        raise ConfigError("over-subscription: " + "; ".join(problems) + " (use --force to allow)")
    oversubscribed = bool(problems)
    if oversubscribed:
        reasons.append("FORCED over-subscription: " + "; ".join(problems))

    compute: list[tuple[int, ...]] = []
    worker: list[tuple[int, ...]] = []
    for i in range(k):
        if per_socket_ranks:
            socket = sockets_cores[i // per_socket_ranks]
            start = (i % per_socket_ranks) * cores_per_rank
            domain = tuple(socket[start + j] for j in range(cores_per_rank))
        else:
            domain = tuple(flat[(i * cores_per_rank + j) % cores] for j in range(cores_per_rank))
        n_compute = max(1, cores_per_rank - workers)
        compute.append(domain[:n_compute])
        if workers < cores_per_rank:
            worker.append(domain[n_compute:])
        else:  # forced: workers share the rank's cores (oneCCL needs one core per worker)
            worker.append(tuple(domain[j % cores_per_rank] for j in range(workers)))
    omp = max(1, cores_per_rank - workers)
    if shared_worker:
        reasons.append(f"OMP_NUM_THREADS={omp}: the compute thread and the worker share a core")
    elif workers:
        reasons.append(
            f"{workers} oneCCL worker(s) per rank on the last cores of its domain "
            f"-> OMP_NUM_THREADS={omp}; compute and worker cores are disjoint"
        )
    else:
        reasons.append(f"OMP_NUM_THREADS={omp}: one thread per core of the rank's domain")

    gpr, gpu_bind, gpu_ids = _gpus(site, k, gpus_per_rank, gpus_per_node, force, reasons)
    if gpu_bind == "closest":
        gpu_ids = _closest(site, compute, gpr, gpu_ids, reasons)
    env = {
        "OMP_NUM_THREADS": str(omp),
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
        "KMP_BLOCKTIME": "1",
        "I_MPI_PIN_DOMAIN": "[" + ",".join(_mask(d) for d in compute) + "]",
    }
    if gpu_bind in ("closest", "list", "mask"):
        # rank-env.sh: LOCAL_RANK then counts the rank's own devices (0 with one per rank).
        env[GPU_BIND_VAR] = gpu_bind
    if gpu_bind == "mask":
        env[GPU_MASKS_VAR] = " ".join(",".join(ids) for ids in gpu_ids)
    if workers:
        env["CCL_WORKER_COUNT"] = str(workers)
        env["CCL_WORKER_AFFINITY"] = ",".join(str(c) for d in worker for c in d)
    reasons.append("KMP_BLOCKTIME=1: threads stop spinning soon after a parallel region")

    return Placement(
        site=site.name,
        nodes=nodes,
        ranks_per_node=k,
        ranks_per_socket=per_socket_ranks,
        cores_per_rank=cores_per_rank,
        omp_threads=omp,
        ccl_workers=workers,
        gpus_per_rank=gpr,
        gpu_bind=gpu_bind,
        gpu_ids=tuple(gpu_ids),
        oversubscribed=oversubscribed,
        compute_cores=tuple(compute),
        worker_cores=tuple(worker) if workers else tuple(() for _ in compute),
        env=env,
        reasons=reasons,
    )


def _gpus(
    site: Site,
    k: int,
    per_rank: int | None,
    per_node: int | None,
    force: bool,
    reasons: list[str],
) -> tuple[int, GpuBind, list[tuple[str, ...]]]:
    """(GPUs per rank, binding, each rank's GPU ids) for ``k`` ranks per node: explicit counts
    must divide and fit the node; ranks that would share GPUs unbound are refused."""
    node = site.node
    tiles = node.gpu_tiles
    units = node.gpus * tiles  # what a rank binds to: a GPU, or a tile of one
    unit = "GPU tile" if tiles > 1 else "GPU"
    none: list[tuple[str, ...]] = [() for _ in range(k)]
    if not units:
        if per_rank or per_node:
            raise ConfigError(
                f"site {site.name!r} has no GPUs: leave out --gpus-per-task/--gpus-per-node"
            )
        return 0, "none", none
    avail = units
    if per_node is not None:
        if per_node > units:
            raise ConfigError(f"--gpus-per-node {per_node}: a {site.name} node has {units} {unit}s")
        avail = per_node
    if per_rank is not None:
        if per_node is not None and per_rank * k != per_node:
            raise ConfigError(
                f"--gpus-per-task {per_rank} x {k} ranks per node = {per_rank * k}, but "
                f"--gpus-per-node {per_node}: give one of them or make them agree"
            )
        if per_rank * k > avail:
            raise ConfigError(
                f"{k} ranks per node x --gpus-per-task {per_rank} = {per_rank * k} {unit}s, "
                f"but a {site.name} node has {avail}: fewer ranks per node or GPUs per task"
            )
        gpr = per_rank
    elif per_node == 0:
        gpr = 0
    elif k <= avail and avail % k == 0:
        gpr = avail // k
    elif k <= avail:
        raise ConfigError(
            f"{avail} {unit}s per node do not divide among {k} ranks per node: give "
            f"--gpus-per-task, or a rank count that divides {avail}"
        )
    elif force:
        reasons.append(f"{k} ranks > {avail} {unit}s: FORCED, shared, no per-rank GPU binding")
        return 0, "shared", none
    else:
        where = f"--gpus-per-node {per_node}" if per_node is not None else f"a {site.name} node"
        raise ConfigError(
            f"{k} ranks per node > {avail} {unit}s ({where}): ranks would share GPUs "
            f"without a per-rank binding; give at most {avail} ranks per node, "
            "--gpus-per-task 0 for CPU-only ranks, or --force"
        )
    if gpr == 0:
        reasons.append("no GPU per rank (--gpus-per-task 0 / --gpus-per-node 0)")
        return 0, "none", none
    ids = [f"{u // tiles}.{u % tiles}" if tiles > 1 else str(u) for u in range(units)]
    slices = [tuple(ids[i * gpr : (i + 1) * gpr]) for i in range(k)]
    if site.gpu.visible == "node" and tiles == 1:
        # NERSC's and CSCS's PyTorch examples: every rank sees the node's GPUs and
        # set_device(LOCAL_RANK) picks local rank i's GPU i.
        reasons.append(
            f"{avail} {unit}s / {k} ranks: every rank sees all of them (gpu.visible: node) "
            f"and uses GPU LOCAL_RANK"
        )
        return gpr, "all", slices
    if tiles > 1 and site.tuning.get(HIERARCHY_VAR) == "FLAT":
        # ALCF running-jobs-aurora.md: mpiexec --gpu-bind=list has "several limitations ...
        # (b) With a different device-discovery hierarchy, ZE_FLAT_DEVICE_HIERARCHY=FLAT" (its
        # FLAT example fails: "Failed to parse implicit GPU selection"); under FLAT each tile is
        # a device and ALCF binds by ZE_AFFINITY_MASK=<device> per rank. rank-env.sh sets it.
        flat = [tuple(str(u) for u in range(i * gpr, (i + 1) * gpr)) for i in range(k)]
        reasons.append(
            f"{avail} {unit}s / {k} ranks -> {gpr} per rank, as FLAT devices (tile t of GPU g "
            f"is device {tiles}g+t), bound by ZE_AFFINITY_MASK per rank"
        )
        return gpr, "mask", flat
    # Tiles are bound by explicit list (ALCF's --gpu-bind=list), whole GPUs closest.
    bind: GpuBind = "list" if tiles > 1 else "closest"
    reasons.append(f"{avail} {unit}s / {k} ranks -> {gpr} {unit}(s) per rank, bound {bind}")
    return gpr, bind, slices


def _closest(
    site: Site,
    compute: list[tuple[int, ...]],
    gpr: int,
    slices: list[tuple[str, ...]],
    reasons: list[str],
) -> list[tuple[str, ...]]:
    """Each rank's GPUs as Slurm's ``--gpu-bind=closest`` picks them: the GPUs closest to the
    rank's cores (``node.gpu_closest``, gres.conf ``Cores=``), in core order. Frontier's 8
    ranks on cores 1-7, 9-15, ... get GCDs 4,5,2,3,6,7,0,1 (OLCF pytorch_frontier.rst, the
    ``numa_api`` output of ``srun -n8 -c7 --gpus-per-task=1 --gpu-bind=closest``). A rank
    whose cores are closest to fewer GPUs than it asks for gets what Slurm picks, which the
    plan cannot say: the ids then keep the GPUs' order."""
    node = site.node
    out: list[tuple[str, ...]] = []
    for cores, fallback in zip(compute, slices, strict=True):
        near: list[str] = []
        for c in cores:
            g = str(node.closest_gpu(c))
            if g not in near:
                near.append(g)
        out.append(tuple(near[:gpr]) if len(near) >= gpr else fallback)
    if out != slices:
        reasons.append(
            "GPUs closest to each rank's cores (node.gpu_closest): "
            + " ".join(",".join(ids) for ids in out)
        )
    return out


def tasks_per_node(job: JobSpec) -> int | None:
    """Ranks per node from Slurm's options: ``-n`` is the total (as in Slurm, not per node),
    ``--ntasks-per-node`` per node; both must agree, and the total must divide over the nodes
    (hpcenv puts the same number of ranks on every node). None: the site's default."""
    n, per, nodes = job.ntasks, job.ranks_per_node, job.nodes
    if n is None:
        return per
    if per is not None and per * nodes != n:
        raise ConfigError(
            f"-n/--ntasks {n} is the total number of tasks (as in Slurm), but {nodes} node(s) x "
            f"--ntasks-per-node {per} = {per * nodes}: give one of them or make them agree"
        )
    if n % nodes:
        raise ConfigError(
            f"-n/--ntasks {n} (the total, as in Slurm) does not divide over -N/--nodes {nodes}: "
            f"give a multiple of {nodes}, or --ntasks-per-node"
        )
    return n // nodes


def cores_per_task(site: Site, job: JobSpec) -> int | None:
    """Physical cores per rank from ``-c/--cpus-per-task`` (the scheduler's CPUs: hardware
    threads where the site's Slurm counts them, ``scheduler.cpus_per_core``) or
    ``--cores-per-rank``; both given must agree."""
    c, per = job.cpus_per_task, site.scheduler.cpus_per_core
    if c is None:
        return job.cores_per_rank
    if c % per:
        raise ConfigError(
            f"-c/--cpus-per-task {c}: {site.name}'s scheduler counts {per} CPUs per core "
            f"(scheduler.cpus_per_core); give a multiple of {per}"
        )
    if job.cores_per_rank is not None and job.cores_per_rank * per != c:
        raise ConfigError(
            f"-c/--cpus-per-task {c} and --cores-per-rank {job.cores_per_rank} disagree "
            f"({per} CPU(s) per core on {site.name}): give one of them"
        )
    return c // per


def job_placement(site: Site, job: JobSpec) -> Placement:
    """The placement of a job: its ranks for an MPI launch, else one task that gets every core
    the site leaves to jobs (not the reserved ones). The one place jobs (the plan) and the
    measured-tuning lookup for a job (:func:`hpcenv.jobs.measured.for_job`) derive it."""
    cores = cores_per_task(site, job)
    if job.launch == "mpi":
        return place(
            site,
            job.nodes,
            tasks_per_node(job),
            cores_per_rank=cores,
            ccl_workers=job.ccl_workers,
            recipe=job.recipe,
            force=job.force,
            gpus_per_rank=job.gpus_per_task,
            gpus_per_node=job.gpus_per_node,
        )
    if job.ntasks not in (None, 1):
        raise ConfigError("--single runs one task in the batch shell: leave out -n/--ntasks")
    return place(
        site,
        job.nodes,
        1,
        cores_per_rank=cores or sum(len(c) for c in usable_cores(site)),
        ccl_workers=job.ccl_workers or 0,
        recipe=job.recipe,
        force=job.force,
        gpus_per_rank=job.gpus_per_task,
        gpus_per_node=job.gpus_per_node,
    )
