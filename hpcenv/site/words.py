"""Words in a site file that the site model checks and the job side reads further.

``scheduler.extra_directives`` are scheduler flags with optional values; the site model
refuses words that do not parse, and the job scripts merge the same pairs into their
directives (:mod:`hpcenv.jobs.schedulers`). A ``scheduler.account`` such as ``PROJ123`` or
``m0000`` is an example value, not a project: ``sites validate`` lists it and ``submit``
refuses it (:mod:`hpcenv.jobs.project`). Both live here, below the model and the jobs, so
that the site package imports nothing from :mod:`hpcenv.jobs` (issue 18).
"""

from __future__ import annotations

import re

from hpcenv.errors import ConfigError

# Values that stand for "your project here" in examples and site files.
_PLACEHOLDER = re.compile(
    r"^(?:PROJ\d*|PROJECT|proj\d*|m0+|abc123|ABC123|X{3,}|x{3,}|CHANGEME|changeme|"
    r"your[_-]?project|<.*>|\$\{?PROJ\}?)$",
    re.IGNORECASE,
)


def is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.match(value))


def directive_pairs(words: list[str]) -> list[tuple[str, str | None]]:
    """``["-C", "gpu", "--exclusive"]`` -> ``[("-C", "gpu"), ("--exclusive", None)]``."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        flag = words[i]
        if not flag.startswith("-"):
            raise ConfigError(f"directive words must start with a flag, got {flag!r} in {words}")
        if "=" in flag:
            name, value = flag.split("=", 1)
            pairs.append((name, value))
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("-"):
            pairs.append((flag, words[i + 1]))
            i += 2
        else:
            pairs.append((flag, None))
            i += 1
    return pairs
