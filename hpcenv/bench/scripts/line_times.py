"""Run a script unchanged with every line it prints on stdout stamped with the wall time.

``python3 line_times.py SCRIPT ARGS...`` runs SCRIPT as ``python3 SCRIPT ARGS...`` would (as
``__main__``, with its own ``sys.argv`` and its folder first on ``sys.path``); each complete line
it writes to ``sys.stdout`` comes out as ``<unix seconds> <line>``, flushed at once. The bench's
training section (hpcenv/bench/training.py) reads its samples/s from the times of the lines a
third-party trainer prints, which carry no time of their own. Needs nothing but the standard
library; runs under any launcher (mpirun, torchrun, srun), since it is the rank's program.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from typing import Any, TextIO


class Stamped:
    """A text stream that prefixes each complete line with ``time.time()``."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.raw.write(f"{time.time():.6f} {line}\n")
        if lines:
            self.raw.flush()
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def close_line(self) -> None:
        """Write what is left of an unfinished last line."""
        if self.pending:
            self.write("\n")

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, ...
        return getattr(self.raw, name)


def main() -> None:
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(script)
    stamped = Stamped(sys.stdout)
    sys.stdout = stamped
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        stamped.close_line()
        stamped.flush()


if __name__ == "__main__":
    main()
