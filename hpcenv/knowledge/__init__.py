"""The compatibility knowledge base (``compat.yaml``): facts and typed rules with their sources."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hpcenv.errors import ConfigError
from hpcenv.knowledge.rules import Rule

KB_FILE = Path(__file__).with_name("compat.yaml")


@lru_cache(maxsize=1)
def kb() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(KB_FILE.read_text(encoding="utf-8"))
    return data


@lru_cache(maxsize=1)
def rules() -> dict[str, Rule]:
    """Every rule, validated against :class:`Rule` (a bad entry names the rule and field)."""
    out: dict[str, Rule] = {}
    for rule_id, entry in kb()["rules"].items():
        try:
            out[rule_id] = Rule.model_validate({**entry, "id": rule_id})
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "<rule>"
            raise ConfigError(
                f"{KB_FILE}: rule {rule_id}: field '{field}': {first['msg']}"
            ) from None
    return out


def rule(rule_id: str) -> Rule:
    return rules()[rule_id]


def source(rule_id: str) -> str:
    return rule(rule_id).source


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
