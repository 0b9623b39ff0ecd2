"""Allreduce in every flavour the image offers: mpi4py (Open MPI), Horovod over MPI and over
Gloo, torch.distributed gloo. Each asserts exact sums and records a bandwidth sweep."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from hpcenv.smoke._asserts import assert_exact, assert_sweep, sweep_summary
from hpcenv.smoke._target import Target

SMALLEST, LARGEST = 8, 64 << 20


@dataclass(frozen=True)
class Flavor:
    name: str
    script: str
    launcher: Callable[[Target], str]
    env: dict[str, str]
    factor: int
    controller: str | None = None
    needs: tuple[str, str | None] = ("mpi4py", None)


FLAVORS = [
    Flavor("mpi4py", "allreduce_mpi.py", lambda t: t.mpirun, {}, 4, None, ("mpi4py", None)),
    Flavor(
        "horovod-mpi",
        "allreduce_horovod.py",
        lambda t: t.mpirun,
        {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi"},
        16,
        "mpi",
        ("horovod", "mpi"),
    ),
    Flavor(
        "horovod-gloo",
        "allreduce_horovod.py",
        lambda t: t.horovodrun_gloo,
        {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"},
        16,
        "gloo",
        ("horovod", "gloo"),
    ),
    Flavor(
        "torch-gloo", "allreduce_torch_gloo.py", lambda t: t.torchrun, {}, 4, None, ("torch", None)
    ),
]


@pytest.mark.parametrize("flavor", FLAVORS, ids=[f.name for f in FLAVORS])
def test_allreduce(
    flavor: Flavor,
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
) -> None:
    requires(*flavor.needs)
    sizes = (
        "--min-bytes",
        str(SMALLEST),
        "--max-bytes",
        str(LARGEST),
        "--factor",
        str(flavor.factor),
    )
    doc = run_check(flavor.launcher(target), flavor.script, *sizes, env=flavor.env)
    if flavor.controller is not None:
        assert doc["controller"] == flavor.controller, doc.get("requested")
    assert_exact(doc, target.ranks)
    rows = assert_sweep(doc, SMALLEST, LARGEST)
    record(flavor=flavor.name, **sweep_summary(rows), sweep=rows)
