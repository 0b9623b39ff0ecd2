"""daal4py K-Means: SPMD on 2 ranks (MPICH) against batch daal4py and stock scikit-learn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpcenv.smoke._target import Target

REL_TOL = 1e-6


def test_kmeans_daal4py(
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
    image_lock: dict[str, Any] | None,
) -> None:
    requires("daal4py")
    opts = (image_lock or {}).get("components", {}).get("daal4py", {}).get("options", {})
    launcher = f"{opts.get('launcher', 'mpiexec.mpich')} -n {target.ranks}"
    doc = run_check(
        launcher,
        "kmeans_daal4py.py",
        env={"LD_LIBRARY_PATH": opts.get("lib_dir", target.mpich_abi_lib)},
    )
    spmd, batch, skl = doc["daal4py_spmd"], doc["daal4py_batch"], doc["sklearn"]
    record(
        spmd_vs_batch_rel_diff=doc["spmd_vs_batch_rel_diff"],
        sklearn_vs_batch_rel_diff=doc["sklearn_vs_batch_rel_diff"],
        spmd_seconds=round(spmd["seconds"], 3),
        batch_seconds=round(batch["seconds"], 3),
        sklearn_seconds=round(skl["seconds"], 3),
        iterations_batch=batch["iterations"],
        iterations_spmd=spmd["iterations"],
        rows=doc["rows"],
        timed_rounds=len(batch.get("seconds_by_round", [batch["seconds"]])),
        spmd_ms_per_iteration=round(spmd["seconds"] / max(1, spmd["iterations"]) * 1e3, 3),
        batch_ms_per_iteration=round(batch["seconds"] / max(1, batch["iterations"]) * 1e3, 3),
        sklearn_ms_per_iteration=round(skl["seconds"] / max(1, skl["iterations"]) * 1e3, 3),
    )
    assert doc["world_size"] == target.ranks
    assert doc["spmd_vs_batch_rel_diff"] <= REL_TOL
    assert doc["sklearn_vs_batch_rel_diff"] <= REL_TOL
    # same fixed point; the SPMD driver may count one more (convergence-detecting) pass
    assert abs(spmd["iterations"] - batch["iterations"]) <= 1
    assert max(spmd["iterations"], batch["iterations"], skl["iterations"]) <= doc["max_iterations"]
    assert abs(spmd["objective"] - batch["objective"]) <= REL_TOL * batch["objective"]
    assert abs(skl["objective"] - batch["objective"]) <= REL_TOL * batch["objective"]
    # the centroids moved: the runs did real work rather than echo the initial centroids
    assert doc["init_shift"] > 1e-3
    assert min(spmd["seconds"], batch["seconds"], skl["seconds"]) > 0
