"""Descriptions of every site-file field (what, unit, example, where to find it), kept as data in
``knowledge/site_fields.yaml``; added to the JSON Schema and rendered as docs/site-fields.md."""

from __future__ import annotations

import typing
from functools import lru_cache
from importlib.resources import files
from typing import Any

from pydantic import BaseModel

from hpcenv.site.model import Site


@lru_cache(maxsize=1)
def fields() -> dict[str, dict[str, Any]]:
    import yaml

    text = files("hpcenv").joinpath("knowledge", "site_fields.yaml").read_text()
    return yaml.safe_load(text)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        stack.extend(typing.get_args(a))
    return None


# Fields of the file that the loader consumes before the model sees it (hpcenv.site.load).
FILE_FIELDS: dict[str, dict[str, Any]] = {"extends": {"type": "string", "maxLength": 4096}}


def model_fields(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Dotted names of every field of a site file: the loader's (``extends``), then the site
    model's (tables and their fields)."""
    out = [] if model or prefix else list(FILE_FIELDS)
    model = model or Site
    for name, info in model.model_fields.items():
        out.append(prefix + name)
        sub = _model_of(info.annotation)
        if sub is not None and sub is not model:
            out += model_fields(sub, f"{prefix}{name}.")
    return out


def describe(dotted: str) -> str:
    f = fields().get(dotted, {})
    parts = [str(f.get("what", ""))]
    if f.get("unit"):
        parts.append(f"unit: {f['unit']}")
    if "example" in f:
        parts.append(f"e.g. {f['example']}")
    if f.get("find") and f["find"] != "-":
        parts.append(f"find it: {f['find']}")
    return "; ".join(p for p in parts if p)


def annotate_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Put each field's description into the JSON Schema (a whole site, ``$defs.Site``, and the
    changes an ``extends:`` file makes, ``$defs.PartialSite``, with their nested ``$defs``)."""
    defs = schema.get("$defs", {})

    def walk(model: type[BaseModel], node: dict[str, Any], prefix: str, kind: str) -> None:
        for name, info in model.model_fields.items():
            prop = node.get("properties", {}).get(name)
            if prop is None:
                continue
            dotted = prefix + name
            if dotted in fields():
                prop["description"] = describe(dotted)
            sub = _model_of(info.annotation)
            if sub is not None and kind + sub.__name__ in defs:
                walk(sub, defs[kind + sub.__name__], dotted + ".", kind)

    for kind in ("", "Partial"):
        root = defs.get(kind + "Site", schema)
        walk(Site, root, "", kind)
        for name, prop in FILE_FIELDS.items():
            root.setdefault("properties", {})[name] = prop | {"description": describe(name)}
        if root is schema:
            break
    return schema


def markdown() -> str:
    lines = [
        "# Site file fields",
        "",
        "Generated from `hpcenv/knowledge/site_fields.yaml` (`hpcenv sites fields --markdown`).",
        "Dotted names as used in `provenance` and `hpcenv sites show --resolved`.",
        "",
        "| field | what | unit | example | where to find it |",
        "|:--|:--|:--|:--|:--|",
    ]
    for dotted in model_fields():
        f = fields().get(dotted, {})
        cells = [
            f"`{dotted}`",
            str(f.get("what", "")),
            str(f.get("unit", "")),
            f"`{f['example']}`" if "example" in f else "",
            str(f.get("find", "")),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
