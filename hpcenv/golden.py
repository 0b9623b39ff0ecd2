"""Golden files: every site x recipe rendered (or its conflict message), and one example job per
real site (its plan as JSON and the script that prints it), for review in diffs.

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

BUILTIN_SITES = (
    "alps-clariden",
    "aurora",
    "frontier",
    "generic-slurm",
    "local",
    "perlmutter",
    "summit",
)
# Example jobs: the sites whose scripts do not depend on this host (local's podman settings do).
JOB_SITES = ("alps-clariden", "aurora", "frontier", "generic-slurm", "perlmutter", "summit")


def example_job_files() -> dict[str, str]:
    """``jobs/<site>.sh`` and ``jobs/<site>.plan.json``: 2 nodes of the site's first recipe in its
    default image, data staged in (per node where the site has node-local storage) and out."""
    import json

    from hpcenv.jobs import JobSpec, StageIn, StageOut, default_image, prepare

    files: dict[str, str] = {}
    for site_name in JOB_SITES:
        site = load_site(site_name)
        base = next(f.path for f in site.filesystems if f.purpose in ("scratch", "project"))
        recipe = site.recipes[0]
        job = JobSpec(
            name="train",
            command=["python3", "train.py", "--data", "{data}", "--out", "{output}"],
            nodes=2,
            recipe=recipe,
            account="stf007" if site.scheduler.account_required else None,
            stage_in=StageIn(source=f"{base}/datasets/mnist", per_node=site.node_local is not None),
            stage_out=StageOut(dest=f"{base}/results/run1"),
        )
        rendered = prepare(site, job, default_image(site, recipe), submitting=True)
        files[f"jobs/{site_name}.sh"] = rendered.script
        plan = json.dumps(rendered.plan.to_dict(), indent=2, sort_keys=True)
        files[f"jobs/{site_name}.plan.json"] = plan + "\n"
    return files


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
    files.update(example_job_files())
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
