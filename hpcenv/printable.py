"""Text from outside (scheduler output, tuning files, job records) made safe for a terminal.

A scheduler's reason, a tuning file's note or a record's field is someone else's text: printed
raw, an ESC sequence in it could retitle the terminal, hide the rest of the line or fake output.
:func:`printable` is the one place that turns control characters (C0, DEL, C1 and the Unicode
line separators, as :data:`hpcenv.safe.CONTROL`) into visible ``\\xNN`` escapes. It has no
dependencies so the lightest modules (job status) can use it.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_NEWLINE = re.compile(r"[\t\n]")


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with control characters escaped; newlines and tabs too unless ``lines``."""
    text = _CONTROL.sub(_escape, text)
    return text if lines else _NEWLINE.sub(_escape, text)
