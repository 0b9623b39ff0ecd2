"""An unchanged image is not built again (hpcenv.build_inputs): the digest of what the engine's
layer cache compares, and the stamp that records it beside the image id. The engine is faked
here (a boundary); tests/test_image.py runs the installed ``hpcenv build`` on the real image."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import hpcenv.build as buildmod
from hpcenv.build import image_stamp_path, make_plans
from hpcenv.build_inputs import (
    base_images,
    image_inputs_digest,
    read_stamp,
    trusts_stamps,
    write_stamp,
)
from hpcenv.engines import BuildResult
from hpcenv.errors import BuildError, HpcenvError
from hpcenv.site import load_site

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64


def test_base_images_are_the_from_lines_that_name_no_earlier_stage() -> None:
    dockerfile = (
        "# syntax=docker/dockerfile:1\n"
        "FROM localhost/hpcenv-base:bookworm AS build\n"
        "RUN true\n"
        "FROM --platform=linux/arm64 docker.io/library/debian:12 as Runtime\n"
        "FROM build AS again\n"
        "FROM runtime\n"
        "COPY --from=build /a /a\n"
        "FROM localhost/hpcenv-base:bookworm\n"
    )
    assert base_images(dockerfile) == [
        "localhost/hpcenv-base:bookworm",
        "docker.io/library/debian:12",
    ]


def _digest(context: Path, **change: Any) -> str:
    inputs: dict[str, Any] = {
        "base_ids": {"base": ID_A},
        "build_args": {"MPI_ROOT": "/opt/mpi"},
        "volumes": ["/opt/mpi:/opt/mpi"],
        "flags": ["--network=host"],
        "platform": None,
    } | change
    base_ids = inputs.pop("base_ids")
    return image_inputs_digest(context, base_ids, **inputs)


def test_the_digest_changes_with_every_input_the_layer_cache_compares(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM base\nRUN true\n")
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "a.py").write_text("print(1)\n")
    same = _digest(tmp_path)
    assert same == _digest(tmp_path)
    others = {
        _digest(tmp_path, base_ids={"base": ID_B}),
        _digest(tmp_path, build_args={"MPI_ROOT": "/opt/other"}),
        _digest(tmp_path, volumes=[]),
        _digest(tmp_path, flags=[]),
        _digest(tmp_path, platform="linux/arm64"),
    }
    (tmp_path / "checks" / "a.py").write_text("print(2)\n")
    others.add(_digest(tmp_path))
    (tmp_path / "checks" / "a.py").rename(tmp_path / "checks" / "b.py")
    others.add(_digest(tmp_path))
    assert len(others) == 7 and same not in others


@pytest.mark.parametrize("flag", ["--no-cache", "--pull", "--pull=always", "--pull=newer"])
def test_flags_that_ask_for_a_fresh_build_are_never_stood_in_for(flag: str) -> None:
    assert not trusts_stamps(["--network=host", flag])
    assert trusts_stamps(["--network=host", "--pull=missing", "--layers"])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage\n",
        f"{'0' * 64}\n",
        f"{'0' * 64} {ID_A} extra\n",
        f"{'0' * 63}g {ID_A}\n",
        f"{'0' * 64} sha256:zz\n",
        f"{'0' * 64}\nRUN {ID_A}\n",
    ],
)
def test_a_damaged_stamp_reads_as_none(tmp_path: Path, text: str) -> None:
    stamp = tmp_path / "x.inputs"
    stamp.write_text(text)
    assert read_stamp(stamp) is None
    assert read_stamp(tmp_path / "missing.inputs") is None
    stamp.write_bytes(b"\xff\xfe")
    assert read_stamp(stamp) is None


def test_a_stamp_round_trips_and_refuses_an_odd_image_id(tmp_path: Path) -> None:
    stamp = tmp_path / "images" / "x.inputs"
    write_stamp(stamp, "0" * 64, ID_A)
    assert read_stamp(stamp) == ("0" * 64, ID_A)
    with pytest.raises(HpcenvError, match="image id"):
        write_stamp(stamp, "0" * 64, "a\nRUN rm -rf /")
    assert read_stamp(stamp) == ("0" * 64, ID_A)  # the old one is kept whole


class FakeEngine:
    """The engine calls build_image makes: the tag's id changes with each build."""

    build_options: tuple[str, ...] = ("--layers", "--format", "docker")

    def __init__(self) -> None:
        self.ids = {"localhost/hpcenv-base:bookworm": ID_A}
        self.builds = 0
        self.fail = False

    def image_exists(self, tag: str) -> bool:
        return tag in self.ids

    def image_id(self, tag: str) -> str:
        return self.ids[tag]

    def build(self, context: Path, dockerfile: Path, tag: str, **kw: Any) -> BuildResult:
        self.builds += 1
        if self.fail:
            raise BuildError("RUN false", kw["log_path"])
        self.ids[tag] = f"sha256:{self.builds:064x}"
        return BuildResult(tag, kw["log_path"], 1.0)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeEngine, Any]:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    engine = FakeEngine()
    monkeypatch.setattr(buildmod, "get_engine", lambda name: engine)
    monkeypatch.setattr(buildmod, "ensure_base", lambda plan, on_step=None, on_wait=None: None)
    (plan,) = make_plans(load_site("local"), ["mpi4py-os"], {}, tmp_path / "ctx")
    return engine, plan


def test_an_unchanged_image_is_reused_and_any_change_builds_it(
    fake: tuple[FakeEngine, Any],
) -> None:
    engine, plan = fake
    first = buildmod.build_image(plan)
    assert engine.builds == 1 and not first.reused
    assert read_stamp(image_stamp_path(plan)) is not None
    again = buildmod.build_image(plan)
    assert engine.builds == 1 and again.reused and again.tag == plan.tag
    engine.ids[plan.tag] = ID_B  # the tag now names another image (rebuilt or retagged)
    buildmod.build_image(plan)
    assert engine.builds == 2
    engine.ids["localhost/hpcenv-base:bookworm"] = ID_B  # a new base
    buildmod.build_image(plan)
    assert engine.builds == 3
    del engine.ids[plan.tag]  # the image was removed
    buildmod.build_image(plan)
    assert engine.builds == 4
    assert buildmod.build_image(plan).reused and engine.builds == 4
    # the engine's own options are inputs too: an image built in the OCI format, whose steps
    # ran without the Dockerfile's SHELL, is built again in the Docker format
    engine.build_options = ("--layers",)
    buildmod.build_image(plan)
    assert engine.builds == 5 and buildmod.build_image(plan).reused


def test_no_cache_flags_always_build_and_a_failed_build_leaves_no_stamp(
    fake: tuple[FakeEngine, Any],
) -> None:
    engine, plan = fake
    buildmod.build_image(plan)
    stamp = image_stamp_path(plan)
    assert stamp.is_file()
    engine.fail = True
    engine.ids[plan.tag] = ID_B  # so that it builds again
    with pytest.raises(BuildError):
        buildmod.build_image(plan)
    assert not stamp.exists() and engine.builds == 2
    engine.fail = False
    build = plan.site.build.model_copy(update={"flags": ["--no-cache"]})
    fresh = dataclasses.replace(plan, site=plan.site.model_copy(update={"build": build}))
    buildmod.build_image(fresh)
    buildmod.build_image(fresh)
    assert engine.builds == 4 and not stamp.exists()
