"""Every parser of other programs' output (host detection, scheduler status, job ids) on
garbage, empty, truncated, huge and non-UTF-8 text: a valid result or an HpcenvError with one
line, never another exception (issue 20, class 4). Hand-written cases first, then Hypothesis."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcenv import hostdetect
from hpcenv.errors import HpcenvError, JobError
from hpcenv.jobs import schedulers
from hpcenv.jobs.transport import Completed

HOSTS = Path(__file__).parent / "data" / "hosts"

PARSERS: dict[str, Callable[[str], Any]] = {
    "lscpu": hostdetect.parse_lscpu,
    "meminfo": hostdetect.parse_meminfo_gb,
    "nvidia-smi": hostdetect.parse_nvidia_smi,
    "rocm-smi": hostdetect.parse_rocm_smi,
    "xpu-smi": hostdetect.parse_xpu_smi,
    "scontrol": hostdetect.parse_scontrol,
    "srun-mpi": hostdetect.parse_srun_mpi_list,
    "mpirun": hostdetect.parse_mpi_version,
    "modules": hostdetect.parse_modules,
    "findmnt": hostdetect.parse_findmnt,
    "node-local": hostdetect.parse_df,
    "pmix": hostdetect.parse_pmix_major,
    "slurm-record": schedulers.parse_slurm_record,
    "bjobs": lambda t: schedulers.parse_bjobs_json("1", t),
    "qstat": lambda t: schedulers.parse_qstat_json("1", t),
    "sbatch": lambda t: schedulers.Slurm().parse_job_id(Completed(0, t, "")),
    "bsub": lambda t: schedulers.Lsf().parse_job_id(Completed(0, t, "")),
    "qsub": lambda t: schedulers.Pbs().parse_job_id(Completed(0, t, "")),
}

BAD = [
    "",
    "\n",
    "garbage",
    ":::",
    "\x00\xff\ufffd",
    b"Socket(s): \xff\xfe\n".decode(errors="replace"),
    "Socket(s): x\nCore(s) per socket: 2",
    "Socket(s): 0\nCore(s) per socket: 2",
    "Socket(s): -1\nCore(s) per socket: 2",
    "Socket(s): ²\nCore(s) per socket: 2",
    "Socket(s): " + "9" * 5000 + "\nCore(s) per socket: 1",
    "MemTotal:",
    "MemTotal: 0 kB",
    "MemTotal: -5 kB",
    "MemTotal: " + "9" * 5000 + " kB",
    ",",
    "x,",
    "A100,\n",
    "GPU[0]\t: Card Series: \x1b]0;owned\x07",
    "srun: pmix_v" + "9" * 5000,
    "fs ² 1 2 3 /x",
    "fs " + "9" * 5000 + " 1 2 3 /x",
    "[]",
    "{}",
    "null",
    '"x"',
    "[" * 100_000,
    '{"RECORDS": 5}',
    '{"RECORDS": [1]}',
    '{"RECORDS": [{"STAT": []}]}',
    '{"RECORDS": [{"STAT": "DONE", "JOBID": {"a": 1}}]}',
    '{"RECORDS": [{"ERROR": "\\u001b[2J gone"}]}',
    '{"Jobs": 5}',
    '{"Jobs": {"1": 5}}',
    '{"Jobs": {"1": {"job_state": []}}}',
    '{"Jobs": {"1": {"job_state": "F", "Exit_status": [0]}}}',
    '{"Jobs": {"1": {"comment": {"a": 1}}}}',
    "9" * 10_000,
    "Job <" + "9" * 10_000 + "> is submitted to queue <q>.",
    "-1",
    "12\n13",
    "12;cluster\n",
    "a" * 100_000,
    "a=" * 50_000,
]


def _check(name: str, text: str) -> None:
    try:
        PARSERS[name](text)
    except HpcenvError as err:  # the CLI prints it escaped, one line per line (test_cli_edges)
        assert str(err), name


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("text", BAD, ids=range(len(BAD)))
def test_parser_on_bad_output(name: str, text: str) -> None:
    _check(name, text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=150, deadline=None)
@given(
    text=st.text(max_size=400) | st.binary(max_size=400).map(lambda b: b.decode(errors="replace"))
)
def test_parser_property(name: str, text: str) -> None:
    _check(name, text)


@settings(max_examples=100, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["Socket(s)", "Core(s) per socket", "Thread(s) per core", "MemTotal"]),
            st.text(max_size=30),
        ),
        max_size=6,
    )
)
def test_colon_tables_property(lines: list[tuple[str, str]]) -> None:
    """lscpu and meminfo with their own keys and any value: a result in range or an error."""
    text = "\n".join(f"{k}: {v}" for k, v in lines)
    for name in ("lscpu", "meminfo"):
        try:
            got = PARSERS[name](text)
        except HpcenvError:
            continue
        if name == "lscpu":
            assert all(got[k] >= 1 for k in ("sockets", "cores_per_socket", "threads_per_core"))
        else:
            assert got[0] >= 0 and got[1] > 0


@settings(max_examples=150, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["RECORDS", "Jobs", "STAT", "JOBID", "job_state", "comment", "1"]),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_scheduler_json_property(value: object) -> None:
    """bjobs/qstat JSON of any shape: a status or a JobError."""
    import json

    text = json.dumps(value)
    for name in ("bjobs", "qstat"):
        with contextlib.suppress(JobError):
            PARSERS[name](text)


def test_recorded_outputs_still_parse() -> None:
    """The real sites' recordings give what they gave before."""
    cpu = hostdetect.parse_lscpu((HOSTS / "frontier" / "lscpu.txt").read_text())
    assert cpu["sockets"] >= 1 and cpu["cores_per_socket"] >= 1
    count, model, driver = hostdetect.parse_nvidia_smi(
        (HOSTS / "perlmutter" / "nvidia-smi.txt").read_text()
    )
    assert count == 4 and model and driver
    assert hostdetect.parse_pmix_major("4.2.9\n") == 4
    assert hostdetect.parse_pmix_major("garbage") is None
    assert hostdetect.parse_srun_mpi_list("MPI plugin types are...\n\tpmix_v5\n")[1] == 5


def test_missing_field_names_the_command_and_field() -> None:
    with pytest.raises(HpcenvError, match=r"output of lscpu: no 'Socket\(s\)' line"):
        hostdetect.parse_lscpu("Architecture: x86_64\n")
    with pytest.raises(HpcenvError, match=r"MemTotal is '-5', not a whole number"):
        hostdetect.parse_meminfo_gb("MemTotal: -5 kB\n")


def test_slurm_record_is_linear() -> None:
    """32 KB of one word took 7.5 s with the old look-ahead regex."""
    start = time.process_time()  # this process's CPU time: a loaded host does not count
    schedulers.parse_slurm_record("a" * 256_000)
    schedulers.parse_slurm_record("a " * 128_000)
    assert time.process_time() - start < 1.0
    rec = schedulers.parse_slurm_record(
        "JobId=12 JobName=my job JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 x=a=b"
    )
    assert rec == {
        "JobId": "12",
        "JobName": "my job",
        "JobState": "FAILED",
        "Reason": "NonZeroExitCode",
        "ExitCode": "3:0",
        "x": "a=b",
    }


def test_job_id_bounds() -> None:
    with pytest.raises(JobError, match="not a job id"):
        schedulers.Slurm().parse_job_id(Completed(0, "9" * 200 + "\n", ""))
    assert schedulers.Slurm().parse_job_id(Completed(0, "\nnoise\n42\n", "")) == "42"


def test_status_line_escapes_control_characters() -> None:
    st_ = schedulers.parse_qstat_json(
        "1.pbs", '{"Jobs": {"1.pbs": {"job_state": "Q", "comment": "\\u001b]0;owned\\u0007 wait"}}}'
    )
    line = st_.message()
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;owned\\x07 wait" in line
