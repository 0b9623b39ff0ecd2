"""Build progress on stderr: live steps on a terminal, one plain line per step otherwise."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from hpcenv.cli.progress import StepProgress


def test_plain_lines_without_a_terminal() -> None:
    buf = io.StringIO()
    with StepProgress(Console(file=buf, force_terminal=False, width=200)) as p:
        p.note("  log: /x/build.log")
        p.step(1, 3, "FROM base", None)
        p.step(2, 3, "RUN make", 1.25)
        p.phase("SIF from oci with Apptainer")
    assert buf.getvalue().splitlines() == [
        "  log: /x/build.log",
        "  [1/3] FROM base",
        "  [2/3] RUN make  (previous step 1.2 s)",
        "  SIF from oci with Apptainer",
    ]


def test_live_steps_on_a_terminal_keep_each_step() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with StepProgress(console) as p:
        assert p.live
        p.step(1, 2, "FROM base", None)
        p.step(2, 2, "RUN make", 0.5)
        p.phase("SIF from oci with Apptainer")
        tasks = p._progress.tasks
        assert [t.description for t in tasks] == [
            "[1/2] FROM base",
            "[2/2] RUN make",
            "SIF from oci with Apptainer",
        ]
        assert [t.finished for t in tasks] == [True, True, False]
    assert "SIF from oci with Apptainer" in buf.getvalue()


def test_a_failure_marks_the_running_step() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with pytest.raises(RuntimeError), StepProgress(console) as p:
        p.step(1, 1, "RUN false", None)
        raise RuntimeError("boom")
    assert p._progress.tasks[0].description.endswith("(failed)[/]")
