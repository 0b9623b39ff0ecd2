"""An aarch64 image built and run here under emulation (qemu-user-static), for real.

``hpcenv build --site local-arm64`` bootstraps the arm64 Debian base (debootstrap --foreign, the
second stage under qemu) and builds the mpi4py-os image with ``--platform linux/arm64``; both
are cached, so only the first run pays: measured cold here 2026-11-24 on the 2 shared cores
(load ~16 from other work), base 24 s + 162 s (second stage under qemu) + 12 s, image 372 s (the
apt step under qemu 366 s); with both cached this file takes ~39 s. The smoke suite then runs
its light checks in it: mpi4py's world (every rank on aarch64) and the allreduce's exact sums.
Without a binfmt handler, running it is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from image_builds import built
from requirements import need, need_tool

from hpcenv import platforms
from hpcenv.naming import image_tag

pytestmark = pytest.mark.podman

HPCENV = Path(sys.executable).with_name("hpcenv")
SITE, RECIPE = "local-arm64", "mpi4py-os"
IMAGE = image_tag(recipe=RECIPE, site=SITE)
ARM = platforms.arch("aarch64")


def hpcenv(*args: str, env: dict[str, str] | None = None, timeout: int = 1800):
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def arm64_image() -> str:
    need_tool("podman", why="the arm64 image is built with podman")
    if platforms.host_arch() != ARM and platforms.emulator(ARM) is None:
        need("the qemu-aarch64 binfmt handler", "arm64 binaries run under it", "make host")
    built("arm64")
    return IMAGE


def _inspect(image: str, fmt: str) -> str:
    from hpcenv.engines import engine_env

    argv = ["podman", "image", "inspect", "--format", fmt, image]
    out = subprocess.run(argv, capture_output=True, text=True, env=engine_env(), check=True)
    return out.stdout.strip()


def test_image_carries_its_platform(arm64_image: str) -> None:
    assert _inspect(arm64_image, "{{.Architecture}}") == "arm64"
    labels = json.loads(_inspect(arm64_image, "{{json .Config.Labels}}"))
    assert labels["io.hpcenv.platform"] == "linux/arm64"
    lock = json.loads(labels["io.hpcenv.lock"])
    assert lock["arch"] == "aarch64" and lock["build"]["platform"] == "linux/arm64"
    base = lock["build"]["base_image"]
    assert _inspect(base, "{{.Architecture}}") == "arm64"


def test_smoke_light_checks_under_emulation(arm64_image: str, tmp_path: Path) -> None:
    from hpcenv.datasets import prepare_mnist
    from hpcenv.smoke.runner import run_smoke, runs_as

    assert runs_as(arm64_image, "podman") == "emulated"
    report = run_smoke(
        arm64_image, tmp_path / "results", data_dir=prepare_mnist().directory, emulated=True
    )
    outcomes = {t.name: t for t in report.tests}
    failed = {n: (t.message or "")[:2000] for n, t in outcomes.items() if t.outcome == "failed"}
    for name in ("test_allreduce[mpi4py]", "test_mpi4py_world"):
        assert outcomes[name].outcome == "passed", failed
    world = outcomes["test_mpi4py_world"].metrics
    assert world["machines"] == ["aarch64", "aarch64"]
    assert "Open MPI v4.1.4" in world["library"]
    heavy = outcomes["test_allreduce[horovod-mpi]"]
    assert heavy.outcome == "skipped" and "smoke --heavy" in (heavy.message or "")
    sweep = outcomes["test_allreduce[mpi4py]"].metrics["sweep"]
    assert sweep[-1]["bytes"] == 1 << 20  # the emulated sweep's top size


def test_running_without_emulation_exits_2_in_one_line(arm64_image: str, tmp_path: Path) -> None:
    if platforms.host_arch() == ARM:
        pytest.skip("this host is aarch64: the image runs natively")
    env = {platforms.BINFMT_ENV: str(tmp_path)}
    proc = hpcenv("smoke", "--site", SITE, "--recipe", RECIPE, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: image {IMAGE} is aarch64 and this host is x86_64")
    assert "no qemu-aarch64 binfmt handler" in lines[0]
