"""Section names of compiled files inside an image, read with the image's own Python
(tests/data/elf_sections.py on its stdin): debug info left in an extension shows as .debug_*."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "elf_sections.py"


def debug_sections(
    image: str, pattern: str, python: str = "/opt/venv/bin/python3"
) -> dict[str, list[str]]:
    """{file: its .debug_* sections} for each file the shell glob PATTERN names in IMAGE;
    fails when it names none."""
    from hpcenv.engines import engine_env

    proc = subprocess.run(
        ["podman", "run", "--rm", "-i", image, "bash", "-c", f"exec {python} - {pattern}"],
        input=SCRIPT.read_text(),
        capture_output=True,
        text=True,
        timeout=120,
        env=engine_env(),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found: dict[str, list[str]] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found and all("*" not in path for path in found), found  # the glob matched
    return {path: [n for n in names if n.startswith(".debug")] for path, names in found.items()}
