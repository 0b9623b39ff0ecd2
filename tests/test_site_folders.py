"""The folders a real site documents for jobs are in every rank's container (issue 36).

A job whose data, work folder or output lives on the site's scratch or project file system must
see it inside the container: each such ``filesystems`` path (its variables expanded by their
documented defaults) lies under one of the paths the site's runtime binds for a rank. Sources per
site in docs/sites/NAME.md ("What a rank sees"): Perlmutter binds ``$PSCRATCH`` and
``/global/cfs/cdirs`` (podman-hpc mounts neither by itself), Alps ``/capstor`` and ``/iopsstor``
(CSCS's EDF), Frontier ``/lustre/orion``, Aurora ``/lus/flare``, Summit ``/gpfs/alpine2``.
"""

from __future__ import annotations

import re

import pytest

from hpcenv.jobs.runtimes.base import RunContext, binds
from hpcenv.site import Site, load_site

REAL = ["alps-clariden", "aurora", "frontier", "generic-slurm", "perlmutter", "summit"]
VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _expand(site: Site, path: str) -> str:
    """``$NAME`` by the site's documented default, repeatedly; others stay as written."""
    for _ in range(8):
        new = VAR.sub(
            lambda m: v.default if (v := site.variables.get(m.group(1))) and v.default else m[0],
            path,
        )
        if new == path:
            return path
        path = new
    return path


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@pytest.mark.parametrize("name", REAL)
def test_scratch_and_project_are_bound_into_every_rank(name: str) -> None:
    site = load_site(name)
    bound = [_expand(site, b.split(":")[0]) for b in binds(site, RunContext("/nowhere"))]
    wanted = [f for f in site.filesystems if f.purpose in ("scratch", "project", "datasets")]
    assert wanted, name
    missing = [f.path for f in wanted if not any(_under(_expand(site, f.path), b) for b in bound)]
    assert missing == [], f"{name}: not in the container: {missing} (binds {bound})"


@pytest.mark.parametrize(
    ("name", "paths"),
    [
        ("perlmutter", ["$PSCRATCH", "/global/cfs/cdirs"]),
        ("alps-clariden", ["/capstor", "/iopsstor"]),
        ("frontier", ["/lustre/orion"]),
        ("aurora", ["/lus/flare"]),
    ],
)
def test_each_gpu_site_binds_what_its_documentation_names(name: str, paths: list[str]) -> None:
    assert set(paths) <= set(load_site(name).runtime.binds)


GPU_SITES = ["alps-clariden", "aurora", "frontier", "perlmutter"]


@pytest.mark.parametrize("name", GPU_SITES)
def test_every_cache_folder_is_sourced_or_stated_as_assumed(name: str) -> None:
    """Framework caches are data with their source: each ``caches`` entry of a GPU site has a
    ``provenance`` line (verified from the site's words, or assumed where the site says
    nothing); every GPU site keeps Hugging Face off the home quota."""
    site = load_site(name)
    sourced = {**site.provenance.verified, **site.provenance.assumed}
    unsourced = [n for n in site.caches if f"caches.{n}" not in sourced and "caches" not in sourced]
    assert unsourced == [], f"{name}: caches without a source: {unsourced}"
    assert {"HF_HOME", "HF_DATASETS_CACHE"} & set(site.caches), name


def test_rocm_keeps_miopen_on_node_local_storage_as_olcf_does() -> None:
    """OLCF pytorch_frontier.rst: MIOPEN_USER_DB_PATH and MIOPEN_CUSTOM_CACHE_DIR on /tmp
    ("Needed to bypass MIOpen, Disk I/O Errors"), made on every node."""
    site = load_site("frontier")
    for name in ("MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR"):
        cache = site.caches[name]
        assert cache.scope == "node" and cache.path.startswith("/tmp/"), name
