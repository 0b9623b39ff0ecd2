"""YAML loading that remembers where each value came from, for file:line:field errors.

Hostile or careless files are refused before any value is used: more than 1 MiB (looked at
before reading, :func:`hpcenv.reads.read_bounded`), nested deeper than 64 levels, not UTF-8,
anchors and aliases (a few hundred bytes of nested aliases expand to gigabytes), duplicate keys
(YAML keeps the last one silently), keys that are not plain strings, and newlines or control
characters in any key or string value (they would start a new instruction in a generated file).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from hpcenv.errors import ConfigError
from hpcenv.reads import MAX_BYTES, MAX_DEPTH, read_bounded
from hpcenv.safe import has_control

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


def _index_lines(node: yaml.Node, path: Loc, out: dict[Loc, int], where: Path) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode):
                raise ConfigError(f"{where}:{line}: a key must be a plain string")
            name = str(key.value)
            if name in seen:
                raise ConfigError(
                    f"{where}:{line}: duplicate key '{name}' (first at line {seen[name]})"
                )
            seen[name] = line
            sub = (*path, name)
            _index_lines(value, sub, out, where)
            out[sub] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, (*path, i), out, where)


def _refuse_aliases(node: yaml.Node, where: Path) -> None:
    """An alias is the same node reached twice (composing shares it; nothing is expanded yet).
    Nesting deeper than MAX_DEPTH is refused here too, before anything recurses over it."""
    seen: set[int] = set()
    stack = [(node, 0)]
    while stack:
        cur, depth = stack.pop()
        if depth > MAX_DEPTH:
            line = cur.start_mark.line + 1 if cur.start_mark else 1
            raise ConfigError(f"{where}:{line}: nested deeper than {MAX_DEPTH} levels")
        if id(cur) in seen:
            line = cur.start_mark.line + 1 if cur.start_mark else 1
            raise ConfigError(
                f"{where}:{line}: YAML anchors and aliases (&name, *name) are not allowed; "
                "write the value out"
            )
        seen.add(id(cur))
        if isinstance(cur, yaml.MappingNode):
            for key, value in cur.value:
                stack += [(key, depth + 1), (value, depth + 1)]
        elif isinstance(cur, yaml.SequenceNode):
            stack += [(item, depth + 1) for item in cur.value]


def _show(part: str | int) -> str:
    """A field name for a message: a key with control characters is shown escaped."""
    text = str(part)
    return repr(text) if has_control(text) else text


def _check_text(data: Any, path: Loc, lines: dict[Loc, int], where: Path) -> None:
    if isinstance(data, str):
        if has_control(data):
            field = ".".join(_show(p) for p in path) or "<top>"
            raise ConfigError(
                f"{where}:{_line_for(path, lines) or 1}: field '{field}': newline or control "
                f"character in {data[:60]!r}"
            )
    elif isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"{where}:{_line_for(path, lines) or 1}: key {key!r} must be a string"
                )
            _check_text(key, (*path, key), lines, where)  # the key itself, shown escaped
            _check_text(value, (*path, key), lines, where)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            _check_text(item, (*path, i), lines, where)


def load_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """Parse ``path``; return the data and a map from field path to line number."""
    raw = read_bounded(path, MAX_BYTES, "a site or recipe file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        at = text_line(raw, err.start)
        raise ConfigError(f"{path}:{at}: not UTF-8 text (byte {err.start})") from None
    lines: dict[Loc, int] = {}
    try:
        loader = _LOADER(text)  # one parse: compose, check, then construct
        try:
            node = loader.get_single_node()
            data = None
            if node is not None:
                _refuse_aliases(node, path)
                _index_lines(node, (), lines, path)
                data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        if "nesting depth" in problem:  # libyaml's own limit (PyYAML 6.0.4's bundled libyaml)
            raise ConfigError(f"{path}{where}: nested deeper than {MAX_DEPTH} levels") from None
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from err
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    _check_text(data, (), lines, path)
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


def error_message(error: Any) -> str:
    """One pydantic error as one clean line (no 'Value error, ' prefix, no newlines)."""
    if error["type"] == "extra_forbidden":
        return "unknown field"
    from hpcenv.safe import error_words

    return error_words(error)  # one line, in words


def unknown_field(model: type[BaseModel], loc: Sequence[str | int]) -> str:
    """``unknown field`` plus the nearest field name the model has at that place."""
    import typing

    from hpcenv.errors import did_you_mean

    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            continue
        info = current.model_fields.get(part)
        if info is None:
            return "unknown field"
        stack, current = [info.annotation], None
        while stack:  # the model inside Optional[...] / list[...] / dict[..., ...]
            ann = stack.pop()
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                current = ann
                break
            stack.extend(typing.get_args(ann))
    if isinstance(current, type) and issubclass(current, BaseModel):
        return "unknown field" + did_you_mean(str(loc[-1]), list(current.model_fields))
    return "unknown field"


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
            field = ".".join(_show(p) for p in loc) or "<top>"
            line = _line_for(loc, lines)
            msg = unknown_field(model, loc) if e["type"] == "extra_forbidden" else error_message(e)
            problems.append(f"{path}:{line or 1}: field '{field}': {msg}")
        raise ConfigError("\n".join(problems)) from None
