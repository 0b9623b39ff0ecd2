"""A native SIF build is reused only while what it reads is unchanged (hpcenv.sif).

The real build is tests/test_sif.py::test_native_definition_builds_and_runs; here the digest
that decides reuse, and build_sif's choice with Apptainer and the engine as fakes at their
boundary (a fake build writes the SIF; the count says whether it ran)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcenv import sif as sifmod
from hpcenv.build import make_plans, write_context
from hpcenv.naming import BASE_ARCHIVE
from hpcenv.site import load_site


def _context(tmp_path: Path) -> Path:
    (plan,) = make_plans(load_site("local"), ["daal4py"], {}, tmp_path / "ctx")
    return write_context(plan)


def test_digest_is_the_same_for_a_fresh_copy_of_the_same_inputs(tmp_path: Path) -> None:
    first = sifmod.def_inputs_digest(_context(tmp_path / "a"), "sha256:base")
    assert first == sifmod.def_inputs_digest(_context(tmp_path / "b"), "sha256:base")


def test_digest_changes_with_the_definition_a_file_or_the_base(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    before = sifmod.def_inputs_digest(ctx, "sha256:base")
    assert sifmod.def_inputs_digest(ctx, "sha256:other-base") != before
    (ctx / BASE_ARCHIVE).write_bytes(b"saved base archive")  # left out: the base id stands for it
    assert sifmod.def_inputs_digest(ctx, "sha256:base") == before
    definition = ctx / "Singularity.def"
    definition.write_text(definition.read_text() + "\n# changed\n")
    changed = sifmod.def_inputs_digest(ctx, "sha256:base")
    assert changed != before
    (ctx / "checks" / "extra.py").write_text("x = 1\n")
    assert sifmod.def_inputs_digest(ctx, "sha256:base") not in (before, changed)
    assert sifmod.def_inputs_digest(ctx, "sha256:base", "lz4") != sifmod.def_inputs_digest(
        ctx, "sha256:base"
    )


class _Engine:
    def image_id(self, tag: str) -> str:
        return "sha256:base-" + tag

    def save(self, tag: str, path: Path, fmt: str) -> None:
        path.write_bytes(b"archive")


class _Apptainer:
    builds = 0

    def build_from_def(self, definition: Path, sif: Path, context: Path, **_: object) -> None:
        type(self).builds += 1
        sif.parent.mkdir(parents=True, exist_ok=True)
        sif.write_bytes(b"SIF " + definition.read_bytes()[:40])


def test_build_sif_reuses_an_unchanged_definition_and_rebuilds_a_changed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hpcenv.apptainer

    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sifmod, "get_engine", lambda name: _Engine())
    monkeypatch.setattr(sifmod, "ensure_base", lambda plan: None)
    monkeypatch.setattr(hpcenv.apptainer, "Apptainer", _Apptainer)
    monkeypatch.setattr(hpcenv.apptainer, "register_image", lambda name, path: None)
    _Apptainer.builds = 0

    def plan(extra: str = ""):
        (p,) = make_plans(load_site("local"), ["daal4py"], {}, tmp_path / f"ctx{extra}")
        return p

    out = sifmod.build_sif(plan(), "def")
    assert _Apptainer.builds == 1 and out.is_file()
    assert sifmod.build_sif(plan("-again"), "def") == out and _Apptainer.builds == 1  # reused
    stamp = out.with_name(out.name + ".inputs")
    stamp.write_text("0" * 64 + "\n")  # other inputs than these: built again
    sifmod.build_sif(plan(), "def")
    assert _Apptainer.builds == 2
    out.unlink()  # a stamp without its SIF is not a build
    sifmod.build_sif(plan(), "def")
    assert _Apptainer.builds == 3


class _OciApptainer:
    builds: list[str | None] = []

    def build_from_oci_archive(self, archive: Path, sif: Path, **kw: object) -> None:
        type(self).builds.append(kw.get("compression"))  # type: ignore[arg-type]
        sif.parent.mkdir(parents=True, exist_ok=True)
        sif.write_bytes(b"SIF")


def test_a_sif_from_the_image_is_converted_again_when_the_compressor_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hpcenv.apptainer

    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sifmod, "get_engine", lambda name: _Engine())
    monkeypatch.setattr(hpcenv.apptainer, "Apptainer", _OciApptainer)
    monkeypatch.setattr(hpcenv.apptainer, "register_image", lambda name, path: None)
    _OciApptainer.builds = []
    site = load_site("local")
    assert site.build.sif_compression == "lz4"
    (plan,) = make_plans(site, ["daal4py"], {}, tmp_path / "ctx")
    sifmod.build_sif(plan, "oci")
    sifmod.build_sif(plan, "oci")  # same image, same compressor: reused
    assert _OciApptainer.builds == ["lz4"]
    gzip = site.model_copy(
        update={"build": site.build.model_copy(update={"sif_compression": None})}
    )
    (plan,) = make_plans(gzip, ["daal4py"], {}, tmp_path / "ctx2")
    sifmod.build_sif(plan, "oci")
    assert _OciApptainer.builds == ["lz4", None]
