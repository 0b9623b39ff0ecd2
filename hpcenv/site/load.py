"""Loading site files: where ``--site`` points, files that extend another site, and where each
value came from.

``--site NAME`` is ``NAME.yaml`` in a folder of ``HPCENV_SITE_PATH`` (colon-separated) or the
built-in ``site-configs/``; a value with a ``.yaml`` suffix or a path separator is a file.

A site file may name a built-in site or another file (a path relative to itself) under
``extends:`` and give only what differs. ``extends:`` reaches site files only (issue 20: as root,
``extends: /etc/shadow`` printed the file back line by line): a site name found as above, or a
path ending in ``.yaml``/``.yml`` (its link target too) that is a regular file; a base that is not
a site file (not YAML, not a mapping, keys that no site has) is refused naming only its path,
never its content. Tables merge key by key; a list or a scalar replaces
the base's, and ``null`` drops it (the field's default then applies). Provenance follows the values: a base's ``verified``/``assumed``/``placeholder``
note on a field that the extending file sets is dropped (the new value has its own story).
Every value keeps its origin (``file:line``), so errors point at the file that set the value and
``hpcenv sites show --resolved`` can say where each one came from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hpcenv.errors import ConfigError, did_you_mean
from hpcenv.paths import site_configs_dir
from hpcenv.reads import MAX_BYTES, read_bounded
from hpcenv.site.model import Site
from hpcenv.tables import merge
from hpcenv.yamlsrc import Loc, error_message, load_yaml, unknown_field, validate_file

EXTENDS = "extends"
MAX_DEPTH = 8
PROVENANCE_KINDS = ("verified", "assumed", "placeholder")


@dataclass(frozen=True)
class ResolvedSite:
    """Merged site data, the origin of every leaf value, and the chain of files (base first)."""

    data: dict[str, Any]
    origins: dict[str, str]
    chain: tuple[Path, ...]


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc)


def _leaves(data: Any, prefix: Loc = ()) -> list[Loc]:
    if isinstance(data, Mapping) and data:
        return [leaf for k, v in data.items() for leaf in _leaves(v, (*prefix, str(k)))]
    if isinstance(data, list) and data and any(isinstance(v, Mapping) for v in data):
        return [leaf for i, v in enumerate(data) for leaf in _leaves(v, (*prefix, i))]
    return [prefix]


def _line(lines: dict[Loc, int], loc: Loc) -> int:
    key = loc
    while key and key not in lines:
        key = key[:-1]
    return lines.get(key, 1)


def _unset(merged: dict[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A field the extending file sets to ``null`` goes back to the model's default, its
    base's value dropped (a twin's ``runtime.annotations: null`` on a podman runtime)."""
    for key, value in own.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _unset(merged[key], value)
    return merged


def _sets(data: Mapping[str, Any], dotted: str) -> bool:
    """Whether ``data`` sets the field ``dotted`` or one of its parents/children."""
    cur: Any = data
    for part in dotted.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
            if not isinstance(cur, Mapping):
                return True
        else:
            return isinstance(cur, list)  # a list replaces the base's as a whole
    return True


SITE_SUFFIXES = (".yaml", ".yml")


def _base_path(ref: str, child: Path, line: int) -> Path:
    if ref.endswith(SITE_SUFFIXES) or "/" in ref:
        path = Path(ref) if Path(ref).is_absolute() else child.parent / ref
        if not ref.endswith(SITE_SUFFIXES) or not path.resolve().name.endswith(SITE_SUFFIXES):
            raise ConfigError(
                f"{child}:{line}: extends {ref!r}: not a site file; extends takes a site name "
                "or a path to a .yaml/.yml site file"
            )
        if not path.is_file():
            raise ConfigError(f"{child}:{line}: extends {ref!r}: file not found ({path})")
        return path
    try:
        return site_file(ref)
    except ConfigError as err:
        raise ConfigError(f"{child}:{line}: field 'extends': {err}") from None


def _load_base(path: Path, child: Path, line: int) -> tuple[Any, dict[Loc, int]]:
    """A base's data, or one line naming its path when it is not a site file: the reasons
    load_yaml gives can quote the file (a key, a string), and a base may be any file."""
    not_site = f"{child}:{line}: extends: {path} is not a site file"
    try:
        data, lines = load_yaml(path)
    except ConfigError:
        raise ConfigError(f"{not_site} (check it with: hpcenv sites validate {path})") from None
    known = {*Site.model_fields, EXTENDS}
    if not isinstance(data, dict) or not set(data) <= known:
        raise ConfigError(f"{not_site} (its top level is not a site's fields)")
    return data, lines


def resolve(
    path: Path, _seen: tuple[Path, ...] = (), _child: tuple[Path, int] | None = None
) -> ResolvedSite:
    """Load ``path`` and everything it extends, merged, with each value's origin."""
    data, lines = _load_base(path, *_child) if _child else load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: expected a mapping at the top level")
    here = path.resolve()
    if here in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, here))
        raise ConfigError(f"{path}:{_line(lines, (EXTENDS,))}: extends loops: {chain}")
    if len(_seen) >= MAX_DEPTH:
        raise ConfigError(f"{path}: extends nests deeper than {MAX_DEPTH} files")
    own = {k: v for k, v in data.items() if k != EXTENDS}
    _check_provenance(own, path, lines)
    origins = {_dotted(leaf): f"{path}:{_line(lines, leaf)}" for leaf in _leaves(own)}
    ref = data.get(EXTENDS)
    if ref is None:
        return ResolvedSite(own, origins, (path,))
    if not isinstance(ref, str) or not ref:
        raise ConfigError(
            f"{path}:{_line(lines, (EXTENDS,))}: field 'extends': a site name or file"
        )
    at = _line(lines, (EXTENDS,))
    base = resolve(_base_path(ref, path, at), (*_seen, here), (path, at))
    provenance = {
        kind: {
            k: v
            for k, v in ((base.data.get("provenance") or {}).get(kind) or {}).items()
            if not _sets(own, k)
        }
        for kind in PROVENANCE_KINDS
    }
    _no_stale_versions(base, own, path, lines)
    merged = _unset(merge({**base.data, "provenance": provenance}, own), own)
    merged["provenance"] = {k: v for k, v in merged["provenance"].items() if v}
    kept = {k: v for k, v in base.origins.items() if not _sets(own, k)}
    return ResolvedSite(merged, {**kept, **origins}, (*base.chain, path))


def _check_provenance(own: dict[str, Any], path: Path, lines: dict[Loc, int]) -> None:
    """``provenance`` is merged across ``extends:`` before the site model sees it, so its shape
    is checked here, in every file of the chain: a mapping of :data:`PROVENANCE_KINDS` to
    mappings of a field to its source text (``provenance: 5`` or ``verified: [a, b]`` was an
    AttributeError)."""
    prov = own.get("provenance")
    if prov is None:
        return
    if not isinstance(prov, dict):
        raise ConfigError(
            f"{path}:{_line(lines, ('provenance',))}: field 'provenance': a mapping of "
            f"{', '.join(PROVENANCE_KINDS)} (each field: its source), not {type(prov).__name__}"
        )
    for kind, facts in prov.items():
        if kind not in PROVENANCE_KINDS:
            continue  # the site model names an unknown kind, with did-you-mean
        if facts is not None and not isinstance(facts, dict):
            raise ConfigError(
                f"{path}:{_line(lines, ('provenance', kind))}: field 'provenance.{kind}': a "
                f'mapping of a field to its source (mpi.spec: "..."), not '
                f"{type(facts).__name__}"
            )


# Versions other values are written for: a base's modules, paths and variables name them.
def _version_after_at(value: Any) -> str:
    return str(value).rpartition("@")[2]


VERSIONED: dict[str, Callable[[Any], str]] = {
    "gpu.rocm": str,
    "gpu.driver": str,
    "mpi.spec": _version_after_at,
}


def _get(data: Any, loc: Loc) -> Any:
    for part in loc:
        if not isinstance(data, Mapping | list):
            return None
        try:
            data = data[part]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _no_stale_versions(
    base: ResolvedSite, own: dict[str, Any], path: Path, lines: dict[Loc, int]
) -> None:
    """A file that changes a base's version (``gpu.rocm: 6.3.1`` over Frontier's 7.1.1) must
    also change what the base wrote for the old one (``modules: [..., rocm/7.1.1]``): else the
    job would load one ROCm and the image be built for another. Refused, naming both."""
    for field, version_of in VERSIONED.items():
        loc = tuple(field.split("."))
        old, new = _get(base.data, loc), _get(own, loc)
        if old is None or new is None or version_of(old) == version_of(new):
            continue
        stale = re.compile(rf"(?<![\w.]){re.escape(version_of(old))}(?![\w.])")
        for leaf in _leaves(base.data):
            dotted = _dotted(leaf)
            if dotted.startswith("provenance") or dotted == field or _sets(own, dotted):
                continue
            values = _get(base.data, leaf)
            for value in values if isinstance(values, list) else [values]:
                if isinstance(value, str) and stale.search(value):
                    raise ConfigError(
                        f"{path}:{_line(lines, loc)}: {field} {new} replaces {old} of "
                        f"{base.chain[-1].name}, whose {dotted} ({base.origins.get(dotted, '?')})"
                        f" still names {old}: {value!r}; set {dotted} in this file too"
                    )


def _origin_for(loc: Loc, origins: dict[str, str], fallback: str) -> str:
    key = list(loc)
    while key:
        dotted = _dotted(tuple(key))
        hit = origins.get(dotted) or next(
            (v for k, v in origins.items() if k.startswith(dotted + ".")), None
        )
        if hit:
            return hit
        key.pop()
    return fallback


def load_resolved(path: Path) -> tuple[Site, ResolvedSite]:
    """The validated site of ``path`` (extends applied); errors name the file that set a value."""
    resolved = resolve(path)
    try:
        return Site.model_validate(resolved.data), resolved
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = tuple(
                p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-"))
            )
            field = _dotted(loc) or "<top>"
            where = _origin_for(loc, resolved.origins, f"{path}:1")
            msg = unknown_field(Site, loc) if e["type"] == "extra_forbidden" else error_message(e)
            problems.append(f"{where}: field '{field}': {msg}")
        raise ConfigError("\n".join(problems)) from None


def search_path() -> list[Path]:
    """Folders searched for NAME.yaml: ``HPCENV_SITE_PATH`` (colon-separated), then built-ins."""
    extra = [Path(p) for p in os.environ.get("HPCENV_SITE_PATH", "").split(":") if p]
    return [*extra, site_configs_dir()]


def site_file(name_or_path: str) -> Path:
    """Resolve ``--site`` to a file: an existing path, else NAME.yaml on the search path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if candidate.is_file():
            return candidate
        raise ConfigError(f"site file not found: {name_or_path}")
    for folder in search_path():
        path = folder / f"{name_or_path}.yaml"
        if path.is_file():
            return path
    raise ConfigError(
        f"unknown site {name_or_path!r}{did_you_mean(name_or_path, site_names())}; "
        f"known: {', '.join(site_names())} "
        "(or give a path to a site file, or add a folder to HPCENV_SITE_PATH)"
    )


def load_site(name_or_path: str) -> Site:
    """A validated site; a file with ``extends:`` is merged over its base (:func:`resolve`)."""
    return load_site_file(site_file(name_or_path))


def load_site_file(path: Path) -> Site:
    """Validate one site file (``extends:`` merged over its base)."""
    if _extends(path):
        return load_resolved(path)[0]
    return validate_file(Site, path)


def _extends(path: Path) -> bool:
    try:
        text = read_bounded(path, MAX_BYTES, "a site file")
    except ConfigError:
        return False  # validate_file reports the unreadable or oversized file
    return any(line.startswith(b"extends:") for line in text.splitlines())


def site_names() -> list[str]:
    names = {p.stem for folder in search_path() if folder.is_dir() for p in folder.glob("*.yaml")}
    return sorted(names)
