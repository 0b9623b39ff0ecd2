"""Golden files: every site x recipe rendered (or its conflict message), for review in diffs.

``python -m hpcenv.golden tests/golden`` (``make golden``) regenerates them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from hpcenv.errors import HpcenvError
from hpcenv.recipe import load_recipe, recipe_names
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.site import load_site

BUILTIN_SITES = ("aurora", "frontier", "generic-slurm", "local", "perlmutter", "summit")


def golden_files() -> dict[str, str]:
    """Relative path -> text for every built-in site x recipe."""
    files: dict[str, str] = {}
    for site_name in BUILTIN_SITES:
        site = load_site(site_name)
        for recipe_name in recipe_names():
            key = f"{site_name}__{recipe_name}"
            try:
                lock = resolve(site, load_recipe(recipe_name))
            except HpcenvError as err:
                files[f"{key}/conflict.txt"] = f"{err}\n"
                continue
            rendered = render(lock, site)
            files[f"{key}/Dockerfile"] = rendered.dockerfile
            files[f"{key}/Singularity.def"] = rendered.singularity
            files[f"{key}/stack.lock.json"] = rendered.lock_json
    return files


def write_golden(root: Path) -> int:
    if root.exists():
        shutil.rmtree(root)
    files = golden_files()
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return len(files)


if __name__ == "__main__":
    count = write_golden(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/golden"))
    print(f"wrote {count} golden files; review them with git diff")
