"""submit --wait: the poll interval backs off to 30 s and each state change is reported once."""

from __future__ import annotations

import importlib

import pytest

from hpcenv.jobs.status import JobStatus

submit_mod = importlib.import_module("hpcenv.jobs.submit")


def test_backoff_to_the_cap_and_state_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    states = [("PENDING", "pending", "Priority")] * 3 + [("RUNNING", "running", None)] * 12
    states += [("COMPLETED", "done", None)]
    seq = iter(JobStatus(job_id="7", state=s, phase=p, reason=r) for s, p, r in states)  # type: ignore[arg-type]
    monkeypatch.setattr(submit_mod, "status", lambda sub, transport: next(seq))
    slept: list[float] = []
    clock = [0.0]

    def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(submit_mod.time, "sleep", fake_sleep)
    monkeypatch.setattr(submit_mod.time, "monotonic", lambda: clock[0])
    seen: list[str] = []
    st = submit_mod.wait(
        object(),
        object(),
        timeout=10_000,
        poll=1.0,
        max_poll=30.0,  # type: ignore[arg-type]
        blocked_after=None,
        on_change=lambda s: seen.append(s.state),
    )
    assert st.state == "COMPLETED"
    assert seen == ["PENDING", "RUNNING", "COMPLETED"]
    assert slept[:4] == [1.0, 1.5, 2.25, 3.375]
    assert max(slept) == 30.0 and slept[-1] == 30.0
    assert all(b >= a for a, b in zip(slept, slept[1:], strict=False))


def test_without_a_cap_the_interval_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    seq = iter(
        [JobStatus(job_id="1", state="RUNNING", phase="running")] * 4
        + [JobStatus(job_id="1", state="COMPLETED", phase="done")]
    )
    monkeypatch.setattr(submit_mod, "status", lambda sub, transport: next(seq))
    slept: list[float] = []
    monkeypatch.setattr(submit_mod.time, "sleep", slept.append)
    submit_mod.wait(object(), object(), timeout=600, poll=0.25)  # type: ignore[arg-type]
    assert slept == [0.25] * 4
