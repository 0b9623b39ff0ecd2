"""mpi4py's world in the image: the rank count, every rank on the image's architecture (under
emulation too), the MPI library it loaded, and an exact integer allreduce (1 + 2 + ... + N)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hpcenv.smoke._target import Target


@pytest.mark.light
def test_mpi4py_world(
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
    image_lock: dict[str, Any] | None,
) -> None:
    requires("mpi4py")
    doc = run_check(target.mpirun, "mpi_hello.py")
    record(library=doc["library"], machines=doc["machines"], mpi4py=doc["mpi4py"])
    assert doc["world_size"] == target.ranks
    assert doc["rank_sum"] == target.ranks * (target.ranks + 1) // 2
    assert len(doc["machines"]) == target.ranks
    if image_lock is not None:  # every rank runs on the architecture the image was built for
        assert set(doc["machines"]) == {image_lock["arch"]}, doc["machines"]
