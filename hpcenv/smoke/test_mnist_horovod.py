"""Data-parallel MNIST with Horovod over MPI (and over oneCCL where the image built it):
held-out accuracy and identical parameters."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hpcenv.smoke._asserts import allreduce_ops
from hpcenv.smoke._target import HOROVOD_OPS_ENV, Target, ccl_env

MIN_ACCURACY = 0.90


def step_ms(doc: dict[str, Any]) -> float:
    """Milliseconds per training step of a ``mnist_horovod.py`` run: the median epoch's (a check
    from before per-epoch timing: the whole training's mean)."""
    if "step_seconds_median" in doc:
        return round(doc["step_seconds_median"] * 1e3, 3)
    return round(doc["train_seconds"] / (doc["epochs"] * doc["steps_per_epoch"]) * 1e3, 3)


def compute_step_ms(doc: dict[str, Any]) -> float:
    """Milliseconds per step of the same training without Horovod, all ranks at once (the
    median of the windows timed after each epoch)."""
    return round(doc["compute_step_seconds"] * 1e3, 3)


def assert_ranks_trained_alike(doc: dict[str, Any]) -> None:
    """Ranks start from different seeds: the broadcast must make them equal, training keep them
    so (the same initial parameters everywhere, the same final checksum, no spread)."""
    assert len(set(doc["initial_param_sha256"])) == 1
    assert len({c["sha256"] for c in doc["param_checksums"]}) == 1, doc["param_checksums"]
    assert doc["param_max_spread"] == 0.0


def test_mnist_horovod(
    host: Any,
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
) -> None:
    requires("horovod", "mpi")
    manifest = json.loads(host.file(f"{target.mnist_dir}/manifest.json").content_string)
    doc = run_check(target.mpirun, "mnist_horovod.py", target.mnist_dir)
    record(
        accuracy=doc["test_accuracy"],
        train_seconds=round(doc["train_seconds"], 2),
        samples_per_second=round(doc["samples_per_second"], 1),
        epochs=doc["epochs"],
        final_loss=round(doc["epoch_loss"][-1], 4),
        epoch_loss=doc["epoch_loss"],
        param_checksums=doc["param_checksums"],
        step_ms=step_ms(doc),
        compute_step_ms=compute_step_ms(doc),
    )
    assert doc["world_size"] == target.ranks
    assert doc["train_samples"] == manifest["split"]["train"]
    assert doc["test_samples"] == manifest["split"]["test"]
    assert sum(doc["samples_per_rank"]) == doc["train_samples"]
    assert doc["test_accuracy"] == doc["correct"] / doc["test_samples"]
    assert doc["test_accuracy"] >= MIN_ACCURACY
    assert doc["epoch_loss"][-1] < doc["epoch_loss"][0]
    assert_ranks_trained_alike(doc)
    sums = doc["param_checksums"]
    assert sorted(c["rank"] for c in sums) == list(range(target.ranks))
    assert len({c["sum"] for c in sums}) == 1


def test_mnist_horovod_ccl(
    host: Any,
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
) -> None:
    """The same training with Horovod's CPU operations on oneCCL, CCL's workers placed by
    hpcenv (``CCL_WORKER_COUNT``/``CCL_WORKER_AFFINITY`` from the launch environment). A second,
    one-epoch run records Horovod's timeline (kept out of the timed run: a dynamic timeline
    slows every cycle) and must show CCL allreduces and no other."""
    requires("horovod", "ccl")
    env = HOROVOD_OPS_ENV["ccl"]
    doc = run_check(target.mpirun, "mnist_horovod.py", target.mnist_dir, env=env)
    proof = run_check(
        target.mpirun,
        "mnist_horovod.py",
        target.mnist_dir,
        "--epochs",
        "1",
        "--ops-timeline",
        "/tmp/hpcenv-mnist-ops.json",
        env=env,
    )
    record(
        accuracy=doc["test_accuracy"],
        ops_seen=proof["ops_seen"],
        ccl_env=ccl_env(target.launch_env),
        step_ms_ccl=step_ms(doc),
        compute_step_ms_ccl=compute_step_ms(doc),
    )
    assert doc["world_size"] == target.ranks
    assert allreduce_ops(proof) == ["CCL_ALLREDUCE"], proof["ops_seen"]
    assert doc["test_accuracy"] >= MIN_ACCURACY
    assert doc["epoch_loss"][-1] < doc["epoch_loss"][0]
    assert_ranks_trained_alike(doc)
