"""Bench section ``sif`` (the site's squashfs compressor vs Apptainer's default) with Apptainer
and the engine faked at their boundary; the real lz4 build and run is
tests/test_apptainer.py::test_an_lz4_sif_is_lz4_and_runs, the real section
``hpcenv bench --section sif`` (about 4 min here)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import hpcenv.apptainer
import hpcenv.engines
from hpcenv.bench import sifbuild
from hpcenv.bench.context import BenchConfig, BenchContext
from hpcenv.bench.runner import SECTION_NAMES
from hpcenv.site import load_site


def _ctx(tmp_path: Path, site: str = "local", quick: bool = False) -> BenchContext:
    cfg = BenchConfig(out=tmp_path / "out", sections=("sif",), quick=quick)
    return BenchContext(cfg=cfg, image="img:1", echo=lambda line: None, site=load_site(site))


class _Engine:
    def save(self, tag: str, path: Path, fmt: str) -> Path:
        path.write_bytes(b"archive of " + tag.encode())
        return path


class _Apptainer:
    """Builds take ``seconds[compression]`` of a fake clock; a SIF runs unless told not to."""

    seconds = {"lz4": 60.0, None: 150.0}
    sizes = {"lz4": 800, None: 560}
    runs_ok = True
    builds: list[Any] = []
    clock = [0.0]

    def build_from_oci_archive(self, archive: Path, sif: Path, **kw: Any) -> Path:
        comp = kw["compression"]
        type(self).builds.append((archive.read_bytes(), kw["fmt"], comp))
        self.clock[0] += self.seconds[comp]
        sif.write_bytes(b"x" * self.sizes[comp])
        return sif

    def exec(self, sif: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
        assert sif.is_file() and argv[:2] == ["python3", "-c"]
        if self.runs_ok:
            return subprocess.CompletedProcess(argv, 0, "2.13.0+cpu\n", "")
        return subprocess.CompletedProcess(argv, 1, "", "Traceback\nImportError: libz.so\n")


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> type[_Apptainer]:
    monkeypatch.setattr(hpcenv.engines, "get_engine", lambda name: _Engine())
    monkeypatch.setattr(hpcenv.apptainer, "Apptainer", _Apptainer)
    monkeypatch.setattr(sifbuild.time, "monotonic", lambda: _Apptainer.clock[0])
    _Apptainer.builds, _Apptainer.runs_ok, _Apptainer.clock = [], True, [0.0]
    return _Apptainer


def test_sif_is_a_bench_section() -> None:
    assert "sif" in SECTION_NAMES


def test_the_sites_compressor_and_the_default_convert_the_same_archive(
    tmp_path: Path, fakes: type[_Apptainer]
) -> None:
    sec = sifbuild.sif_section(_ctx(tmp_path))
    assert fakes.builds == [
        (b"archive of img:1", "oci-archive", "lz4"),
        (b"archive of img:1", "oci-archive", None),
    ]
    (head,) = sec.headline
    assert head.value == pytest.approx(150.0 / 60.0) and head.met is True
    assert "60 s vs 150 s" in head.values.replace(".0", "")
    assert "1.43x the default's size" in head.note
    assert sec.data["runs"]["lz4"]["bytes"] == 800
    assert not (tmp_path / "out" / "_work" / "sif").exists()  # archive and SIFs removed


def test_a_compressor_slower_than_the_default_misses_the_goal(
    tmp_path: Path, fakes: type[_Apptainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Apptainer, "seconds", {"lz4": 200.0, None: 150.0})
    (head,) = sifbuild.sif_section(_ctx(tmp_path)).headline
    assert head.value == pytest.approx(0.75) and head.met is False


def test_a_sif_that_does_not_run_fails_the_section(tmp_path: Path, fakes: type[_Apptainer]) -> None:
    fakes.runs_ok = False
    with pytest.raises(RuntimeError, match="built with lz4 does not run .*ImportError: libz.so"):
        sifbuild.sif_section(_ctx(tmp_path))
    assert not (tmp_path / "out" / "_work" / "sif").exists()


def test_a_site_on_apptainers_default_has_nothing_to_compare(
    tmp_path: Path, fakes: type[_Apptainer]
) -> None:
    sec = sifbuild.sif_section(_ctx(tmp_path, site="local-bind"))
    assert fakes.builds == [] and not sec.headline
    assert "names no `build.sif_compression`" in sec.text[0]


def test_quick_runs_no_conversion(tmp_path: Path, fakes: type[_Apptainer]) -> None:
    (head,) = sifbuild.sif_section(_ctx(tmp_path, quick=True)).headline
    assert fakes.builds == [] and head.value is None and head.met is None
