"""The facts of ``compat.yaml`` as read (releases, MPI families); the typed rules that judge
them are :mod:`hpcenv.knowledge.rules`, which reads these facts, and the package's face
validates the rules. Kept apart so that the rules import the facts and the facts import no
rule: no import loop inside the knowledge base (``tests/test_architecture.py``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from hpcenv.errors import ConfigError

KB_FILE = Path(__file__).with_name("compat.yaml")
CATALOGUE_FILE = Path(__file__).with_name("catalogue.yaml")


@lru_cache(maxsize=1)
def kb() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(KB_FILE.read_text(encoding="utf-8"))
    return data


def releases(name: str, variant: str | None = None) -> list[str]:
    """Known releases of a component, newest first (per variant where builds differ)."""
    entry = kb()["releases"].get(name, [])
    if isinstance(entry, dict):
        if variant is not None:
            return [str(v) for v in entry.get(variant, [])]
        seen: list[str] = []
        for versions in entry.values():
            seen += [str(v) for v in versions if str(v) not in seen]
        return seen
    return [str(v) for v in entry]


@lru_cache(maxsize=1)
def catalogue() -> dict[str, Any]:
    """``catalogue.yaml``: every final release on the package index (written by
    :mod:`hpcenv.knowledge.refresh`), by component."""
    data: dict[str, Any] = yaml.safe_load(CATALOGUE_FILE.read_text(encoding="utf-8"))
    comps: dict[str, Any] = data["components"]
    return comps


def known_releases(name: str) -> list[str]:
    """Every release a pin may name: the curated ones (:func:`releases`, defaults come from
    these only) and the index's (``catalogue.yaml``), newest first."""
    indexed = [str(v) for v in catalogue().get(name, {}).get("releases", [])]
    if not indexed:
        return releases(name)
    return sorted(set(releases(name)) | set(indexed), key=Version, reverse=True)


def yanked(name: str) -> dict[str, str]:
    """Releases the index yanked (every file), with its reason."""
    return {str(k): str(v) for k, v in (catalogue().get(name, {}).get("yanked") or {}).items()}


def mpi_family(name: str) -> dict[str, Any]:
    families: dict[str, Any] = kb()["mpi_families"]
    if name not in families or name == "source":
        known = ", ".join(k for k in families if k != "source")
        raise ConfigError(f"unknown MPI family {name!r}; known: {known}")
    entry: dict[str, Any] = families[name]
    return entry


def mpi_soname(family: str) -> str:
    """The library an MPI family provides and programs built on it load, from
    ``mpi_families.<family>.soname``: ``mpi_soname("mpich")`` is the MPICH ABI's
    ``libmpi.so.12`` (MPICH ABI Compatibility Initiative)."""
    return str(mpi_family(family)["soname"])


def mpi_family_names() -> list[str]:
    return [k for k in kb()["mpi_families"] if k != "source"]
