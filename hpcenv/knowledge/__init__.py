"""The compatibility knowledge base (``compat.yaml``): facts with their sources."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

KB_FILE = Path(__file__).with_name("compat.yaml")


@lru_cache(maxsize=1)
def kb() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(KB_FILE.read_text(encoding="utf-8"))
    return data


def rule(rule_id: str) -> dict[str, Any]:
    entry: dict[str, Any] = kb()["rules"][rule_id]
    return entry


def source(rule_id: str) -> str:
    return str(rule(rule_id)["source"])
