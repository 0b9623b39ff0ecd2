"""A job's end as its own script marks it, so that ``--wait`` learns of it at once.

The batch script writes its exit status to ``$HPCENV_STEPS/ended`` as it exits (an EXIT trap,
templates/jobs/job.sh.j2; a stale one from before a requeue is removed first). Waiting on the
submit host with the scheduler alone, ``submit --wait`` backs off to one query every 30 s (kind
to the scheduler), so it learned of a job's end up to half its run time late: a minGPT job of
the rehearsal that ended after 50 s was reported at 75 s. Looking for a file in the job's own
folder costs the scheduler nothing; when it appears, the wait asks the scheduler again at once
and takes its word for the final state (the marker only says when to ask).

Only where the job's folder is this host's (the ``local`` transport, which runs the scheduler's
commands here, on a file system the batch nodes share) and the job is one task: an array's tasks
each have their own id, hence their own folder. A job killed outright (SIGKILL at its time
limit) writes nothing, and the wait goes on asking the scheduler as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcenv.jobs.submit import Submission

ENDED_FILE = "ended"
"""In the job's steps folder ``WORKDIR/.hpcenv/JOB_ID`` (hpcenv.jobs.plan, ``paths.steps``)."""


def marker_path(sub: Submission) -> Path | None:
    """Where ``sub``'s script marks its end, when this host can see it; else None."""
    workdir = sub.workdir
    if sub.transport.kind != "local" or sub.array is not None:
        return None
    if not workdir.startswith("/") or "$" in workdir or "\n" in workdir:
        return None  # not a path of this host as it stands (a variable the login node expands)
    job_id = sub.job_id
    if not job_id or job_id in (".", "..") or "/" in job_id or "\0" in job_id:
        return None
    return Path(workdir) / ".hpcenv" / job_id / ENDED_FILE


class EndSignal:
    """True once each time a marker other than the last one seen appears, else False (a marker
    already there when the wait starts is an earlier run's, before a requeue, and does not
    count; a look that fails, as a stat on NFS may for a moment, changes nothing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def __call__(self) -> bool:
        now = self._stamp()
        if now is None or now == self._last:
            return False
        self._last = now
        return True


def end_signal(sub: Submission) -> EndSignal | None:
    """The signal for ``sub`` (:func:`marker_path`), or None where there is none to watch."""
    path = marker_path(sub)
    return None if path is None else EndSignal(path)
