"""Foreign architectures without podman: names, the emulation check, the arm64 plan and render.

The binfmt_misc folder is real here (scripts/emulation-setup.sh registers qemu-aarch64); tests
that need it absent point ``HPCENV_BINFMT_DIR`` at an empty folder, the same read hpcenv does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv import naming, platforms
from hpcenv.baseimage import rootfs_tarball
from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.recipe import load_recipe
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.site import load_site

HPCENV = Path(sys.executable).with_name("hpcenv")


def hpcenv(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert HPCENV.is_file(), f"the installed console script is missing: {HPCENV}"
    full = {**os.environ, **(env or {})}
    return subprocess.run([str(HPCENV), *args], capture_output=True, text=True, env=full)


def test_three_spellings_of_one_architecture() -> None:
    arm = platforms.arch("aarch64")
    assert platforms.arch("arm64") == arm
    assert (arm.debian, arm.oci, arm.platform, arm.handler) == (
        "arm64",
        "arm64",
        "linux/arm64",
        "qemu-aarch64",
    )
    power = platforms.arch("ppc64el")
    assert (power.name, power.platform) == ("ppc64le", "linux/ppc64le")
    with pytest.raises(EnvironmentProblem, match="unknown architecture 's390x'"):
        platforms.arch("s390x")


def test_base_tags_keep_the_amd64_cache() -> None:
    assert naming.base_tag(suite="bookworm") == "localhost/hpcenv-base:bookworm"
    assert naming.base_tag(suite="bookworm", arch="amd64") == "localhost/hpcenv-base:bookworm"
    assert naming.base_tag(suite="bookworm", arch="arm64") == "localhost/hpcenv-base:bookworm-arm64"
    assert rootfs_tarball("bookworm").name == "bookworm-minbase.tar"
    assert rootfs_tarball("bookworm", "ppc64el").name == "bookworm-ppc64el-minbase.tar"


def test_emulation_is_read_from_binfmt_misc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(platforms.BINFMT_ENV, str(tmp_path))
    arm, host = platforms.arch("aarch64"), platforms.host_arch()
    assert platforms.runs_here(host) == "native"
    if host == arm:
        pytest.skip("this host is aarch64: nothing foreign to emulate for that arch")
    assert platforms.runs_here(arm) is None
    with pytest.raises(EnvironmentProblem, match="no qemu-aarch64 binfmt handler"):
        platforms.require_runnable(arm, "image x")
    (tmp_path / "qemu-aarch64").write_text("disabled\ninterpreter /usr/libexec/qemu\n")
    assert platforms.runs_here(arm) is None
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu\nflags: PF\n")
    assert platforms.runs_here(arm) == "emulated"
    assert "under emulation (qemu-user-static" in platforms.how_built(arm)


def test_arm64_rehearsal_lock_and_dockerfile() -> None:
    site = load_site("local-arm64")
    lock = resolve(site, load_recipe("mpi4py-os"))
    assert (lock.arch, lock.build["platform"]) == ("aarch64", "linux/arm64")
    assert lock.build["base_image"] == naming.base_tag(suite="bookworm", arch="arm64")
    comps = lock.components
    assert (comps["mpi4py"].source, comps["mpi4py"].options["package"]) == ("apt", "python3-mpi4py")
    assert comps["numpy"].options["package"] == "python3-numpy"
    docker = render(lock, site).dockerfile
    assert docker.count("\nFROM ") == 1  # nothing built, so no build stage
    assert "pip install" not in docker and "build-essential" not in docker
    assert "python3-mpi4py python3-numpy" in docker
    assert 'io.hpcenv.platform="linux/arm64"' in docker
    doc = json.loads(render(lock, site).lock_json)
    assert doc["build"]["platform"] == "linux/arm64" and doc["arch"] == "aarch64"


def test_every_image_is_labelled_with_its_platform() -> None:
    lock = resolve(load_site("local"), load_recipe("horovod-cpu"))
    assert 'io.hpcenv.platform="linux/amd64"' in render(lock, load_site("local")).dockerfile


def test_os_python_takes_mpi4py_only() -> None:
    site = load_site("local-arm64")
    recipe = load_recipe("mpi4py-os").model_copy(
        update={"components": {"mpi4py": "required", "torch": "required"}}
    )
    with pytest.raises(
        ConfigError, match=r"only mpi4py comes from the OS's packages, not \['torch'\]"
    ):
        resolve(site, recipe)


def test_dry_run_says_under_emulation() -> None:
    proc = hpcenv("build", "--site", "local-arm64", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "(linux/arm64)" in proc.stdout
    if platforms.host_arch().name != "aarch64":
        assert "builds: on this host under emulation (qemu-user-static, qemu-aarch64" in proc.stdout
    native = hpcenv("build", "--site", "local", "--dry-run")
    assert "builds: natively on this host" in native.stdout


def test_build_without_emulation_exits_2_in_one_line(tmp_path: Path) -> None:
    """No binfmt handler: refused before any base is bootstrapped or podman is asked."""
    if platforms.host_arch().name == "aarch64":
        pytest.skip("this host is aarch64: the arm64 build is native")
    env = {platforms.BINFMT_ENV: str(tmp_path), "HPCENV_CACHE": str(tmp_path / "cache")}
    proc = hpcenv("build", "--site", "local-arm64", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: the mpi4py-os image for local-arm64 is aarch64")
    assert "no qemu-aarch64 binfmt handler" in lines[0] and "emulation-setup.sh" in lines[0]
    assert not (tmp_path / "cache" / "base").exists()


def test_doctor_requires_emulation_for_a_foreign_site(tmp_path: Path) -> None:
    if platforms.host_arch().name == "aarch64":
        pytest.skip("this host is aarch64: local-arm64 is native here")
    env = {platforms.BINFMT_ENV: str(tmp_path)}
    proc = hpcenv("doctor", "--site", "local-arm64", "--json", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    check = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "qemu-user-static")
    assert check["required"] and check["status"] == "missing"
    assert "no binfmt handler for qemu-aarch64" in check["why"]
    assert "emulation-setup.sh" in check["fix"]
    native = json.loads(hpcenv("doctor", "--site", "local", "--json", env=env).stdout)
    assert not next(c for c in native["checks"] if c["name"] == "qemu-user-static")["required"]
