"""Bench section ``ccl`` (Horovod over CCL vs MPI vs Gloo) without podman: the container and
``podman image exists`` are faked; the real run is ``hpcenv bench --section ccl``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import hpcenv.bench.ccl as ccl
from hpcenv.bench.context import BenchConfig, BenchContext
from hpcenv.bench.runner import SECTION_NAMES
from hpcenv.jobs.placement import place
from hpcenv.shells import Result
from hpcenv.site import load_site

SIZE = 64 << 20


def _ctx(tmp_path: Path) -> BenchContext:
    site = load_site("local")
    cfg = BenchConfig(out=tmp_path, sections=("ccl",))
    return BenchContext(
        cfg=cfg, image="x", echo=lambda line: None, site=site, tuning=place(site, 1, 2)
    )


def _exists(rc: int) -> Any:
    return lambda *args, check=True: subprocess.CompletedProcess(args, rc, "", "")


class FakeContainer:
    """Answers each flavour's allreduce_horovod.py run with a canned document."""

    bw = {"ccl": 0.9, "mpi": 1.0, "gloo": 0.5}
    calls: list[tuple[str, dict[str, str]]] = []

    def __init__(self, image: str, volumes: list[str]) -> None:
        self.image = image

    def __enter__(self) -> FakeContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, command: str, env: dict[str, str], timeout: float) -> Result:
        self.calls.append((command, env))
        name = env["HOROVOD_CPU_OPERATIONS"]
        doc = {
            "sweep": [{"bytes": SIZE, "busbw_GBps": self.bw[name], "mismatches": 0}],
            "exact": [{"mismatches": 0}],
            "built": {"ccl": True},
        }
        log = ""
        if env.get("CCL_LOG_LEVEL") == "debug":  # the transport probe
            log = "|CCL_INFO| libfabric version: 2.1.0-impi\n|CCL_DEBUG| select nic: has_shm 0\n"
        return Result("image", command, env, 0, log, "", 1.0, doc)


def test_ccl_is_a_bench_section() -> None:
    assert "ccl" in SECTION_NAMES


def test_not_built_is_reported_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ccl, "podman", _exists(1))
    sec = ccl.ccl_section(_ctx(tmp_path))
    assert sec.error is None and "hpcenv build --site local --recipe horovod-ccl" in sec.text[0]
    assert sec.headline[0].values == "not measured (image not built)"


def test_ratio_reason_and_placement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ccl, "podman", _exists(0))
    monkeypatch.setattr(ccl, "Container", FakeContainer)
    FakeContainer.calls = []
    sec = ccl.ccl_section(_ctx(tmp_path))
    head = sec.headline[0]
    assert head.ratio == "0.90x" and "below 1: oneCCL's OFI transport ran without" in head.values
    assert "has_shm 0" in head.values and "libfabric 2.1.0-impi" in head.values
    assert "Gloo 0.5" in head.values and "CCL / Gloo 1.80x" in head.values
    assert len(FakeContainer.calls) == 10  # 3 interleaved rounds x 3 flavours + the probe
    assert sec.data["transport_probe"]["has_shm"] == ["0"]
    for command, env in FakeContainer.calls:
        assert env["CCL_WORKER_COUNT"] == "1" and env["CCL_WORKER_AFFINITY"] == "0,1"
        if env["HOROVOD_CPU_OPERATIONS"] == "gloo":
            assert command.startswith("horovodrun -np 2 -H localhost:2 --gloo bash -c ")
        else:
            assert command.startswith("mpirun -np 2 --map-by ppr:2:socket:pe=1 --bind-to core")


def test_wrong_results_fail_the_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Wrong(FakeContainer):
        def run(self, command: str, env: dict[str, str], timeout: float) -> Result:
            res = super().run(command, env, timeout)
            assert res.doc is not None
            res.doc["exact"] = [{"mismatches": 3}]
            return res

    monkeypatch.setattr(ccl, "podman", _exists(0))
    monkeypatch.setattr(ccl, "Container", Wrong)
    with pytest.raises(RuntimeError, match="3 wrong results"):
        ccl.ccl_section(_ctx(tmp_path))


def test_no_cause_claimed_without_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Quiet(FakeContainer):
        def run(self, command: str, env: dict[str, str], timeout: float) -> Result:
            res = super().run(command, env, timeout)
            res.stdout = ""
            return res

    monkeypatch.setattr(ccl, "podman", _exists(0))
    monkeypatch.setattr(ccl, "Container", Quiet)
    head = ccl.ccl_section(_ctx(tmp_path)).headline[0]
    assert "below 1: cause not identified in this run" in head.values, head.values


def test_no_probe_when_ccl_is_not_slower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Fast(FakeContainer):
        bw = {"ccl": 1.2, "mpi": 1.0, "gloo": 0.5}

    monkeypatch.setattr(ccl, "podman", _exists(0))
    monkeypatch.setattr(ccl, "Container", Fast)
    Fast.calls = []
    head = ccl.ccl_section(_ctx(tmp_path)).headline[0]
    assert head.ratio == "1.20x" and "below 1" not in head.values and len(Fast.calls) == 9
