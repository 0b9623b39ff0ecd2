"""Launch tuning: derive rank placement, threads and binding from a site's node topology.

Cores are numbered socket-major (socket ``s`` owns cores ``s*C .. s*C+C-1``, first hardware
thread of each core), which is how Linux numbers physical cores on the sites hpcenv knows.
Each local rank gets a contiguous *domain* of ``cores_per_rank`` cores inside one socket when
the ranks divide evenly over sockets. With oneCCL, the last ``ccl_workers`` cores of each domain
run the CCL workers and are kept out of the compute threads' domain: ``OMP_NUM_THREADS``, the
``I_MPI_PIN_DOMAIN`` masks and PALS ``--cpu-bind list:`` cover only the compute cores, and
``CCL_WORKER_AFFINITY`` lists exactly the worker cores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hpcenv.errors import ConfigError
from hpcenv.site import Site

DEFAULT_CCL_WORKERS = 4


@dataclass(frozen=True)
class LaunchTuning:
    """Everything a launcher and the job's environment need for one job shape."""

    site: str
    nodes: int
    ranks_per_node: int
    ranks_per_socket: int | None
    cores_per_rank: int
    omp_threads: int
    ccl_workers: int
    gpus_per_rank: int
    oversubscribed: bool
    compute_cores: tuple[tuple[int, ...], ...]
    worker_cores: tuple[tuple[int, ...], ...]
    env: dict[str, str]
    srun: list[str]
    openmpi: list[str]
    jsrun: list[str]
    mpiexec: list[str]
    reasons: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_ccl_workers(site: Site, recipe: str | None) -> int:
    """oneCCL workers by default only where oneCCL is in play (recipe or site tuning)."""
    uses_ccl = (recipe is not None and "ccl" in recipe) or any(
        k.startswith("CCL_") for k in site.tuning
    )
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


def tune(
    site: Site,
    nodes: int = 1,
    ranks_per_node: int | None = None,
    *,
    cores_per_rank: int | None = None,
    ccl_workers: int | None = None,
    recipe: str | None = None,
    force: bool = False,
) -> LaunchTuning:
    """Derive the launch settings for ``nodes`` x ``ranks_per_node`` ranks on ``site``.

    Defaults: one rank per GPU, else one per socket; cores split evenly among a socket's ranks.
    Raises ConfigError on over-subscription (more cores asked than the node has, or no core left
    for compute threads after the CCL workers) unless ``force``.
    """
    node = site.node
    sockets, per_socket, gpus = node.sockets, node.cores_per_socket, node.gpus
    cores = node.cores
    if nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    reasons: list[str] = []
    if ranks_per_node is None:
        ranks_per_node = gpus or sockets
        reasons.append(
            f"{ranks_per_node} ranks per node: one per {'GPU' if gpus else 'socket'} (default)"
        )
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
                f"{per_socket} cores per socket -> {cores_per_rank} cores per rank"
            )
        else:
            cores_per_rank = max(1, cores // k)
            reasons.append(
                f"{k} ranks do not split evenly over {sockets} socket(s); "
                f"{cores} cores / {k} -> {cores_per_rank} cores per rank, ranks may span sockets"
            )
    elif cores_per_rank < 1:
        raise ConfigError("cores per rank must be at least 1")
    if per_socket_ranks and per_socket_ranks * cores_per_rank > per_socket:
        per_socket_ranks = None  # an explicit cores_per_rank that does not fit a socket

    problems: list[str] = []
    if k * cores_per_rank > cores:
        problems.append(
            f"{k} ranks x {cores_per_rank} cores = {k * cores_per_rank} cores per node, "
            f"but a {site.name} node has {cores} ({sockets} x {per_socket})"
        )
    if workers >= cores_per_rank:
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
            start = (i // per_socket_ranks) * per_socket + (i % per_socket_ranks) * cores_per_rank
        else:
            start = i * cores_per_rank
        domain = tuple((start + j) % cores for j in range(cores_per_rank))
        n_compute = max(1, cores_per_rank - workers)
        compute.append(domain[:n_compute])
        if workers < cores_per_rank:
            worker.append(domain[n_compute:])
        else:  # forced: workers share the rank's cores (oneCCL needs one core per worker)
            worker.append(tuple(domain[j % cores_per_rank] for j in range(workers)))
    omp = max(1, cores_per_rank - workers)
    if workers:
        reasons.append(
            f"{workers} oneCCL worker(s) per rank on the last cores of its domain "
            f"-> OMP_NUM_THREADS={omp}; compute and worker cores are disjoint"
        )
    else:
        reasons.append(f"OMP_NUM_THREADS={omp}: one thread per core of the rank's domain")

    gpr = 0
    if gpus:
        if k <= gpus:
            gpr = gpus // k
            reasons.append(f"{gpus} GPUs / {k} ranks -> {gpr} GPU(s) per rank, bound closest")
        else:
            reasons.append(f"{k} ranks > {gpus} GPUs: GPUs shared, no per-task GPU binding")

    env = {
        "OMP_NUM_THREADS": str(omp),
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
        "KMP_BLOCKTIME": "1",
        "I_MPI_PIN_DOMAIN": "[" + ",".join(_mask(d) for d in compute) + "]",
    }
    if workers:
        env["CCL_WORKER_COUNT"] = str(workers)
        env["CCL_WORKER_AFFINITY"] = ",".join(str(c) for d in worker for c in d)
    reasons.append("KMP_BLOCKTIME=1: threads stop spinning soon after a parallel region")

    if oversubscribed:  # Slurm refuses per-node task/CPU counts beyond the node even with -O
        srun = [f"--nodes={nodes}", f"--ntasks={nodes * k}", "--overcommit"]
    else:
        srun = [f"--nodes={nodes}", f"--ntasks-per-node={k}", f"--cpus-per-task={cores_per_rank}"]
    if gpr:
        srun += [f"--gpus-per-task={gpr}", "--gpu-bind=closest"]

    if per_socket_ranks:
        openmpi = ["--map-by", f"ppr:{per_socket_ranks}:socket:pe={cores_per_rank}"]
    else:
        openmpi = ["--map-by", f"ppr:{k}:node:pe={cores_per_rank}"]
    openmpi += ["--bind-to", "none" if oversubscribed else "core"]
    if oversubscribed:
        openmpi.append("--oversubscribe")

    jsrun = ["-n", str(nodes * k), "-r", str(k), "-a", "1", "-c", str(cores_per_rank)]
    jsrun += ["-g", str(gpr), "-b", f"packed:{cores_per_rank}"]

    mpiexec = ["-n", str(nodes * k), "--ppn", str(k)]
    mpiexec += ["--cpu-bind", "list:" + ":".join(core_ranges(d) for d in compute)]

    return LaunchTuning(
        site=site.name,
        nodes=nodes,
        ranks_per_node=k,
        ranks_per_socket=per_socket_ranks,
        cores_per_rank=cores_per_rank,
        omp_threads=omp,
        ccl_workers=workers,
        gpus_per_rank=gpr,
        oversubscribed=oversubscribed,
        compute_cores=tuple(compute),
        worker_cores=tuple(worker) if workers else tuple(() for _ in compute),
        env=env,
        srun=srun,
        openmpi=openmpi,
        jsrun=jsrun,
        mpiexec=mpiexec,
        reasons=reasons,
    )
