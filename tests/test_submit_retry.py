"""Submission over a connection that drops: retried only where it cannot submit twice.

Unit level: the transport is real bash, the scheduler's ``sbatch``/``squeue`` are small stand-ins
on PATH that keep their jobs in a file (the real Slurm + sshd version is in test_jobs_ssh.py).
The shipped submit script (templates/jobs/submit.sh) takes a lock in the workdir, looks for a
job carrying the submit token and only then calls ``sbatch --parsable --comment=TOKEN``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.submit import submit
from hpcenv.jobs.transport import Completed, LocalTransport, Transport, TransportError
from hpcenv.site import Site, load_site

SBATCH = """#!/bin/bash
cat >/dev/null
comment=""
for a in "$@"; do case $a in --comment=*) comment=${a#--comment=} ;; esac; done
n=$(( $(wc -l <"$JOBS") + 100 ))
echo "$n $comment" >>"$JOBS"
echo "$n"
"""
SQUEUE = """#!/bin/bash
cat "$JOBS"
"""


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", SBATCH), ("squeue", SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("JOBS", str(jobs))
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    return jobs


class Flaky(Transport):
    """Loses the connection on the first ``drops`` calls: ``after`` the command ran remotely
    (the reply is lost), or before it was sent."""

    def __init__(self, drops: int, after: bool) -> None:
        self.inner = LocalTransport()
        self.spec = self.inner.spec
        self.drops, self.after, self.calls = drops, after, 0

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        self.calls += 1
        if self.calls <= self.drops:
            if self.after:
                self.inner.run(command, stdin, timeout)
            raise TransportError("ssh to login failed: connection reset by peer")
        return self.inner.run(command, stdin, timeout)

    def close(self) -> None:
        return None


def _job(tmp_path: Path) -> JobSpec:
    return JobSpec(
        name="r", command=["true"], launch="single", cores_per_rank=1, workdir=str(tmp_path / "wd")
    )


@pytest.mark.parametrize("after", [True, False], ids=["reply-lost", "never-sent"])
def test_a_lost_connection_submits_exactly_once(
    fake_slurm: Path, tmp_path: Path, local_site: Site, after: bool
) -> None:
    t = Flaky(drops=2, after=after)
    sub = submit(local_site, _job(tmp_path), t, retry_wait=0)
    jobs = fake_slurm.read_text().splitlines()
    assert len(jobs) == 1, jobs
    job_id, comment = jobs[0].split()
    assert sub.job_id == job_id and comment.startswith("hpcenv-") and t.calls == 3
    assert list((tmp_path / "wd" / ".hpcenv").iterdir()) == []  # the lock file is removed


def test_gives_up_with_the_token_to_look_for(
    fake_slurm: Path, tmp_path: Path, local_site: Site
) -> None:
    t = Flaky(drops=5, after=True)
    with pytest.raises(TransportError, match=r"after 3 attempt\(s\).*comment hpcenv-"):
        submit(local_site, _job(tmp_path), t, retry_wait=0)
    assert len(fake_slurm.read_text().splitlines()) == 1  # three tries, one job


def test_schedulers_without_a_token_are_not_retried(tmp_path: Path) -> None:
    """LSF and PBS keep no token hpcenv can query: one attempt, and the error says the job
    may exist."""
    site = load_site("aurora")  # PBS Pro
    t = Flaky(drops=1, after=False)
    with pytest.raises(TransportError, match="may have been submitted"):
        submit(site, _job(tmp_path).model_copy(update={"account": "datascience"}), t, retry_wait=0)
    assert t.calls == 1
