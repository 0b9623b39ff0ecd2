"""Nested tables (site files, containers.conf): one merge rule for everything hpcenv layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; lists and scalars in ``top`` replace the base's."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
