"""Progress of long work on stderr: a live rich display on a terminal, plain lines otherwise.

Each build step (and the SIF conversion, as a step of its own) gets a line with its elapsed
time; on a terminal the current one ticks live with a spinner, and finished steps keep their
time. Logs and CI (no terminal) get one plain line per step, so nothing is lost to redrawing.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console


class StepProgress:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self._progress: Any = None
        self._task: Any = None
        self._started = time.monotonic()
        self._step_started = self._started

    def __enter__(self) -> StepProgress:
        if self.live:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(finished_text="[green]✓[/]"),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._progress.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._finish(failed=kind is not None)
        if self._progress is not None:
            self._progress.__exit__(kind, err, tb)

    def _finish(self, failed: bool = False) -> None:
        if self._progress is not None and self._task is not None:
            desc = self._progress.tasks[self._task].description
            mark = " [red](failed)[/]" if failed else ""
            self._progress.update(self._task, total=1, completed=1, description=desc + mark)
            self._progress.stop_task(self._task)
        self._task = None

    def phase(self, text: str) -> None:
        """Start a step of hpcenv's own (e.g. the SIF conversion)."""
        self._finish()
        self._step_started = time.monotonic()
        if self._progress is not None:
            self._task = self._progress.add_task(text[:100], total=None)
        else:
            self.console.print(f"  {text[:100]}", highlight=False)

    def step(self, index: int, total: int, text: str, previous: float | None) -> None:
        """A build step as the engine announced it (``StepCallback``)."""
        if self._progress is None:
            took = f"  (previous step {previous:.1f} s)" if previous is not None else ""
            self.console.print(f"  [{index}/{total}] {text[:100]}{took}", highlight=False)
            return
        self.phase(f"[{index}/{total}] {text}")

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started
