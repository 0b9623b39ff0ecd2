"""Job state as hpcenv reports it, carrying the scheduler's own words."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from hpcenv.printable import printable

Phase = Literal["pending", "running", "done", "failed", "unknown"]
TERMINAL: frozenset[str] = frozenset({"done", "failed"})


@dataclass
class JobStatus:
    """``state`` is the scheduler's word (COMPLETED, EXIT, F...); ``phase`` is hpcenv's."""

    job_id: str
    state: str
    phase: Phase
    exit_code: str | None = None
    reason: str | None = None
    blocked: bool = False
    stdout: str | None = None
    stderr: str | None = None
    source: str = ""
    tasks: list[JobStatus] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL

    def message(self) -> str:
        """One line: ``job 12: FAILED exit=3:0 reason=NonZeroExitCode (scontrol)``."""
        parts = [f"job {self.job_id}: {self.state}"]
        if self.finished and self.exit_code not in (None, ""):
            parts.append(f"exit={self.exit_code}")
        if self.reason and self.reason not in ("None", "(null)"):
            parts.append(f"reason={self.reason}")
        failed = [t for t in self.tasks if t.phase == "failed"]
        if failed:
            parts.append("failed tasks: " + "; ".join(t.message() for t in failed[:5]))
        line = " ".join(parts) + (f" ({self.source})" if self.source else "")
        return printable(line)  # the scheduler's words: no terminal escapes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def aggregate(job_id: str, tasks: list[JobStatus], source: str) -> JobStatus:
    """One status for an array: failed if any task failed, done when all are done."""
    if len(tasks) == 1 and tasks[0].job_id == job_id:
        return tasks[0]
    phases = {t.phase for t in tasks}
    if "failed" in phases and not phases & {"pending", "running"}:
        phase: Phase = "failed"
    elif phases & {"pending", "running"}:
        phase = "running" if "running" in phases else "pending"
    elif phases == {"done"}:
        phase = "done"
    else:
        phase = "unknown"
    states = sorted({t.state for t in tasks})
    return JobStatus(
        job_id=job_id,
        state="+".join(states),
        phase=phase,
        reason=next((t.reason for t in tasks if t.phase == "failed"), None),
        blocked=all(t.blocked for t in tasks if t.phase == "pending")
        and any(t.blocked for t in tasks),
        source=source,
        tasks=tasks,
    )
