"""daal4py K-Means: distributed (SPMD) on N ranks vs batch on all data vs stock scikit-learn.

Run: ``LD_LIBRARY_PATH=/opt/mpich-abi/lib mpiexec.mpich -n 2 python kmeans_daal4py.py`` (SPMD
needs an MPICH-ABI ``libmpi.so.12``). One deterministic float64 dataset of overlapping Gaussian
blobs is defined chunk by chunk: chunk ``c`` comes from a generator seeded ``(seed, c)``, so rank
``r`` makes only chunk ``r``. All three runs start from the same centroids and do the same number
of Lloyd iterations. After the SPMD run every rank finalizes MPI and ranks > 0 exit; rank 0 then
times batch daal4py and scikit-learn on the whole dataset with the cores to itself, in
``--rounds`` interleaved rounds (the order alternates) and reports each one's median: one shot of
each (about 0.5 s) let a moment of load elsewhere on a shared machine move their ratio by 30 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import daal4py as d4p
import numpy as np
from _bench import emit, platform_info


def centers(seed: int, k: int, d: int) -> np.ndarray:
    return np.random.default_rng([seed, 0]).uniform(-4.0, 4.0, size=(k, d))


def chunk(seed: int, index: int, rows: int, k: int, d: int, spread: float) -> np.ndarray:
    """Chunk ``index`` of the dataset: ``rows`` points drawn around the ``k`` centers."""
    rng = np.random.default_rng([seed, 1, index])
    labels = rng.integers(k, size=rows)
    return centers(seed, k, d)[labels] + rng.normal(scale=spread, size=(rows, d))


def initial_centroids(seed: int, k: int, d: int, spread: float) -> np.ndarray:
    """One noisy draw per blob, from its own generator: every rank gets the same array."""
    return centers(seed, k, d) + np.random.default_rng([seed, 2]).normal(scale=spread, size=(k, d))


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """``||a - b||_F / ||b||_F``."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000, help="total rows, split over ranks")
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--spread", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--spmd-threads", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="batch/sklearn threads (0: all)")
    ap.add_argument("--rounds", type=int, default=5, help="timed batch/sklearn rounds (median)")
    args = ap.parse_args()
    k, d, iters = args.clusters, args.features, args.iters
    init = initial_centroids(args.seed, k, d, args.spread)

    d4p.daalinit(args.spmd_threads)
    rank, nprocs = d4p.my_procid(), d4p.num_procs()
    rows = args.rows // nprocs
    local = chunk(args.seed, rank, rows, k, d, args.spread)
    algo = d4p.kmeans(k, iters, fptype="double", accuracyThreshold=0.0, distributed=True)
    t0 = time.perf_counter()
    spmd = algo.compute(local, init)
    spmd_s = time.perf_counter() - t0
    spmd_centroids = None if spmd.centroids is None else np.array(spmd.centroids)
    d4p.daalfini()
    if rank != 0:
        return
    if spmd_centroids is None:
        raise SystemExit("SPMD K-Means returned no centroids on rank 0")

    data = np.concatenate([chunk(args.seed, c, rows, k, d, args.spread) for c in range(nprocs)])
    d4p.daalinit(args.threads or os.cpu_count() or 1)
    threads = d4p.num_threads()

    import sklearn
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    def run_batch() -> Any:
        return d4p.kmeans(k, iters, fptype="double", accuracyThreshold=0.0).compute(data, init)

    def run_sklearn() -> Any:
        with threadpool_limits(limits=threads):
            km = KMeans(k, init=init, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd")
            return km.fit(data)

    seconds: dict[str, list[float]] = {"batch": [], "sklearn": []}
    fitted: dict[str, Any] = {}
    runs = {"batch": run_batch, "sklearn": run_sklearn}
    for round_index in range(max(1, args.rounds)):
        order = ("batch", "sklearn") if round_index % 2 == 0 else ("sklearn", "batch")
        for name in order:
            t0 = time.perf_counter()
            fitted[name] = runs[name]()
            seconds[name].append(time.perf_counter() - t0)
    batch, km = fitted["batch"], fitted["sklearn"]
    batch_s, sklearn_s = (statistics.median(seconds[n]) for n in ("batch", "sklearn"))
    batch_centroids = np.array(batch.centroids)

    result: dict[str, Any] = {
        "check": "kmeans_daal4py",
        "world_size": nprocs,
        "rows": rows * nprocs,
        "features": d,
        "clusters": k,
        "max_iterations": iters,
        "dtype": "float64",
        "daal4py_spmd": {
            "seconds": spmd_s,
            "threads_per_rank": args.spmd_threads,
            "iterations": int(np.asarray(spmd.nIterations).ravel()[0]),
            "objective": float(np.asarray(spmd.objectiveFunction).ravel()[0]),
        },
        "daal4py_batch": {
            "seconds": batch_s,
            "seconds_by_round": seconds["batch"],
            "threads": threads,
            "iterations": int(np.asarray(batch.nIterations).ravel()[0]),
            "objective": float(np.asarray(batch.objectiveFunction).ravel()[0]),
        },
        "sklearn": {
            "seconds": sklearn_s,
            "seconds_by_round": seconds["sklearn"],
            "threads": threads,
            "iterations": int(km.n_iter_),
            "objective": float(km.inertia_),
            "version": sklearn.__version__,
        },
        "spmd_vs_batch_rel_diff": rel_diff(spmd_centroids, batch_centroids),
        "spmd_vs_batch_max_abs_diff": float(np.abs(spmd_centroids - batch_centroids).max()),
        "sklearn_vs_batch_rel_diff": rel_diff(km.cluster_centers_, batch_centroids),
        "centroid_norm": float(np.linalg.norm(batch_centroids)),
        "init_shift": rel_diff(batch_centroids, init),
        "platform": platform_info(),
    }
    emit(result)


if __name__ == "__main__":
    main()
