"""torch.distributed ``ccl`` backend: exact allreduce where the oneCCL binding imports;
otherwise skipped with the check's precise reason (never passes without running)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hpcenv.smoke._asserts import assert_exact, assert_sweep, sweep_summary
from hpcenv.smoke._target import Target

SMALLEST, LARGEST = 8, 64 << 20


def test_torch_ccl(
    target: Target,
    run_check: Callable[..., dict[str, Any]],
    record: Callable[..., None],
    requires: Callable[..., None],
) -> None:
    requires("torch")
    doc = run_check(
        target.torchrun, "torch_ccl.py", "--min-bytes", str(SMALLEST), "--max-bytes", str(LARGEST)
    )
    if not doc["available"]:
        record(import_error=doc["import_error"], torch=doc["torch"])
        pytest.skip(doc["reason"])
    assert doc["backend"] == "ccl"
    assert_exact(doc, target.ranks)
    rows = assert_sweep(doc, SMALLEST, LARGEST)
    record(flavor="torch-ccl", **sweep_summary(rows), sweep=rows)
