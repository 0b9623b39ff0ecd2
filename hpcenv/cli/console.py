"""The one Rich console for hpcenv's tables: the terminal's width on a terminal; piped or
redirected, as wide as the content (Rich would cut every table to 80 columns, with '…', and a
``hpcenv sites list | grep`` would miss what was cut). ``COLUMNS`` still wins where set."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

UNCUT = 100_000  # tables do not expand: they are as wide as their widest row


def console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=UNCUT)
