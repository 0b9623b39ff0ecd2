"""``hpcenv bench --section mpi-abi`` (issue 38): one program compiled twice with MPICH 5.0.2,
by ``mpicc`` (libmpi.so.12) and by ``mpicc_abi`` (libmpi_abi.so.1), each checked to link its
own library, run by MPICH's own ``mpiexec`` with exact sums. These run the real compilers and
launcher from ``scripts/mpi-abi-setup.sh``'s prefix (``make host``); the section's rounds are
``make bench``'s."""

from __future__ import annotations

from pathlib import Path

import pytest
from requirements import HOST, need_file

from hpcenv.bench import mpiabi
from hpcenv.bench.context import BenchConfig, BenchContext
from hpcenv.site import load_site


def _ctx(tmp_path: Path) -> BenchContext:
    cfg = BenchConfig(out=tmp_path / "out")
    return BenchContext(cfg=cfg, image="img:1", echo=lambda line: None, site=load_site("local"))


@pytest.fixture
def prefix() -> Path:
    path = mpiabi.mpich5_prefix()
    need_file(path / "bin" / "mpicc_abi", "MPICH 5.0.2's mpicc_abi", "the section compiles", HOST)
    return path


def test_both_builds_link_their_own_library_and_sum_exactly(prefix: Path, tmp_path: Path) -> None:
    binaries = mpiabi.compile_builds(prefix, tmp_path)
    assert mpiabi._needed(binaries["native"]) == ["libmpi.so.12", "libc.so.6"]
    assert mpiabi._needed(binaries["abi"]) == ["libmpi_abi.so.1", "libc.so.6"]
    for binary in binaries.values():
        doc, seconds = mpiabi.run_once(prefix, binary, 1 << 20, 2)
        assert doc["library"] == "MPICH Version:      5.0.2" and doc["mismatches"] == 0
        assert doc["ranks"] == 2 and doc["busbw_GBps"] > 0 and seconds > 0
        init_only, _ = mpiabi.run_once(prefix, binary, 0, 0)
        assert init_only["busbw_GBps"] == 0 and init_only["iters"] == 0


def test_a_build_that_links_the_other_library_is_refused(
    prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    swapped = {"native": ("mpicc", "libmpi_abi.so.1"), "abi": ("mpicc_abi", "libmpi.so.12")}
    monkeypatch.setattr(mpiabi, "BUILDS", swapped)
    with pytest.raises(RuntimeError, match=r"allreduce-native links \['libmpi.so.12'"):
        mpiabi.compile_builds(prefix, tmp_path)


def test_without_mpich5_both_targets_say_not_measured_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_SITE_ROOT", str(tmp_path / "none"))
    sec = mpiabi.mpi_abi_section(_ctx(tmp_path))
    assert [(h.goal, h.value) for h in sec.headline] == [(">= 0.97", None), ("<= 1.05", None)]
    assert all("scripts/mpi-abi-setup.sh" in h.note for h in sec.headline)
    assert sec.headline[0].met is None


def test_the_section_reports_medians_of_paired_rounds(
    prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two quick rounds for real (small message): both builds ran in each, the ratios are
    ABI / native of the same round, and the targets carry issue 38's goals."""
    monkeypatch.setattr(mpiabi, "SIZE", 1 << 20)
    monkeypatch.setattr(mpiabi, "ITERS", 2)
    ctx = _ctx(tmp_path)
    ctx.cfg.quick = True
    sec = mpiabi.mpi_abi_section(ctx)
    runs = sec.data["runs"]
    assert [r["build"] for r in runs] == ["native", "abi", "abi", "native", "native", "abi"]
    for i, ratio in enumerate(sec.data["busbw_ratios"]):
        by = {r["build"]: r["busbw_GBps"] for r in runs if r["round"] == i + 1}
        assert ratio == pytest.approx(by["abi"] / by["native"])
    assert [h.goal for h in sec.headline] == [">= 0.97", "<= 1.05"]
    assert all(h.value is not None and h.value > 0 for h in sec.headline)
