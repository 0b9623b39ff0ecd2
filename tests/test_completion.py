"""Shell completion of ``--recipe`` after every command that takes one (issue 37: it did not
complete after ``build`` and ``submit``), as the installed ``hpcenv`` answers bash's completion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HPCENV = Path(sys.executable).with_name("hpcenv")


def _complete(words: str) -> list[str]:
    env = os.environ | {
        "_HPCENV_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    out = subprocess.run([str(HPCENV)], env=env, capture_output=True, text=True, timeout=60)
    return out.stdout.split()


@pytest.mark.parametrize(
    "command", ["resolve", "render", "build", "submit", "run", "shell", "init"]
)
def test_recipe_completes_after(command: str) -> None:
    assert {"horovod-ccl", "horovod-cpu", "horovod-gpu"} <= set(
        _complete(f"hpcenv {command} --recipe hor")
    )
