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
    monkeypatch.setattr(submit_mod, "status", lambda sub, transport, verb="": next(seq))
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
    monkeypatch.setattr(submit_mod, "status", lambda sub, transport, verb="": next(seq))
    slept: list[float] = []
    monkeypatch.setattr(submit_mod.time, "sleep", slept.append)
    submit_mod.wait(object(), object(), timeout=600, poll=0.25)  # type: ignore[arg-type]
    assert slept == [0.25] * 4


def _clocked(monkeypatch: pytest.MonkeyPatch, statuses: list[JobStatus]) -> list[float]:
    seq = iter(statuses)
    monkeypatch.setattr(submit_mod, "status", lambda sub, transport, verb="": next(seq))
    clock = [0.0]
    slept: list[float] = []

    def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(submit_mod.time, "sleep", fake_sleep)
    monkeypatch.setattr(submit_mod.time, "monotonic", lambda: clock[0])
    return slept


def _over_ssh():
    """A job submitted over SSH: no end marker this host could see, the scheduler alone."""
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import TransportSpec

    spec = TransportSpec(kind="ssh", host="login")
    return Submission("9", "t", "s", "slurm", "/w", spec, (None, None), "")


def test_follow_keeps_waiting_on_a_blocked_reason_with_no_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A day queued behind a maintenance reservation (ReqNodeNotAvail: blocked), then it runs:
    ``submit --wait`` / ``status --wait`` neither give up on the reason nor after 600 s."""
    from hpcenv.jobs.service import follow

    blocked = JobStatus(
        job_id="9", state="PENDING", phase="pending", reason="ReqNodeNotAvail", blocked=True
    )
    slept = _clocked(
        monkeypatch,
        [blocked] * 3000 + [JobStatus(job_id="9", state="COMPLETED", phase="done")],
    )
    seen: list[JobStatus] = []
    st = follow(_over_ssh(), object(), None, seen.append)  # type: ignore[arg-type]
    assert st.state == "COMPLETED" and sum(slept) > 86_400
    assert [s.state for s in seen] == ["PENDING", "COMPLETED"] and seen[0].blocked


def test_follow_ctrl_c_leaves_the_job_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcenv.jobs.service import WaitInterrupted, follow
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import TransportSpec

    def interrupted(sub: object, transport: object, verb: str = "") -> JobStatus:
        raise KeyboardInterrupt

    monkeypatch.setattr(submit_mod, "status", interrupted)
    sub = Submission("12", "t", "local", "slurm", "/w", TransportSpec(), (None, None), "")
    with pytest.raises(WaitInterrupted) as err:
        follow(sub, object(), None)  # type: ignore[arg-type]
    assert err.value.exit_code == 130
    assert str(err.value) == (
        "stopped waiting for job 12; the job was left as it is (hpcenv status 12 --wait "
        "follows it again, hpcenv cancel 12 cancels it)"
    )


def test_an_optional_timeout_still_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcenv.errors import JobError
    from hpcenv.jobs.service import follow

    _clocked(monkeypatch, [JobStatus(job_id="3", state="RUNNING", phase="running")] * 100)
    with pytest.raises(JobError, match=r"^timed out after 60 s waiting \(the job was left"):
        follow(_over_ssh(), object(), 60)  # type: ignore[arg-type]


def _running_until(clock: list[float], end: float):
    """The scheduler's word: RUNNING until ``end`` on the fake clock, then COMPLETED."""

    def status(sub: object, transport: object, verb: str = "") -> JobStatus:
        if clock[0] < end:
            return JobStatus(job_id="5", state="RUNNING", phase="running")
        return JobStatus(job_id="5", state="COMPLETED", phase="done")

    return status


@pytest.mark.parametrize("marked", [False, True])
def test_the_end_marker_cuts_the_backoff_short(
    monkeypatch: pytest.MonkeyPatch, marked: bool
) -> None:
    """A job whose script ends at 21 s (the scheduler says COMPLETED from 21.5 s): the backoff
    alone asks at 20.8 s, then at 32.2 s; with the script's end marker seen at 21 s the wait
    asks at once and again a second later, and returns by 22.5 s."""
    clock = [0.0]
    monkeypatch.setattr(submit_mod, "status", _running_until(clock, 21.5))

    def fake_sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(submit_mod.time, "sleep", fake_sleep)
    monkeypatch.setattr(submit_mod.time, "monotonic", lambda: clock[0])
    looks: list[float] = []

    def ended() -> bool:
        looks.append(clock[0])
        return clock[0] >= 21.0 and len([t for t in looks if t >= 21.0]) == 1

    st = submit_mod.wait(
        object(),  # type: ignore[arg-type]
        object(),  # type: ignore[arg-type]
        timeout=None,
        poll=1.0,
        max_poll=30.0,
        blocked_after=None,
        ended=ended if marked else None,
    )
    assert st.state == "COMPLETED"
    if marked:
        assert 21.5 <= clock[0] <= 22.5, clock[0]
        assert all(
            b - a <= submit_mod.END_LOOK + 1e-9 for a, b in zip(looks, looks[1:], strict=False)
        )
    else:
        assert clock[0] >= 32.0, clock[0]


def test_an_end_signal_fires_once_per_new_marker(tmp_path) -> None:
    """A marker left from before (a requeued run's) does not count; a new one counts once; the
    script writing it again (the next run) counts again."""
    import os

    from hpcenv.jobs.ended import EndSignal

    path = tmp_path / "ended"
    path.write_text("0\n")
    signal = EndSignal(path)
    assert signal() is False  # already there when the wait began
    path.unlink()
    assert signal() is False
    path.write_text("3\n")
    assert signal() is True and signal() is False
    path.write_text("0\n")
    os.utime(path, ns=(1, 1))
    assert signal() is True


def test_the_marker_is_watched_only_where_this_host_sees_it() -> None:
    from hpcenv.jobs.ended import marker_path
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import TransportSpec

    def sub(workdir: str = "/scratch/u/w", job_id: str = "42", **kw: object) -> Submission:
        base: dict[str, object] = {
            "job_id": job_id,
            "name": "t",
            "site": "local",
            "scheduler": "slurm",
            "workdir": workdir,
            "transport": TransportSpec(),
            "log_names": (None, None),
            "script_path": "/x.sh",
        }
        return Submission(**(base | kw))  # type: ignore[arg-type]

    from pathlib import Path

    assert marker_path(sub()) == Path("/scratch/u/w/.hpcenv/42/ended")
    assert marker_path(sub(transport=TransportSpec(kind="ssh", host="login"))) is None
    assert marker_path(sub(array=4)) is None  # each task has its own id and folder
    assert marker_path(sub(workdir="$SCRATCH/w")) is None  # the login node expands it
    assert marker_path(sub(workdir="w")) is None
    for bad in ("..", "1/../../x", ""):
        assert marker_path(sub(job_id=bad)) is None


def test_follow_watches_the_marker_of_a_local_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """``follow`` (submit --wait, status --wait) hands ``wait`` the job's own end marker for a
    one-task job submitted from this host, and none for one over SSH."""
    from hpcenv.jobs.ended import EndSignal
    from hpcenv.jobs.service import follow
    from hpcenv.jobs.submit import Submission
    from hpcenv.jobs.transport import TransportSpec

    given: list[object] = []

    def fake_wait(sub: object, transport: object, **kw: object) -> JobStatus:
        given.append(kw["ended"])
        return JobStatus(job_id="7", state="COMPLETED", phase="done")

    monkeypatch.setattr(submit_mod, "wait", fake_wait)
    local = Submission("7", "t", "local", "slurm", str(tmp_path), TransportSpec(), (None, None), "")
    follow(local, object(), None)  # type: ignore[arg-type]
    follow(_over_ssh(), object(), None)  # type: ignore[arg-type]
    assert isinstance(given[0], EndSignal) and given[0].path == tmp_path / ".hpcenv/7/ended"
    assert given[1] is None
