"""YAML loading that remembers where each value came from, for file:line:field errors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from hpcenv.errors import ConfigError

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


def _index_lines(node: yaml.Node, path: Loc, out: dict[Loc, int]) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, str(key.value))
            out[sub] = key.start_mark.line + 1
            _index_lines(value, sub, out)
            out[sub] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, (*path, i), out)


def load_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """Parse ``path``; return the data and a map from field path to line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    except UnicodeDecodeError as err:
        at = text_line(path.read_bytes(), err.start)
        raise ConfigError(f"{path}:{at}: not UTF-8 text (byte {err.start})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{path}{line}: invalid YAML: {problem}") from err
    lines: dict[Loc, int] = {}
    if node is not None:
        _index_lines(node, (), lines)
    return data, lines


def text_line(data: bytes, offset: int) -> int:
    """1-based line number of byte ``offset`` in ``data``."""
    return data.count(b"\n", 0, offset) + 1


def _line_for(loc: Sequence[str | int], lines: dict[Loc, int]) -> int | None:
    key: Loc = tuple(loc)
    while key:
        if key in lines:
            return lines[key]
        key = key[:-1]
    return lines.get(())


def validate_file(model: type[M], path: Path) -> M:
    """Validate a YAML file against ``model``; errors name file, line and field."""
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = [p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
            field = ".".join(str(p) for p in loc) or "<top>"
            line = _line_for(loc, lines)
            msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
            problems.append(f"{path}:{line or 1}: field '{field}': {msg}")
        raise ConfigError("\n".join(problems)) from None
