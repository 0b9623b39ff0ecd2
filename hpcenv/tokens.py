"""What a secret looks like, so that one given by mistake is refused without being shown (issue 40).

A token file passed as ``--requirements`` parses as a package name (``ghp_...`` is a valid PEP 508
name) and would be written into the Dockerfile, the build log, the image and the index request;
a ``.netrc`` or ``.env`` file does not parse, and its lines used to be quoted in the error. The
readers of user input ask :func:`token_kind` and :func:`secret_line` and refuse in one line that
names the file and line, never the value.

The prefixes are the issuers' own documented formats (read 2026-11-28):

- GitHub: "About authentication to GitHub", section "GitHub's token formats" (``ghp_``, ``gho_``,
  ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``);
- GitLab: "Token overview", section "Token prefixes" (``glpat-``, ``gldt-``, ``glrt-``,
  ``glptt-``, ``glft-``, ``glcbt-``, ``gloas-``);
- Hugging Face: "User access tokens" (``hf_``);
- Slack: "Token types" (``xoxb-``, ``xoxp-``, ``xoxa-``, ``xoxr-``, ``xoxs-``, ``xoxe-``,
  ``xapp-``);
- AWS: IAM "Unique identifiers" (access key ids ``AKIA``/``ASIA`` and 16 upper-case letters and
  digits);
- OpenAI and Anthropic API keys (``sk-``, ``sk-proj-``, ``sk-ant-``), Stripe (``sk_live_``,
  ``rk_live_``), PyPI API tokens (``pypi-``), npm access tokens (``npm_``), Google API keys
  (``AIza``).

A prefix alone is not enough (``hf_transfer``, ``sk-video`` are real packages): the rest must be
at least :data:`MIN_REST` characters with a digit or an upper-case letter. Without a known prefix,
a value is a token when it is long hex (:data:`MIN_HEX`: API keys, W&B keys, classic tokens) or a
long word mixing digits, upper- and lower-case letters that no package name does
(:func:`looks_random`).
"""

from __future__ import annotations

import math
import re
from collections import Counter

PREFIXES: tuple[str, ...] = (
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "glpat-",
    "gldt-",
    "glrt-",
    "glptt-",
    "glft-",
    "glcbt-",
    "gloas-",
    "hf_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxr-",
    "xoxs-",
    "xoxe-",
    "xapp-",
    "sk-",
    "sk_live_",
    "rk_live_",
    "pypi-",
    "npm_",
    "AIza",
)
MIN_REST = 16
MIN_HEX = 32
AWS_KEY_ID = re.compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}")
_WORD = re.compile(r"[A-Za-z0-9_.+/=-]+")

# Lines of files that hold secrets (and never a requirement): a shell or .env assignment
# (``NAME=value``, ``export NAME=value``), a .netrc entry (netrc(5): machine/default, login,
# password), a PEM block (RFC 7468), a .pypirc/.npmrc setting with a password or token.
_ASSIGNMENT = re.compile(r"(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=")
_NETRC = re.compile(r"(?:^|\s)(?:machine|default|login|password|account|macdef)(?:\s|$)")
_PEM = re.compile(r"-----(?:BEGIN|END) ")
_SETTING = re.compile(r"(?i)[A-Za-z0-9_.:/-]*(?:password|passwd|token|secret|_auth|apikey)\s*[=:]")


def looks_random(value: str, min_length: int = 24) -> bool:
    """A long word of mixed digits, upper- and lower-case letters with high entropy."""
    if len(value) < min_length or not _WORD.fullmatch(value):
        return False
    digits = sum(c.isdigit() for c in value)
    upper = sum(c.isupper() for c in value)
    lower = sum(c.islower() for c in value)
    if digits < 2 or upper < 2 or lower < 2:
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.5


def token_kind(value: str) -> str | None:
    """What kind of secret ``value`` (one word) looks like, or None."""
    if AWS_KEY_ID.fullmatch(value):
        return "an AWS access key id"
    for prefix in PREFIXES:
        rest = value[len(prefix) :]
        if (
            value.startswith(prefix)
            and len(rest) >= MIN_REST
            and _WORD.fullmatch(rest)
            and any(c.isdigit() or c.isupper() for c in rest)
        ):
            return f"a token ({prefix}...)"
    if len(value) >= MIN_HEX and re.fullmatch(r"[0-9a-fA-F]+", value):
        return "a hex key or token"
    if looks_random(value):
        return "a token (a long random-looking word)"
    return None


def secret_line(line: str) -> str | None:
    """What a line that holds a secret looks like (a .env, .netrc, PEM or config line), or None.
    Only for lines that are not what the reader expects: a requirement never has these shapes."""
    if _PEM.match(line):
        return "a private key or certificate (PEM)"
    if _ASSIGNMENT.match(line):
        return "a NAME=value setting (an environment or .env file?)"
    if _NETRC.search(line) and len(line.split()) >= 2:
        return "a .netrc entry (machine/login/password)"
    if _SETTING.match(line):
        return "a setting with a password or token (a config file?)"
    for word in line.split():
        kind = token_kind(word)
        if kind is not None:
            return kind
    return None
