"""What input may look like before it reaches a generated file, and how each format escapes it.

Every value from a site file, a recipe, ``--set``, a job option or the Python API passes here:

- :class:`SafeModel` refuses newlines and other control characters in every string it is given
  (keys too), whatever the field: a newline would start a new Dockerfile instruction, a new
  Singularity section, a new shell command or a new pip.conf key.
- The ``Annotated`` types below give each kind of value its shape, matched against the *whole*
  string (pydantic's Rust ``^...$``, Python's ``re.fullmatch``: a trailing newline never slips
  through as it does with Python's ``re.match(r"^...$")``).

Escaping, one path per target format (the templates only place text made here):

- Dockerfile and Singularity: :func:`checked_lines` / :func:`one_line` (Jinja ``finalize`` in
  ``render.py`` refuses any other multi-line value); ENV/LABEL values are JSON strings.
- shell (job scripts, ``RUN``/``%post`` commands): ``shlex.quote`` or :mod:`hpcenv.jobs.shell`.
- pip.conf (ini): :func:`ini_line`.
- labels: :func:`one_line` values (Singularity ``%labels`` is ``key value`` on one line).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from hpcenv.credentials import shown, userinfo_problem
from hpcenv.errors import ConfigError

# C0 controls, DEL, C1 controls and the Unicode line/paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def has_control(text: str) -> bool:
    return bool(CONTROL.search(text))


def one_line(text: str, what: str = "value") -> str:
    """``text`` if it has no newline or control character, else a ConfigError naming it."""
    if has_control(text):
        raise ConfigError(f"{what} {text!r} contains a newline or control character")
    return text


class Lines(str):
    """Text made of lines that were each checked by :func:`checked_lines` (trusted by templates)."""

    __slots__ = ()


def checked_lines(items: Iterable[str], sep: str) -> Lines:
    """Join one-line items with a separator that may itself contain a newline."""
    return Lines(sep.join(one_line(str(i)) for i in items))


def finalize(value: Any) -> Any:
    """Jinja ``finalize`` for every generated file: a value placed by a template is one line,
    unless it is :class:`Lines` that hpcenv built from checked parts."""
    if isinstance(value, Lines) or not isinstance(value, str):
        return value
    if has_control(value):
        raise ConfigError(f"refusing to write {value[:80]!r}: newline or control character")
    return value


def ini_line(key: str, value: str) -> str:
    """One ``key = value`` line of pip.conf (no newline, no ini comment or section syntax)."""
    one_line(value, f"pip.conf {key}")
    if not re.fullmatch(
        r"[A-Za-z0-9._~:/?#\[\]@!&+,;=%-]+(?: [A-Za-z0-9._~:/?#\[\]@!&+,;=%-]+)*", value
    ):
        raise ConfigError(f"pip.conf {key}: {shown(value)!r} is not a URL or path list")
    return f"{key} = {value}"


# pydantic error types -> words (no regexes, no "Input should be" jargon); ctx keys fill them.
_WORDS = {
    "missing": "is required",
    "greater_than_equal": "must be at least {ge} (got {input})",
    "greater_than": "must be more than {gt} (got {input})",
    "less_than_equal": "must be at most {le} (got {input})",
    "less_than": "must be less than {lt} (got {input})",
    "int_parsing": "must be a whole number (got {input!r})",
    "int_type": "must be a whole number (got {input!r})",
    "int_from_float": "must be a whole number (got {input!r})",
    "bool_parsing": "must be true or false (got {input!r})",
    "string_type": "must be text (got {input!r})",
    "string_too_long": "is longer than {max_length} characters",
    "string_pattern_mismatch": "{input!r} has characters or a form this field does not allow",
    "literal_error": "must be one of {expected} (got {input!r})",
}


def error_words(error: Any) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as one line of words."""
    kind = error.get("type", "")
    template = _WORDS.get(kind)
    if template is not None:
        try:
            return template.format(input=shown(error.get("input")), **(error.get("ctx") or {}))
        except (KeyError, IndexError, ValueError):
            pass
    msg = str(error.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return " ".join(msg.split())


def validation_message(err: Any, what: str) -> str:
    """A pydantic ``ValidationError`` as one line per problem: ``what: field 'x': message``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-")) or "<top>"
        msg = "unknown field" if e["type"] == "extra_forbidden" else error_words(e)
        lines.append(f"{what}: field '{loc}': {msg}")
    return "\n".join(lines)


def _walk(value: Any, path: tuple[str | int, ...]) -> None:
    if isinstance(value, str):
        if has_control(value):
            where = ".".join(str(p) for p in path) or "<value>"
            raise ValueError(f"{where}: newline or control character in {value!r}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(k, (*path, "<key>"))
            _walk(v, (*path, str(k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _walk(v, (*path, i))


class SafeModel(BaseModel):
    """Base of every input model: unknown keys refused, frozen, no control characters anywhere."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_control_characters(cls, data: Any) -> Any:
        _walk(data, ())
        return data


def _pattern(regex: str) -> str:
    """A whole-string pattern for pydantic, whose (Rust) regex ``$`` is the end of the text."""
    return r"^(?:" + regex + r")$"


def _no_leading_dash(value: str) -> str:
    if value.startswith("-"):
        raise ValueError("must not start with '-' (it would be read as an option)")
    return value


# A word safe in a shell script without quoting: no spaces, quotes, ;|&<>`\ or $( .
WORD = r"[A-Za-z0-9_.,:@%+=/-]+"
ShellWord = Annotated[str, StringConstraints(pattern=_pattern(WORD), max_length=256)]
# A shell word that is a value, never an option (account, queue, host, module names).
Word = Annotated[
    str, StringConstraints(pattern=_pattern(WORD), max_length=256), AfterValidator(_no_leading_dash)
]
# A path that may use environment variables ($USER, ${PROJ}) but nothing else of the shell.
PATH = r"(?:[A-Za-z0-9_.,:@%+=/-]|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)+"
ShellPath = Annotated[
    str,
    StringConstraints(pattern=_pattern(PATH), max_length=4096),
    AfterValidator(_no_leading_dash),
]
# Free text that is always shlex-quoted when rendered; still no quotes or metacharacters.
ShellText = Annotated[
    str, StringConstraints(pattern=_pattern(r"[A-Za-z0-9_.,:@%+=/ -]+"), max_length=1024)
]
EnvName = Annotated[str, StringConstraints(pattern=_pattern(r"[A-Za-z_][A-Za-z0-9_]{0,127}"))]
Name = Annotated[str, StringConstraints(pattern=_pattern(r"[a-z][a-z0-9-]{0,63}"))]
# A host path without variables (read by hpcenv on this machine: CA bundle, wheelhouse).
HostPath = Annotated[
    str,
    StringConstraints(pattern=_pattern(r"[A-Za-z0-9_.,:@%+=/~-]{1,4096}")),
    AfterValidator(_no_leading_dash),
]
# http(s) or file URL: no spaces, quotes, backslashes, backticks, '$', '<', '>' or '{}'.
URL = r"(?:https?|file)://[A-Za-z0-9._~:/?#\[\]@!&+,;=%-]{1,2000}"


def _url_parts(value: str) -> str:
    """A URL Python's ``urlsplit`` reads whole: a port from 1 to 65535, brackets that close
    (later ``.port`` or ``urlsplit`` would raise ValueError where the URL is used)."""
    from urllib.parse import urlsplit

    try:
        port = urlsplit(value).port
    except ValueError as err:  # "Port out of range 0-65535", "Invalid IPv6 URL"
        raise ValueError(f"not a usable URL: {str(err)[0].lower()}{str(err)[1:]}") from None
    if port == 0:
        raise ValueError("not a usable URL: port 0")
    return value


def _userinfo_readable(value: str) -> str:
    problem = userinfo_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# ``user:password@`` is allowed (build secrets, see :mod:`hpcenv.credentials`) when it can be
# read one way only.
Url = Annotated[
    str,
    StringConstraints(pattern=_pattern(URL)),
    AfterValidator(_userinfo_readable),  # first: a later error must not quote a password
    AfterValidator(_url_parts),
]
# An OCI image reference: [registry[:port]/]path[:tag][@digest], lower-case path components.
IMAGE = (
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\.[a-z0-9]+)*(?::[0-9]{1,5})?"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
ImageRef = Annotated[str, StringConstraints(pattern=_pattern(IMAGE), max_length=512)]
Count = Annotated[int, Field(ge=1, le=4096, strict=True)]


def image_or_sif(value: str, what: str = "image") -> str:
    """An image reference (``localhost/x:tag``), a SIF file path or an enroot SquashFS file path
    (``.sqsh``, what the CSCS Container Engine runs); never an option."""
    one_line(value, what)
    if value.startswith("-"):
        raise ConfigError(
            f"{what} {value!r} must not start with '-' (it would be read as an option)"
        )
    if re.fullmatch(IMAGE, value) or (
        value.endswith((".sif", ".sqsh")) and re.fullmatch(PATH, value)
    ):
        return value
    raise ConfigError(
        f"{what} {value!r} is not an image reference (registry/name:tag), a .sif or a .sqsh path"
    )


_WALLTIME = re.compile(
    r"\A(?:(?P<d>\d{1,3})-(?P<dh>\d{1,2})(?::(?P<dm>\d{2})(?::(?P<ds>\d{2}))?)?"
    r"|(?P<h>\d{1,4}):(?P<m>\d{2}):(?P<s>\d{2})"
    r"|(?P<mm>\d{1,6}))\Z"
)


def walltime_seconds(value: str) -> int:
    """Seconds in a time: ``MM`` (minutes), ``HH:MM:SS`` or ``D-HH[:MM[:SS]]`` (as Slurm reads
    them). ``A:B`` is refused: Slurm reads it as minutes:seconds, LSF as hours:minutes."""
    if re.fullmatch(r"\d+:\d+", value):
        raise ValueError(
            f"walltime {value!r} is ambiguous (Slurm: MM:SS, LSF: HH:MM); write HH:MM:SS"
        )
    m = _WALLTIME.match(value)
    if not m:
        raise ValueError(
            f"walltime {value!r} is not a time (MM, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)"
        )
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if any(g.get(k, 0) >= 60 for k in ("dm", "ds", "m", "s")) or g.get("dh", 0) >= 24:
        raise ValueError(f"walltime {value!r}: minutes and seconds < 60, hours after a day < 24")
    seconds = (
        g.get("d", 0) * 86400
        + (g.get("dh", 0) + g.get("h", 0)) * 3600
        + (g.get("dm", 0) + g.get("m", 0) + g.get("mm", 0)) * 60
        + g.get("ds", 0)
        + g.get("s", 0)
    )
    if seconds <= 0 or seconds > 366 * 86400:
        raise ValueError(f"walltime {value!r} must be more than 0 and at most a year")
    return seconds


def _walltime(value: str) -> str:
    walltime_seconds(value)
    return value


Walltime = Annotated[str, AfterValidator(_walltime)]
