"""The compatibility knowledge base (``compat.yaml``): facts and typed rules with their sources."""

from __future__ import annotations

from functools import lru_cache

from pydantic import ValidationError

from hpcenv.errors import ConfigError
from hpcenv.knowledge.facts import (
    CATALOGUE_FILE,
    KB_FILE,
    catalogue,
    kb,
    known_releases,
    mpi_family,
    mpi_family_names,
    mpi_soname,
    releases,
    yanked,
)
from hpcenv.knowledge.rules import Rule

__all__ = [
    "CATALOGUE_FILE",
    "KB_FILE",
    "catalogue",
    "kb",
    "known_releases",
    "mpi_family",
    "mpi_family_names",
    "mpi_soname",
    "releases",
    "rule",
    "rules",
    "source",
    "yanked",
]


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
