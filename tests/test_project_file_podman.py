"""Issue 37 for real: from a folder with train.py and requirements.txt, ``hpcenv init``, ``hpcenv
build`` (podman, on the cached local horovod-cpu layers) and ``hpcenv submit`` under the real
Slurm with no other flags; editing requirements.txt makes the next submit refuse the stale image
in one line; a second project's build makes another image and leaves the first one as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_image

from hpcenv import naming

pytest_plugins = ["services"]  # the slurm fixture
pytestmark = [pytest.mark.podman, pytest.mark.slurm, pytest.mark.timeout(2700)]

HPCENV = Path(sys.executable).with_name("hpcenv")
TRAIN = "import tabulate\nprint('trained with tabulate', tabulate.__version__)\n"


def run(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def image_id(tag: str) -> str:
    from hpcenv.engines import engine_env

    return subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        env=engine_env(),
        check=True,
    ).stdout.strip()


def new_project(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(TRAIN, encoding="utf-8")
    (folder / "requirements.txt").write_text("tabulate==0.9.0\n", encoding="utf-8")
    init = run("init", "--site", "local", "--recipe", "horovod-cpu", cwd=folder)
    assert init.returncode == 0, init.stderr
    return folder


def build(folder: Path) -> str:
    proc = run("build", "--format", "oci", "--json", cwd=folder, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(json.loads(proc.stdout)[0]["tag"])


def test_init_build_submit_and_a_stale_image_refused(tmp_path: Path, slurm: object) -> None:
    need_image("localhost/hpcenv/horovod-cpu:local", "the project's image builds on its layers")
    from hpcenv.engines import engine_env

    unique = f"{os.getpid()}"
    one = new_project(tmp_path / f"proja{unique}")
    two = new_project(tmp_path / f"projb{unique}")
    tags: list[str] = []
    try:
        tag = build(one)
        tags.append(tag)
        assert tag == naming.image_tag(recipe=f"horovod-cpu-proja{unique}", site="local")
        labels = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{json .Config.Labels}}", tag],
            capture_output=True,
            text=True,
            env=engine_env(),
            check=True,
        ).stdout
        lock = json.loads(json.loads(labels)["io.hpcenv.lock"])
        assert set(lock["user_content"]["inputs"]["parts"]) >= {"requirements requirements.txt"}

        dry = run("submit", "--dry-run", "--", "python3", "train.py", cwd=one)
        assert dry.returncode == 0, dry.stderr
        assert f"image     {tag}" in dry.stdout

        job = run("submit", "--wait", "--json", "--", "python3", "train.py", cwd=one, timeout=600)
        assert job.returncode == 0, job.stderr[-3000:]
        job_id = json.loads(job.stdout)["job_id"]
        logs = run("logs", job_id, cwd=one)
        assert "trained with tabulate 0.9.0" in logs.stdout, logs.stdout[-3000:]

        first = image_id(tag)
        other = build(two)  # a second project on the same site: its own image
        tags.append(other)
        assert other != tag and other.endswith(f"-projb{unique}:local")
        assert image_id(tag) == first
        again = run("submit", "--dry-run", "--", "python3", "train.py", cwd=one)
        assert again.returncode == 0, again.stderr

        (one / "requirements.txt").write_text("tabulate==0.8.10\n", encoding="utf-8")
        stale = run("submit", "--", "python3", "train.py", cwd=one)
        assert stale.returncode == 2, stale.stdout + stale.stderr
        lines = [x for x in stale.stderr.splitlines() if not x.startswith(("note:", "warning:"))]
        assert len(lines) == 1, stale.stderr
        assert "requirements.txt changed since the image" in lines[0]
        assert tag in lines[0] and "run hpcenv build" in lines[0]
    finally:
        for name in tags:
            subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env=engine_env())
