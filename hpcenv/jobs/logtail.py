"""A job's log files, read in pieces: ``hpcenv logs --follow`` and ``hpcenv logs --json``.

The files live where the job was submitted (this machine, or a login node over SSH), so they
are read through the job's transport by a shipped host step (``templates/jobs/log_chunks.sh``):
one call returns, for each file, its size and at most :data:`CHUNK` bytes from where the
follower stopped, base64-encoded so that every byte the job wrote comes back exactly. Memory
stays bounded by the chunk size per file however long the job writes; a file that shrank
(rotated, truncated) is read again from its start.

:func:`follow_logs` reads until the job has ended (its state from the scheduler; the job's end
marker cuts a wait short, :mod:`hpcenv.jobs.ended`), then reads what the last moments wrote.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpcenv.errors import JobError

if TYPE_CHECKING:
    from hpcenv.jobs.status import JobStatus
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import Transport

CHUNKS_SCRIPT = "log_chunks.sh"
CHUNK = 256 * 1024  # bytes per file per read: what a follower holds at once
POLL = 2.0  # seconds between reads while the job runs (an end marker cuts it short)


@dataclass(frozen=True)
class Chunk:
    """Bytes ``offset``..``offset+len(data)`` of ``path``, which had ``size`` bytes."""

    path: str
    size: int
    offset: int
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + len(self.data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the text decoded as UTF-8 (an invalid byte as U+FFFD)."""
        return {"path": self.path, "size": self.size, "text": self.data.decode("utf-8", "replace")}


def parse_chunks(stdout: str) -> list[Chunk]:
    """``log_chunks.sh``'s lines; a line of another shape is a :class:`JobError`."""
    out = []
    for line in stdout.splitlines():
        parts = line.split("\t")
        try:
            path, size, offset, data = parts
            out.append(Chunk(path, int(size), int(offset), base64.b64decode(data, validate=True)))
        except (ValueError, binascii.Error):
            raise JobError(f"unexpected answer from the log reader: {line[:80]!r}") from None
    return out


def read_chunks(
    transport: Transport, patterns: list[str], offsets: dict[str, int], cap: int = CHUNK
) -> list[Chunk]:
    """Each file the patterns name, from its offset (0 when new), at most ``cap`` bytes (0:
    to its end)."""
    from hpcenv.jobs.submit import _only_star, run_host_script

    args = [str(cap), str(len(patterns)), *(_only_star(p) for p in patterns)]
    for path, offset in offsets.items():
        args += [path, str(offset)]
    result = run_host_script(transport, CHUNKS_SCRIPT, args)
    if result.returncode != 0:
        raise JobError(f"cannot read logs: {result.message()}")
    return parse_chunks(result.stdout)


JSON_MAX = 16 * 1024 * 1024  # bytes of each file in ``logs --json`` (its size says the rest)


def read_all(sub: Submission, transport: Transport) -> list[Chunk]:
    """Every log file of the job (``logs --json``), its first :data:`JSON_MAX` bytes: a JSON
    document is held whole in memory, and each file's ``size`` tells a reader what was left
    out; none there is a :class:`JobError` naming where hpcenv looked, as ``logs`` says."""
    from hpcenv.jobs.submit import log_paths, status

    try:
        st: JobStatus | None = status(sub, transport, "logs")
    except JobError:
        if not sub.workdir:
            raise
        st = None
    paths = log_paths(sub, st)
    if not paths:
        raise JobError(f"no log files known for job {sub.job_id}")
    chunks = read_chunks(transport, paths, {}, cap=JSON_MAX)
    if not chunks:
        raise JobError(
            f"no log file of job {sub.job_id} is there (not written yet, or removed): "
            + ", ".join(paths)
        )
    return chunks


Write = Callable[[str, bytes], None]


def follow_logs(
    sub: Submission,
    transport: Transport,
    write: Write,
    *,
    poll: float = POLL,
    cap: int = CHUNK,
    ended: Callable[[], bool] | None = None,
) -> JobStatus:
    """Give ``write`` each new piece of the job's log files, in order per file, until the
    job has ended and its files are read to their end; the job's final status."""
    from hpcenv.jobs.submit import _nap, log_paths, status

    offsets: dict[str, int] = {}
    while True:
        st = status(sub, transport, "logs")
        finished = st.finished
        _drain(transport, log_paths(sub, st), offsets, write, cap)
        if finished:
            return st
        _nap(poll, ended)


def _drain(
    transport: Transport, paths: list[str], offsets: dict[str, int], write: Write, cap: int
) -> None:
    """Read every file to the end it had when asked, ``cap`` bytes at a time."""
    if not paths:
        return
    while True:
        behind = False
        for chunk in read_chunks(transport, paths, offsets, cap):
            if chunk.data or chunk.path not in offsets:  # an empty file: once, for its header
                write(chunk.path, chunk.data)
            offsets[chunk.path] = chunk.end
            behind = behind or chunk.end < chunk.size
        if not behind:
            return


def printer(out: Callable[[str], object]) -> Write:
    """A ``write`` for a terminal: a ``==> path <==`` header when the file changes (as
    ``tail -f``), bytes decoded as UTF-8 across pieces (an invalid byte shown as U+FFFD) and
    control characters shown as escapes (:func:`hpcenv.printable.printable`), newlines kept."""
    import codecs

    from hpcenv.printable import printable

    decoders: dict[str, codecs.IncrementalDecoder] = {}
    last: list[str] = []

    def write(path: str, data: bytes) -> None:
        dec = decoders.setdefault(path, codecs.getincrementaldecoder("utf-8")("replace"))
        text = dec.decode(data)
        if data and not text:  # part of a character: the rest comes with the next piece
            return
        if last != [path]:  # a file's header, an empty file's too (as logs always showed)
            gap = "\n" if last else ""
            out(f"{gap}==> {printable(path)} <==\n")
            last[:] = [path]
        if text:
            out(printable(text, lines=True))

    return write


WHOLE_CHUNK = 2 << 20  # bytes per file per read for plain ``logs``: fewer round trips, bounded


def print_logs(sub: Submission, transport: Transport, write: Write, cap: int = WHOLE_CHUNK) -> None:
    """Plain ``logs``: every log file of the job from its start to the end it has now, given to
    ``write`` ``cap`` bytes at a time (a 300 MB log was read whole: 964 MB resident); none there
    is a :class:`JobError` naming where hpcenv looked, as :func:`read_all` says."""
    from hpcenv.jobs.submit import log_paths, status

    try:
        st: JobStatus | None = status(sub, transport, "logs")
    except JobError:
        if not sub.workdir:
            raise
        st = None
    paths = log_paths(sub, st)
    if not paths:
        raise JobError(f"no log files known for job {sub.job_id}")
    offsets: dict[str, int] = {}
    _drain(transport, paths, offsets, write, cap)
    if not offsets:
        raise JobError(
            f"no log file of job {sub.job_id} is there (not written yet, or removed): "
            + ", ".join(paths)
        )


def print_job_logs(
    job_id: str, write: Write, site: str | None = None, on: str | None = None
) -> None:
    """``logs``: the job's files, found as ``logs --json`` finds them, streamed to ``write``
    (:func:`printer` shows escapes)."""
    from hpcenv.jobs.service import find_job

    sub, t = find_job(job_id, site, on)
    try:
        print_logs(sub, t, write)
    finally:
        t.close()


def job_chunks(job_id: str, site: str | None = None, on: str | None = None) -> list[Chunk]:
    """``logs --json``: the job's files, found as ``logs`` finds them."""
    from hpcenv.jobs.service import find_job

    sub, t = find_job(job_id, site, on)
    try:
        return read_all(sub, t)
    finally:
        t.close()


def follow_job(
    job_id: str, write: Write, site: str | None = None, on: str | None = None
) -> JobStatus:
    """``logs --follow``: the job's files as they grow, until it has ended; Ctrl-C stops
    following and leaves the job as it is (:class:`hpcenv.jobs.service.WaitInterrupted`)."""
    from hpcenv.jobs.ended import end_signal
    from hpcenv.jobs.service import WaitInterrupted, find_job

    sub, t = find_job(job_id, site, on)
    try:
        return follow_logs(sub, t, write, ended=end_signal(sub))
    except KeyboardInterrupt:
        raise WaitInterrupted(
            f"stopped following job {sub.job_id}; the job was left as it is (hpcenv logs "
            f"{sub.job_id} --follow follows it again, hpcenv cancel {sub.job_id} cancels it)"
        ) from None
    finally:
        t.close()
