"""The third-party user project of test_thirdparty_2node.py, made in one place: its fixture makes
one per test module, and `make test`'s background pass (tests/image_builds.py) makes one to build
the same user image early (the same files give the same layers, so the fixture finds them cached).

What it holds (tests/data/third_party/README.md: sources, commits, dates, licenses):
pytorch/examples' minGPT-DDP with its requirements.txt (hydra-core, boto3, requests, aiohttp) and
the vendored CPU patch applied, Horovod's ``examples/adasum/adasum_small_model.py``, the probe
(tests/data/train_probe.py) and a user recipe that extends ``horovod-cpu`` with those
requirements.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

DATA = Path(__file__).parent / "data"
THIRD = DATA / "third_party"
RECIPE = """\
name: thirdparty-train
extends: horovod-cpu
user:
  requirements: [requirements.txt]
"""
# `hpcenv build` of the project's recipe, after ``--recipe PROJECT/recipe.yaml``: the podman
# image localhost/hpcenv/thirdparty-train:local-2node and its SIF.
BUILD_ARGS = ("--site", "local-2node", "--format", "both")


def make_project(path: Path) -> Path:
    """The project folder at ``path`` (which must not exist); its recipe is ``path/recipe.yaml``.
    git applies the CPU patch (AssertionError with git's message when it does not apply)."""
    shutil.copytree(THIRD / "pytorch-examples-mingpt-ddp", path)
    applied = subprocess.run(
        ["git", "apply", "cpu.patch"], cwd=path, capture_output=True, text=True, timeout=60
    )
    assert applied.returncode == 0, applied.stderr
    shutil.copy(THIRD / "horovod-adasum" / "adasum_small_model.py", path)
    shutil.copy(DATA / "train_probe.py", path)
    (path / "recipe.yaml").write_text(RECIPE)
    return path
