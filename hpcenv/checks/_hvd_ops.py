"""Which operations Horovod really ran, from its own timeline.

Horovod names each collective it performs in the timeline after the library that ran it
(``CCL_ALLREDUCE``, ``MPI_ALLREDUCE``, ``GLOO_ALLREDUCE``, ...; ``horovod/common/common.h``).
``hvd.ccl_built()`` only says CCL was compiled in; the timeline says it was used. Recording is
switched on only around the calls of interest (``HOROVOD_TIMELINE=DYNAMIC``), so timed loops
run without it. Rank 0 writes the file; it is complete after ``hvd.shutdown()``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

OP_NAME = re.compile(r'"((?:CCL|MPI|GLOO|NCCL)_[A-Z]+)"')


def enable_dynamic_timeline() -> None:
    """Call before ``hvd.init()``: lets :class:`OpsProbe` start and stop a timeline."""
    os.environ.setdefault("HOROVOD_TIMELINE", "DYNAMIC")


class OpsProbe:
    """Records the timeline to ``path`` between :meth:`start` and :meth:`stop`."""

    def __init__(self, hvd: Any, path: str) -> None:
        self.hvd = hvd
        self.path = path

    def start(self) -> None:
        self.hvd.start_timeline(self.path, mark_cycles=False)

    def stop(self) -> None:
        self.hvd.stop_timeline()

    def seen(self) -> list[str]:
        """Operation names in the timeline (rank 0, after ``hvd.shutdown()``)."""
        text = Path(self.path).read_text(encoding="utf-8", errors="replace")
        return sorted(set(OP_NAME.findall(text)))
