"""Allreduce in every flavour the image offers: mpi4py (Open MPI), Horovod over MPI, over Gloo
and over oneCCL, torch.distributed gloo. Each asserts exact sums and records a bandwidth sweep.
Horovod over CCL also proves, from Horovod's own timeline, that CCL ran the exact checks.

Right before each sweep the target's memory copy bandwidth is measured (``memcopy.py``, one
core, about a second): the physical ceiling of a one-node allreduce, taken under the same load,
so the references can hold ``busbw / memcopy`` tightly where absolute GB/s move 3x with the hour
(see :mod:`hpcenv.smoke.references`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from hpcenv.smoke._asserts import allreduce_ops, assert_exact, assert_sweep, sweep_summary
from hpcenv.smoke._target import HOROVOD_OPS_ENV, Target, ccl_env

SMALLEST, LARGEST = 8, 64 << 20
# under qemu-user-static (``--emulated``): the sweep stops at 1 MiB with at most 20 timed ops per
# size (measured here: the default 1000 made the 8 B..1 MiB sweep take 77 s under emulation)
EMULATED_LARGEST, EMULATED_ITERS = 1 << 20, 20


@dataclass(frozen=True)
class Flavor:
    name: str
    script: str
    launcher: Callable[[Target], str]
    env: dict[str, str]
    factor: int
    controller: str | None = None
    needs: tuple[str, str | None] = ("mpi4py", None)
    # the operation Horovod's timeline must show for the exact checks (and no other); the
    # dynamic timeline costs a little in every cycle, so the bench measures without it
    ops_seen: str | None = None


FLAVORS = [
    Flavor("mpi4py", "allreduce_mpi.py", lambda t: t.mpirun, {}, 4, None, ("mpi4py", None)),
    Flavor(
        "horovod-mpi",
        "allreduce_horovod.py",
        lambda t: t.mpirun,
        HOROVOD_OPS_ENV["mpi"],
        16,
        "mpi",
        ("horovod", "mpi"),
    ),
    Flavor(
        "horovod-gloo",
        "allreduce_horovod.py",
        lambda t: t.horovodrun_gloo,
        HOROVOD_OPS_ENV["gloo"],
        16,
        "gloo",
        ("horovod", "gloo"),
    ),
    Flavor(
        "horovod-ccl",
        "allreduce_horovod.py",
        lambda t: t.mpirun,
        HOROVOD_OPS_ENV["ccl"],
        16,
        "mpi",
        ("horovod", "ccl"),
        "CCL_ALLREDUCE",
    ),
    Flavor(
        "torch-gloo", "allreduce_torch_gloo.py", lambda t: t.torchrun, {}, 4, None, ("torch", None)
    ),
]
OPS_TIMELINE = "/tmp/hpcenv-horovod-ops.json"


# mpi4py's exact sums are the check an emulated image must pass; the others are heavy there
PARAMS = [
    pytest.param(f, marks=pytest.mark.light) if f.name == "mpi4py" else pytest.param(f)
    for f in FLAVORS
]


@pytest.mark.parametrize("flavor", PARAMS, ids=[f.name for f in FLAVORS])
def test_allreduce(
    flavor: Flavor,
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
) -> None:
    requires(*flavor.needs)
    largest = EMULATED_LARGEST if target.emulated else LARGEST
    sizes: tuple[str, ...] = (
        "--min-bytes",
        str(SMALLEST),
        "--max-bytes",
        str(largest),
        "--factor",
        str(flavor.factor),
    )
    if target.emulated:
        sizes += ("--max-iters", str(EMULATED_ITERS))
    if flavor.ops_seen:
        sizes += ("--ops-timeline", OPS_TIMELINE)
    copy = run_check("", "memcopy.py", "--reps", "10")
    doc = run_check(flavor.launcher(target), flavor.script, *sizes, env=flavor.env)
    if flavor.controller is not None:
        assert doc["controller"] == flavor.controller, doc.get("requested")
    if flavor.ops_seen:
        record(ops_seen=doc["ops_seen"], ccl_env=ccl_env(target.launch_env))
        assert allreduce_ops(doc) == [flavor.ops_seen], doc["ops_seen"]
    assert_exact(doc, target.ranks)
    rows = assert_sweep(doc, SMALLEST, largest)
    record(
        flavor=flavor.name,
        **sweep_summary(rows),
        sweep=rows,
        memcopy_GBps=round(float(copy["GBps"]), 3),
    )
    if "copy_baseline" in doc:  # mpi4py: copies by the same ranks, interleaved with the sweep's
        record(copy_baseline=doc["copy_baseline"])
