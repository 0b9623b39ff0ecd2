"""Environment Definition Files (EDF) for the CSCS Container Engine: what ``srun --environment``
reads.

An EDF is TOML (eth-cscs/cscs-docs ``docs/software/container-engine/edf.md`` at 80abed1, read
2026-11-24): ``image``, ``mounts`` (``SOURCE:DESTINATION[:FLAGS]``), ``workdir``, an ``[env]``
table and an ``[annotations]`` table whose dotted keys switch the Container Engine's hooks
(``com.hooks.aws_ofi_nccl.enabled``). The engine expands ``${VAR}`` in every value from the host
and image environment (``$$`` is a literal dollar; an unset ``${VAR}`` is an error, ``${VAR:-}``
is empty); cscs-docs asks for the braces (``docs/software/ml/pytorch.md``: "It is important to
use curly braces for environment variables used in the EDF").

hpcenv writes the file as data: every string is a TOML basic string escaped here
(:func:`toml_string`), every key a checked bare key, and the text is parsed back with
:mod:`tomllib` before it is used, so a value can never add a key or a table.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence

from hpcenv.errors import ConfigError
from hpcenv.safe import Lines, checked_lines

# Annotation keys are dotted bare keys (TOML 1.0: A-Za-z0-9_-), as cscs-docs writes them.
_KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A shell variable reference as site files and job paths write them: $NAME or ${NAME}.
_SHELL_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def edf_value(value: str, what: str) -> str:
    """A shell-style path (``$SCRATCH/jobs``) in the engine's syntax (``${SCRATCH}/jobs``); any
    other ``$`` becomes ``$$`` (a literal dollar), so only the named variables expand."""
    if "${" in value and not all(m.group(1) or m.group(2) for m in _SHELL_VAR.finditer(value)):
        raise ConfigError(f"{what} {value!r}: only $NAME and ${{NAME}} expand in an EDF")
    parts: list[str] = []
    last = 0
    for m in _SHELL_VAR.finditer(value):
        parts.append(value[last : m.start()].replace("$", "$$"))
        parts.append("${" + (m.group(1) or m.group(2)) + "}")
        last = m.end()
    parts.append(value[last:].replace("$", "$$"))
    return "".join(parts)


def mount(path: str) -> str:
    """``path`` bound at the same place (``SOURCE:DESTINATION``); a ``:`` in it is refused."""
    value = edf_value(path, "mount")
    if ":" in value:
        raise ConfigError(f"mount {path!r}: ':' separates SOURCE:DESTINATION[:FLAGS] in an EDF")
    return f"{value}:{value}"


def edf_text(
    *,
    image: str,
    workdir: str,
    mounts: Sequence[str],
    env: Mapping[str, str],
    annotations: Mapping[str, str],
) -> Lines:
    """The EDF text, checked by parsing it back (:func:`parse`)."""
    lines = [
        "# hpcenv: generated for srun --environment (CSCS Container Engine EDF)",
        f"image = {toml_string(image)}",
        f"workdir = {toml_string(workdir)}",
        "mounts = [" + ", ".join(toml_string(m) for m in mounts) + "]",
    ]
    if env:
        lines.append("")
        lines.append("[env]")
        for name, value in env.items():
            if not _ENV_NAME.match(name):
                raise ConfigError(f"EDF env name {name!r} is not a variable name")
            lines.append(f"{name} = {toml_string(value)}")
    if annotations:
        lines.append("")
        lines.append("[annotations]")
        for key, value in annotations.items():
            if not _KEY.match(key):
                raise ConfigError(f"EDF annotation {key!r} is not a dotted key (a.b.c)")
            lines.append(f"{key} = {toml_string(value)}")
    text = checked_lines(lines, "\n")
    parsed = parse(text)
    if parsed.get("image") != image or parsed.get("mounts") != list(mounts):
        raise ConfigError("EDF did not read back as written")  # pragma: no cover - escaper bug
    return text


def parse(text: str) -> dict[str, object]:
    """The EDF as TOML data (a clear error where it is not TOML)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"EDF is not valid TOML: {err}") from None
