"""Versions are versions: ``packaging.version`` for every comparison.

A release candidate sorts before its final release (``2.2.0rc1 < 2.2.0``), a local tag is kept
apart (``2.1.100+xpu``), and text that is not a version is a :class:`ConfigError` naming it,
never a traceback. ``name@version`` specs (``openmpi@4.1.4``, ``pmix@4``) are split here too.
"""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from hpcenv.errors import ConfigError

# What a version may look like where users type one (before packaging parses it): digits first,
# then letters, digits and . + _ - only. Whole-string match: no trailing newline.
VERSION_TEXT = r"[0-9][0-9A-Za-z.+_-]{0,63}"
_VERSION = re.compile(VERSION_TEXT)
_SPEC = re.compile(r"(?P<name>[a-z][a-z0-9-]{0,63})(?:@(?P<version>" + VERSION_TEXT + r"))?")


@lru_cache(maxsize=4096)
def parse(version: str) -> Version:
    """``"2.2.0"`` -> ``Version``; anything else is a ConfigError."""
    if not _VERSION.fullmatch(version):
        raise ConfigError(f"not a version: {version!r}")
    try:
        return Version(version)
    except InvalidVersion:
        raise ConfigError(f"not a version: {version!r}") from None


def is_version(text: str) -> bool:
    try:
        parse(text)
    except ConfigError:
        return False
    return True


def major_minor(version: str) -> str:
    """``"2.1.100+xpu"`` -> ``"2.1"``; ``"12"`` -> ``"12"``."""
    return ".".join(str(x) for x in parse(version).release[:2])


def major(version: str) -> str:
    return str(parse(version).release[0])


def series(version: str, precision: str) -> str:
    """The part of ``version`` that a rule compares: ``exact``, ``major`` or ``major.minor``."""
    if precision == "exact":
        return str(parse(version))
    return major(version) if precision == "major" else major_minor(version)


def at_least(version: str, minimum: str) -> bool:
    return parse(version) >= parse(minimum)


def newest_first(versions: list[str]) -> list[str]:
    return sorted(versions, key=parse, reverse=True)


def satisfies(version: str, spec: str) -> bool:
    """``satisfies("2.2.0", ">=2.1")``; an empty spec matches every version."""
    try:
        specs = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ConfigError(f"not a version specifier: {spec!r}") from None
    return specs.contains(parse(version), prereleases=True)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split a spack-style ``name@version`` spec; the whole text must match (no newline)."""
    m = _SPEC.fullmatch(spec)
    if not m:
        raise ConfigError(
            f"not a name@version spec: {spec!r} (lower-case name, optional @version, "
            "e.g. openmpi@4.1.4)"
        )
    version = m["version"]
    if version is not None:
        parse(version)
    return m["name"], version
