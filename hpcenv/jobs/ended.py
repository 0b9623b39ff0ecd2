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

A marker counts only when it is a regular file of this user's in a folder of this user's that
nobody else may write (issue 40: the workdir may be a project's, group-writable): one another
user wrote, or put there, is ignored with one warning, so it cannot make a wait ask the
scheduler over and over. The job makes that folder itself (mkdir, 0700, templates/jobs/job.sh.j2);
where another user's folder stood in the way, the job's steps went elsewhere and the wait goes
by the scheduler alone.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
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


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def marker_problem(path: Path, info: os.stat_result) -> str | None:
    """Why the marker at ``path`` (``lstat`` ``info``) was not written by this user's job, or
    None: a regular file of this user's, in a folder of this user's nobody else may write."""
    from hpcenv.reads import owner_name

    me = os.geteuid()
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != me:
        return f"it belongs to {owner_name(info.st_uid)}, not to you"
    try:
        folder = os.lstat(path.parent)
    except OSError as err:
        return f"its folder cannot be read ({err.strerror or err})"
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != me:
        return f"its folder belongs to {owner_name(folder.st_uid)}, not to you"
    if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write its folder (mode {stat.S_IMODE(folder.st_mode):04o})"
    return None


class EndSignal:
    """True once each time a marker other than the last one seen appears, else False (a marker
    already there when the wait starts is an earlier run's, before a requeue, and does not
    count; a look that fails, as a stat on NFS may for a moment, changes nothing)."""

    def __init__(self, path: Path, warn: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.warn = warn if warn is not None else _to_stderr
        self._warned = False
        self._last = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.lstat(self.path)
        except OSError:
            return None
        problem = marker_problem(self.path, st)
        if problem is not None:
            if not self._warned:
                self._warned = True
                self.warn(f"warning: ignoring the end marker {self.path}: {problem}")
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
