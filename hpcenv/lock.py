"""The lock: every component's version, build options and the reason for each choice."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Choice:
    """One resolved component."""

    version: str
    reason: str
    source: str = ""  # where it is installed from: apt, pip, source, conda, bundled, host
    implementation: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)  # the rules that applied to this value
    rejected: dict[str, str] = field(default_factory=dict)  # newer release -> rules that refused it

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v not in (None, {}, [], "")}
        data["version"] = self.version
        data["reason"] = self.reason
        return data


@dataclass
class Lock:
    site: str
    recipe: str
    arch: str
    mpi_model: str
    components: dict[str, Choice]
    excluded: dict[str, str]
    rules: dict[str, str]  # rule id -> source, for every rule consulted
    build: dict[str, Any]
    # a recipe's user section as built (hpcenv.matched.user_lock); absent for built-in recipes
    user_content: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": 1,
            "site": self.site,
            "recipe": self.recipe,
            "arch": self.arch,
            "mpi_model": self.mpi_model,
            "components": {k: self.components[k].to_dict() for k in sorted(self.components)},
            "excluded": dict(sorted(self.excluded.items())),
            "rules": dict(sorted(self.rules.items())),
            "build": self.build,
        }
        if self.user_content:
            data["user_content"] = self.user_content
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def has(self, name: str) -> bool:
        return name in self.components

    def version(self, name: str) -> str:
        return self.components[name].version
