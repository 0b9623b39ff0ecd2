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


def _escaped(c: int) -> str:
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


# Each control character replaced by its escape with str.replace, only those the text has:
# C speed, so a log of 300 MB with escapes on every line is shown in seconds (a callback per
# match, or str.translate with a mapping, took a minute).
_LINES_TABLE = {
    chr(c): _escaped(c)
    for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
}
_TABLE = {**_LINES_TABLE, "\t": _escaped(0x09), "\n": _escaped(0x0A)}


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with control characters escaped; newlines and tabs too unless ``lines``."""
    if _CONTROL.search(text) is None and (lines or _NEWLINE.search(text) is None):
        return text
    for char, escape in (_LINES_TABLE if lines else _TABLE).items():
        if char in text:
            text = text.replace(char, escape)
    return text
