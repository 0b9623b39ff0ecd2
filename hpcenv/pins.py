"""Pins: ``--set NAME=VALUE`` and a site's ``defaults``, checked where they enter.

A pin must be a known release of its component or a well-formed version that the user explicitly allows with a trailing ``!``
(``--set 'torch=2.99.0!'``): the knowledge base then has no rows for it, and rules that would
need one let it pass. Known: any release in ``catalogue.yaml`` (every final release on the
package index, :mod:`hpcenv.knowledge.refresh`) or in ``compat.yaml``'s curated ``releases:``,
the only ones the resolver picks by itself; a release the index yanked is refused like an
unknown one. ``mpi`` takes ``family[@version]`` and must be a family hpcenv can install
in an image. Every error is one line naming the pin.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hpcenv.errors import ConfigError, did_you_mean
from hpcenv.knowledge import kb, known_releases, mpi_family, releases, rule, yanked
from hpcenv.recipe import COMPONENTS
from hpcenv.safe import has_control
from hpcenv.versions import is_version, major_minor, parse_spec

_SITE_PROPERTY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_SERIES = ("cuda", "rocm", "python")  # pins compared by major.minor


@dataclass(frozen=True)
class Pin:
    value: str
    origin: str  # "--set" or "site <name> defaults"
    forced: bool = False  # '!': a well-formed version the knowledge base does not know

    def describe(self, name: str) -> str:
        return f"{name}={self.value}{'!' if self.forced else ''} (from {self.origin})"


def no_control(text: str, what: str) -> str:
    """Refuse newlines and other control characters (they would start a new instruction)."""
    if has_control(text):  # hpcenv.safe's set: C0, DEL, C1 and the Unicode line breaks
        raise ConfigError(f"{what}: {text!r} contains a newline or control character")
    return text


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``["torch=2.2.0", "mpi=openmpi@4.1.4"]`` -> dict; each pin is checked (:func:`check_pin`)."""
    out: dict[str, str] = {}
    for pair in pairs:
        no_control(pair, "--set")
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(f"--set expects NAME=VALUE, got {pair!r}")
        if name not in COMPONENTS:
            raise ConfigError(
                f"--set {name}: unknown component{did_you_mean(name, COMPONENTS)}; "
                f"known: {', '.join(COMPONENTS)}"
            )
        check_pin(name, value, "--set")
        if name in out and out[name] != value:
            raise ConfigError(f"--set {name} given twice ({out[name]}, {value}); give it once")
        out[name] = value
    return out


def _known(name: str) -> list[str]:
    if name == "python":
        return sorted({v for row in rule("os-python").table.values() for v in row})
    return known_releases(name)


def check_pin(name: str, raw: str, origin: str) -> Pin:
    """Validate one pin; return it without its '!'."""
    where = f"{origin}: {name}={raw}" if origin == "--set" else f"{name}: {raw!r}"
    no_control(raw, where)
    value = raw.strip()
    forced = value.endswith("!")
    value = value.removesuffix("!")
    if name not in COMPONENTS:
        raise ConfigError(
            f"{where}: unknown component{did_you_mean(name, COMPONENTS)}; "
            f"known: {', '.join(COMPONENTS)}"
        )
    if name in ("arch", "os"):
        if forced or not _SITE_PROPERTY.fullmatch(value):
            raise ConfigError(f"{where}: not an {name} name")
        return Pin(value, origin)
    if name == "rccl":
        raise ConfigError(f"{where}: RCCL ships with ROCm; it follows the site's gpu.rocm")
    if name == "mpi":
        return _mpi_pin(value, forced, origin, where)
    if not is_version(value):
        raise ConfigError(f"{where}: not a version (e.g. {name}={_example(name)})")
    known = _known(name)
    key = major_minor if name in _SERIES else str
    if value in yanked(name) and not forced:
        raise ConfigError(
            f"{where}: {name} {value} was yanked from the package index "
            f"({yanked(name)[value] or 'no reason given'}); to use it anyway, pin it as {name}={value}!"
        )
    if key(value) not in [key(k) for k in known] and not forced:
        raise ConfigError(
            f"{where}: not a known {name} release (known: {_nearby(value, known)}); "
            f"to use it anyway, pin it as {name}={value}!"
        )
    return Pin(value, origin, forced)


def _nearby(value: str, known: list[str]) -> str:
    """The known releases of the pin's major.minor, else the newest ten (the catalogue of a
    component has dozens)."""
    same = [k for k in known if major_minor(k) == major_minor(value)]
    if same:
        return ", ".join(same)
    if len(known) > 10:
        return f"{', '.join(known[:10])}, ... {len(known)} in all"
    return ", ".join(known) or "none"


def _example(name: str) -> str:
    known = releases(name) or _known(name)
    return known[0] if known else "1.0"


def _mpi_pin(value: str, forced: bool, origin: str, where: str) -> Pin:
    try:
        family, version = parse_spec(value)
    except ConfigError:
        raise ConfigError(
            f"{where}: not an MPI spec; use family[@version], e.g. mpi=openmpi@4.1.4"
        ) from None
    try:
        info = mpi_family(family)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    installable = [
        n for n, f in kb()["mpi_families"].items() if isinstance(f, dict) and f.get("releases")
    ]
    if not info.get("releases"):
        raise ConfigError(
            f"{where}: {family} cannot be installed in an image (hpcenv installs "
            f"{', '.join(installable)}); the site's host MPI is matched by its ABI family"
        )
    if version is not None and version not in info["releases"] and not forced:
        raise ConfigError(
            f"{where}: not a known {family} release (known: {', '.join(info['releases'])}); "
            f"to use it anyway, pin it as mpi={family}@{version}!"
        )
    return Pin(value, origin, forced and version is not None)
