"""Every name list in step with the scheduler registry, and a new scheduler is one class.

The site model may not import :mod:`hpcenv.jobs`, so its ``scheduler.kind`` values stay data
there; these tests fail when a scheduler is registered without being added to it, to
``knowledge/compat.yaml`` (the launchers that fit it), or when a caller keeps its own list.
The toy scheduler shows the generic paths (directives, log names, job ids, doctor, host
detection) take a registered class with nothing else edited.
"""

from __future__ import annotations

import re
import shutil
import typing
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from hpcenv import doctor
from hpcenv.hostdetect import RecordedHost, command, detect
from hpcenv.jobs.placement import Placement, place
from hpcenv.jobs.schedulers import (
    NO_SCHEDULER,
    SCHEDULERS,
    Pbs,
    Probe,
    Scheduler,
    get_scheduler,
    register_scheduler,
)
from hpcenv.jobs.spec import ArraySpec, JobSpec
from hpcenv.jobs.status import JobStatus
from hpcenv.jobs.submit import Submission, log_paths
from hpcenv.jobs.transport import Completed, Transport, TransportSpec
from hpcenv.knowledge import kb
from hpcenv.site import Site, load_site

HOSTS = Path(__file__).parent / "data" / "hosts"


def site_kinds() -> set[str]:
    scheduler = Site.model_fields["scheduler"].annotation
    kind = scheduler.model_fields["kind"].annotation  # type: ignore[union-attr]
    return set(typing.get_args(kind))


# -- name lists -------------------------------------------------------------------------------
def test_site_model_kinds_are_the_registry_and_none() -> None:
    assert site_kinds() == {*SCHEDULERS, NO_SCHEDULER}


def test_compat_launchers_cover_every_kind() -> None:
    table = {k: v for k, v in kb()["launchers"].items() if k != "source"}
    assert set(table) == {*SCHEDULERS, NO_SCHEDULER}
    for name, cls in SCHEDULERS.items():
        # what sites init writes is a launcher the site model accepts for that kind
        assert {launcher for launcher, _ in cls.launchers} <= set(table[name]), name


def test_doctor_checks_every_registered_scheduler_and_nothing_else(tmp_path: Path) -> None:
    host = doctor.Host(str(tmp_path))
    checked = [
        f.keywords["scheduler"]
        for f in doctor.all_checks()
        if isinstance(f, partial) and "scheduler" in f.keywords
    ]
    assert checked == list(SCHEDULERS.values())
    for cls in SCHEDULERS.values():
        c = doctor.check_scheduler(host, cls)
        assert (c.category, c.name, c.status) == ("scheduler", cls.name, "missing")
        assert c.fix == cls.probe.hint


def test_sites_init_says_which_commands_it_tried(tmp_path: Path) -> None:
    for name in ("lscpu", "meminfo"):
        shutil.copy(HOSTS / "frontier" / f"{name}.txt", tmp_path)
    d = detect(RecordedHost(tmp_path), "bare")
    assert d.data["scheduler"]["kind"] == NO_SCHEDULER
    why = d.verified["scheduler.kind"]
    assert why.startswith("no scontrol, sbatch, bqueues or qstat on ")
    for cls in SCHEDULERS.values():
        assert cls.detect[0] in why and command(cls.detect[0]) == list(cls.detect)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_every_scheduler_is_complete(name: str) -> None:
    cls = SCHEDULERS[name]
    assert not getattr(cls, "__abstractmethods__", None), name
    for attr in (
        "prefix",
        "job_id_expr",
        "task_id_expr",
        "id_pattern",
        "submit_command",
        "account_flag",
        "probe",
        "detect",
        "launchers",
    ):
        assert getattr(cls, attr, None), f"{name}.{attr}"
    assert cls().submit_argv([])[0] == cls.submit_command
    assert cls.probe.answers[-1][0] == cls.probe.command


def test_log_files_expand_each_schedulers_own_patterns() -> None:
    arr = JobSpec(name="t", array=ArraySpec(count=3))
    one = JobSpec(name="t")
    slurm, lsf, pbs = (get_scheduler(n) for n in ("slurm", "lsf", "pbs"))
    assert slurm.log_files("t", "42", slurm.log_names(one)) == ["t-42.out", "t-42.err"]
    assert slurm.log_files("t", "42", slurm.log_names(arr)) == ["t-42_*.out", "t-42_*.err"]
    assert lsf.log_files("t", "42", lsf.log_names(arr)) == ["t-42_*.out", "t-42_*.err"]
    assert pbs.log_files("t", "42.pbs01", pbs.log_names(one)) == ["t.o42", "t.e42"]


def test_register_refuses_a_taken_name() -> None:
    with pytest.raises(ValueError, match="taken"):
        register_scheduler(SCHEDULERS["slurm"])

    class NoneScheduler(Pbs):
        name = NO_SCHEDULER

    with pytest.raises(ValueError, match="taken"):
        register_scheduler(NoneScheduler)


# -- a new scheduler: one class ---------------------------------------------------------------
class Toy(Scheduler):
    name = "toy"
    prefix = "#TOY"
    job_id_expr = "${TOY_JOB_ID}"
    task_id_expr = "${TOY_TASK}"
    id_pattern = re.compile(r"^toy job (\d+)$")
    submit_command = "toysub"
    account_flag = "--charge"
    log_patterns = {"%t": "{id}"}
    probe = Probe(
        command="toysub",
        answers=(("toystat", "--ping"), ("toysub", "--version")),
        hint="load the toy environment",
        broken="toy does not answer: {line}",
        fix="start toyd",
        expect="alive",
    )
    detect = ("toystat",)
    launchers = (("mpirun", "toy sites start ranks with mpirun"),)

    def log_names(self, job: JobSpec) -> tuple[str | None, str | None]:
        return f"{job.name}-%t.out", f"{job.name}-%t.err"

    def resources(
        self, site: Site, job: JobSpec, tuning: Placement
    ) -> list[tuple[str, str | None]]:
        out, err = self.log_names(job)
        pairs: list[tuple[str, str | None]] = [
            ("--name", job.name),
            ("--nodes", str(tuning.nodes)),
            ("--out", out),
            ("--err", err),
        ]
        if job.account:
            pairs.append((self.account_flag, job.account))
        return pairs

    def submit_argv(self, after: list[str]) -> list[str]:
        return [self.submit_command, *(f"--after={i}" for i in after)]

    def status(self, transport: Transport, job_id: str) -> JobStatus:
        return JobStatus(job_id=job_id, state="GONE", phase="done", source="toystat")

    def cancel_argv(self, job_id: str) -> list[str]:
        return ["toydel", job_id]


@pytest.fixture
def toy() -> Iterator[type[Toy]]:
    register_scheduler(Toy)
    try:
        yield Toy
    finally:
        del SCHEDULERS[Toy.name]


def test_a_registered_class_works_through_the_generic_paths(toy: type[Toy], tmp_path: Path) -> None:
    sched = get_scheduler("toy")
    assert isinstance(sched, toy)
    site = load_site("generic-slurm")
    job = JobSpec(name="t", account="P1", scheduler_options=["--mail=none"])
    lines = sched.directives(site, job, place(site, 2), node_local=False)
    assert lines[:5] == [
        "#TOY --name t",
        "#TOY --nodes 2",
        "#TOY --out t-%t.out",
        "#TOY --err t-%t.err",
        "#TOY --charge P1",
    ]
    assert lines[-1] == "#TOY --mail none"
    assert sched.parse_job_id(Completed(0, "toy job 77\n", "")) == "77"
    # the record's log names become paths hpcenv reads back
    sub = Submission("77", "t", site.name, "toy", "/w", TransportSpec(), sched.log_names(job), "")
    assert log_paths(sub) == ["/w/t-77.out", "/w/t-77.err"]

    # hpcenv doctor: missing, then broken, then ok, from the probe alone
    host = doctor.Host(str(tmp_path))
    assert [
        f.keywords["scheduler"]
        for f in doctor.all_checks()
        if isinstance(f, partial) and "scheduler" in f.keywords
    ][-1] is toy
    assert doctor.check_scheduler(host, toy).status == "missing"
    for name, text in (("toysub", "toysub 1.0"), ("toystat", "toyd asleep")):
        (tmp_path / name).write_text(f"#!/bin/sh\necho {text}\n")
        (tmp_path / name).chmod(0o755)
    broken = doctor.check_scheduler(host, toy)
    assert (broken.status, broken.why, broken.fix) == (
        "broken",
        "toy does not answer: toyd asleep",
        "start toyd",
    )
    (tmp_path / "toystat").write_text("#!/bin/sh\necho toyd alive\n")
    assert doctor.check_scheduler(host, toy).status == "ok"

    # hpcenv sites init: detected from its own command
    rec = tmp_path / "rec"
    rec.mkdir()
    for name in ("lscpu", "meminfo"):
        shutil.copy(HOSTS / "frontier" / f"{name}.txt", rec)
    (rec / "toystat.txt").write_text("toyd alive\n")
    d = detect(RecordedHost(rec), "toyland")
    assert d.data["scheduler"] == {"kind": "toy", "launcher": "mpirun"}
    assert d.verified["scheduler.kind"].startswith("`toystat` on ")
