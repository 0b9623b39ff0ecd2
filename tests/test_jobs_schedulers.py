"""Scheduler backends with a faked command boundary: strict job-id parsing, state parsing from
the schedulers' real output formats, dependencies, cancel. (The real Slurm path is covered in
test_jobs_slurm.py; LSF and PBS have no server here.)"""

from __future__ import annotations

import json

import pytest

from hpcenv.errors import ConfigError, JobError
from hpcenv.jobs.schedulers import (
    Lsf,
    Pbs,
    Slurm,
    _lsf_walltime,
    _pbs_walltime,
    directive_pairs,
    get_scheduler,
    parse_slurm_record,
)
from hpcenv.jobs.transport import Completed, Transport, TransportSpec

SCONTROL_FAILED = (
    "JobId=19 JobName=boom UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901741 "
    "Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=00:20:00 "
    "Partition=debug AllocNode:Sid=localhost:15598 NodeList=vm BatchHost=vm NumNodes=1 "
    "Command=(null) WorkDir=/tmp/jobs-test StdErr=/tmp/jobs-test/boom-19.err StdIn=/dev/null "
    "StdOut=/tmp/jobs-test/boom-19.out Power= "
)
JOBCOMP = (
    "JobId=25 UserId=root(0) GroupId=root(0) Name=proto JobState=COMPLETED Partition=debug "
    "TimeLimit=20 StartTime=2026-11-20T23:57:01 EndTime=2026-11-20T23:57:07 NodeList=vm NodeCnt=1 "
    "ProcCnt=2 WorkDir=/tmp/jobs-test ReservationName= Tres=cpu=2,mem=22899M,node=1,billing=2 "
    "Account= QOS= WcKey= Cluster=unknown DerivedExitCode=0:0 ExitCode=0:0 "
)


class FakeTransport(Transport):
    """Answers commands from a table; records what was run."""

    def __init__(self, answers: dict[str, Completed]) -> None:
        self.spec = TransportSpec()
        self.answers = answers
        self.ran: list[str] = []

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        self.ran.append(command)
        for prefix, answer in self.answers.items():
            if command.startswith(prefix):
                return answer
        return Completed(127, "", f"{command.split()[0]}: command not found")

    def close(self) -> None:
        return None


def ok(out: str) -> Completed:
    return Completed(0, out, "")


def test_job_id_parsing_is_strict() -> None:
    assert Slurm().parse_job_id(ok("1234\n")) == "1234"
    assert Slurm().parse_job_id(ok("1234;cluster\n")) == "1234"
    assert Lsf().parse_job_id(ok("Job <5678> is submitted to queue <batch>.\n")) == "5678"
    assert Pbs().parse_job_id(ok("9012.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov\n")) == (
        "9012.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"
    )
    assert Pbs().parse_job_id(ok("9013[].pbs01\n")) == "9013[].pbs01"
    with pytest.raises(JobError, match="slurm rejected the job: sbatch: error: Batch job"):
        Slurm().parse_job_id(
            Completed(
                1,
                "",
                "sbatch: error: Batch job submission failed: "
                "Invalid account or account/partition combination",
            )
        )
    with pytest.raises(JobError, match="lsf rejected the job: .*Request aborted by esub"):
        Lsf().parse_job_id(Completed(0, "Request aborted by esub. Job not submitted.\n", ""))
    with pytest.raises(JobError, match="submitted fine"):
        Slurm().parse_job_id(ok("submitted fine, id follows later\n"))


def test_slurm_record_parsing_keeps_spaces_and_paths() -> None:
    rec = parse_slurm_record(
        "JobId=7 Reason=Nodes required for job are DOWN, DRAINED Dependency=(null)"
    )
    assert rec["Reason"] == "Nodes required for job are DOWN, DRAINED"
    assert parse_slurm_record(SCONTROL_FAILED)["StdErr"] == "/tmp/jobs-test/boom-19.err"


def test_slurm_status_failed_and_jobcomp_fallback() -> None:
    t = FakeTransport({"scontrol show job -o 19": ok(SCONTROL_FAILED + "\n")})
    st = Slurm().status(t, "19")
    assert (st.state, st.phase, st.exit_code, st.reason) == (
        "FAILED",
        "failed",
        "3:0",
        "NonZeroExitCode",
    )
    assert st.message() == "job 19: FAILED exit=3:0 reason=NonZeroExitCode (scontrol)"
    assert st.stderr == "/tmp/jobs-test/boom-19.err"

    purged = FakeTransport(
        {
            "scontrol show job -o 25": Completed(
                1, "", "slurm_load_jobs error: Invalid job id specified"
            ),
            "scontrol show config": ok("JobCompLoc              = /var/tmp/s/jobcomp.txt\n"),
            "grep -E": ok(JOBCOMP + "\n"),
        }
    )
    st = Slurm().status(purged, "25")
    assert (st.state, st.phase, st.source) == ("COMPLETED", "done", "jobcomp")
    assert "grep -E '^JobId=25 ' /var/tmp/s/jobcomp.txt" in purged.ran


def test_slurm_array_aggregates_tasks() -> None:
    lines = "\n".join(
        f"JobId={10 + i} ArrayJobId=10 ArrayTaskId={i} JobState={s} Reason=None ExitCode={e}"
        for i, (s, e) in enumerate([("COMPLETED", "0:0"), ("FAILED", "2:0"), ("COMPLETED", "0:0")])
    )
    st = Slurm().status(FakeTransport({"scontrol": ok(lines)}), "10")
    assert st.phase == "failed" and len(st.tasks) == 3
    assert "failed tasks: job 10_1: FAILED exit=2:0" in st.message()


def test_slurm_blocked_reasons() -> None:
    line = "JobId=30 JobState=PENDING Reason=ReqNodeNotAvail,_UnavailableNodes:vm ExitCode=0:0"
    st = Slurm().status(FakeTransport({"scontrol": ok(line)}), "30")
    assert st.phase == "pending" and st.blocked
    line = "JobId=31 JobState=PENDING Reason=Resources ExitCode=0:0"
    assert not Slurm().status(FakeTransport({"scontrol": ok(line)}), "31").blocked


def test_lsf_status_from_bjobs_json() -> None:
    out = json.dumps(
        {
            "COMMAND": "bjobs",
            "JOBS": 1,
            "RECORDS": [
                {
                    "JOBID": "5678",
                    "STAT": "EXIT",
                    "EXIT_CODE": "1",
                    "EXIT_REASON": "TERM_RUNLIMIT: job killed after reaching LSF run time limit",
                    "PEND_REASON": "",
                    "OUTPUT_FILE": "/gpfs/w/t-5678.out",
                    "ERROR_FILE": "/gpfs/w/t-5678.err",
                }
            ],
        }
    )
    t = FakeTransport({"bjobs": ok(out)})
    st = Lsf().status(t, "5678")
    assert st.phase == "failed" and st.state == "EXIT" and "TERM_RUNLIMIT" in (st.reason or "")
    assert t.ran == [
        "bjobs -o 'jobid stat exit_code exit_reason pend_reason output_file error_file' -json 5678"
    ]
    missing = json.dumps({"RECORDS": [{"ERROR": "Job <1> is not found"}]})
    with pytest.raises(JobError, match="Job <1> is not found"):
        Lsf().status(FakeTransport({"bjobs": ok(missing)}), "1")


def test_pbs_status_from_qstat_json() -> None:
    out = json.dumps(
        {
            "Jobs": {
                "9012.pbs": {
                    "job_state": "F",
                    "Exit_status": 271,
                    "comment": "Job run at ... and failed",
                    "Output_Path": "login1:/lus/flare/w/t.o9012",
                }
            }
        }
    )
    st = Pbs().status(FakeTransport({"qstat": ok(out)}), "9012.pbs")
    assert st.phase == "failed" and st.exit_code == "271" and st.stdout == "/lus/flare/w/t.o9012"
    running = json.dumps({"Jobs": {"9013.pbs": {"job_state": "R"}}})
    assert Pbs().status(FakeTransport({"qstat": ok(running)}), "9013.pbs").phase == "running"
    with pytest.raises(JobError, match="qstat: Unknown Job Id"):
        Pbs().status(
            FakeTransport({"qstat": Completed(153, "", "qstat: Unknown Job Id 1.pbs")}), "1.pbs"
        )


def test_dependencies_and_cancel() -> None:
    assert Slurm().submit_argv(["1", "2"]) == [
        "sbatch",
        "--parsable",
        "--dependency=afterok:1:2",
        "--kill-on-invalid-dep=yes",
    ]
    assert Lsf().submit_argv(["1", "2"]) == ["bsub", "-w", "done(1) && done(2)"]
    assert Pbs().submit_argv(["1.pbs"]) == ["qsub", "-W", "depend=afterok:1.pbs"]
    t = FakeTransport(
        {
            "scancel 5": Completed(
                1, "", "scancel: error: Kill job error on job id 5: Invalid job id specified"
            )
        }
    )
    with pytest.raises(JobError, match="Invalid job id specified"):
        Slurm().cancel(t, "5")
    with pytest.raises(Exception, match="not a job id"):
        get_scheduler("slurm").cancel(t, "5; rm -rf /")


def test_directive_words_and_walltime() -> None:
    assert directive_pairs(["-C", "gpu", "--exclusive", "--qos=debug"]) == [
        ("-C", "gpu"),
        ("--exclusive", None),
        ("--qos", "debug"),
    ]
    assert _lsf_walltime("01:30:00") == "01:30" and _lsf_walltime("00:00:30") == "00:01"
    # one format for sites and jobs: "30" is 30 minutes; "00:30" is ambiguous and refused
    assert _lsf_walltime("30") == "00:30" and _lsf_walltime("1-02") == "26:00"
    assert _pbs_walltime("90") == "01:30:00"
    for bad in ("-5", "1:2:3:4", "00:30", "00:61:00", "0", "soon", "01:30:00\n"):
        with pytest.raises(ConfigError, match="walltime"):
            _lsf_walltime(bad)
