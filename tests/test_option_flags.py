"""``submit --option``: options read the way each scheduler's submit command reads them (sbatch's
getopt_long prefixes, PBS's case-insensitive resource names and attached values), and the
options that break status, logs, ``--wait`` or the job's clean-up (placement, blocking, log
movers, another cluster, a signal to the batch shell) refused like hpcenv's own directives,
unless ``--option-override``. Unit level on every scheduler, then as the installed ``hpcenv``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.errors import ConfigError
from hpcenv.jobs.schedulers import get_scheduler, option_pair

HPCENV = str(Path(sys.executable).with_name("hpcenv"))

# (scheduler, option, a word of what it conflicts with; None: passes)
CASES = [
    ("slurm", "--j=x", "--job-name"),  # getopt_long: a unique prefix is the option
    ("slurm", "--job=x", "--job-name"),
    ("slurm", "--out=x", "--output"),
    ("slurm", "-ofile", "--output"),
    ("slurm", "-J x", "--job-name"),
    ("slurm", "--hint=nomultithread", "placement"),
    ("slurm", "--cpu-bind=cores", "placement"),
    ("slurm", "--threads-per-core=1", "placement"),
    ("slurm", "--ntasks-per-socket=2", "placement"),
    ("slurm", "--distribution=cyclic", "placement"),
    ("slurm", "-m cyclic", "placement"),
    ("slurm", "--wait", "--wait"),
    ("slurm", "-W", "--wait"),
    ("slurm", "--test-only", "--dry-run"),
    ("slurm", "--clusters=other", "cluster"),
    ("slurm", "-M other", "cluster"),
    ("slurm", "--cluster-c=x", "cluster"),  # --cluster-constraint
    ("slurm", "--signal=B:USR1@60", "EXIT trap"),
    ("slurm", "--signal=RB:10@30", "EXIT trap"),
    ("slurm", "--signal=USR1@60", None),  # the steps, not the batch shell
    ("slurm", "--gpus=4", None),  # a whole name, not --gpus-per-task abbreviated
    ("slurm", "--exclusive", None),
    ("slurm", "--reservation=r", None),
    ("slurm", "--wait-all-nodes=1", None),
    ("slurm", "--mail-type END", None),
    ("pbs", "-l Select=3", "--nodes"),  # PBS resource names are case-insensitive
    ("pbs", "-lSELECT=3", "--nodes"),
    ("pbs", "-l Walltime=1:00:00", "--walltime"),
    ("pbs", "-l filesystems=home,walltime=1:00:00", "--walltime"),  # every key of the list
    ("pbs", "-l ncpus=8", "placement"),
    ("pbs", "-l mpiprocs=4", "placement"),
    ("pbs", "-W block=true", "--wait"),
    ("pbs", "-Wblock=true", "--wait"),
    ("pbs", "-I", "--wait"),
    ("pbs", "-j oe", "-j joins"),
    ("pbs", "-k oe", "-k keeps"),
    ("pbs", "-l filesystems=home:flare", None),
    ("pbs", "-W group_list=x", None),
    ("lsf", "-n 4", "placement"),
    ("lsf", "-K", "--wait"),
    ("lsf", "-Is", "--wait"),
    ("lsf", "-outdir /x", "-outdir"),
    ("lsf", "-clusters c2", "cluster"),
    ("lsf", "-alloc_flags smt1", None),
]


@pytest.mark.parametrize(("scheduler", "option", "word"), CASES)
def test_options_are_read_as_the_scheduler_reads_them(
    scheduler: str, option: str, word: str | None
) -> None:
    s = get_scheduler(scheduler)
    flag, value = option_pair(option)
    what = s.owner_of(flag, value)
    if word is None:
        assert what is None, what
        s.refuse_owned(option, flag, value)
    else:
        assert what is not None and word in what, what
        with pytest.raises(ConfigError, match="--option-override"):
            s.refuse_owned(option, flag, value)


@pytest.mark.parametrize("option", ["--c=1", "--wai", "--n=2"])
def test_an_ambiguous_prefix_is_refused_with_the_names_it_could_be(option: str) -> None:
    flag, value = option_pair(option)
    with pytest.raises(ConfigError, match="ambiguous .*give the whole option name"):
        get_scheduler("slurm").owner_of(flag, value)


def test_every_short_flag_names_a_long_option_sbatch_has() -> None:
    s = get_scheduler("slurm")
    assert set(s.short_options.values()) <= s.long_options
    owned_long = {f for f in s.owned if f.startswith("--")}
    assert owned_long - s.long_options == set(), "owned names sbatch does not have"


def _dry(site: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [HPCENV, "submit", "--site", site, "--recipe", "horovod-gpu", "--dry-run"]
    argv += ["-A", "stf007", *args, "--", "python3", "train.py"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("site", "option", "word"),
    [
        ("frontier", "--j=mine", "--job-name"),
        ("frontier", "--hint=nomultithread", "give those"),
        ("frontier", "--wait", "give --wait"),
        ("frontier", "--clusters=other", "site file"),
        ("frontier", "--signal=B:USR1@60", "no end marker"),
        ("frontier", "--c=1", "ambiguous"),
        ("aurora", "-l Select=3", "--nodes"),
        ("aurora", "-W block=true", "give --wait"),
        ("aurora", "-j oe", "-e/--error"),
        ("summit", "-K", "give --wait"),
        ("summit", "-n 42", "give those"),
    ],
)
def test_the_installed_hpcenv_refuses_in_one_line(site: str, option: str, word: str) -> None:
    proc = _dry(site, "--option", option)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and word in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_option_override_passes_it_as_given() -> None:
    proc = _dry("frontier", "--option", "--j=mine", "--option-override")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --j=mine" in proc.stdout.splitlines()
    pbs = _dry("aurora", "--option", "-l Select=3", "--option-override")
    assert pbs.returncode == 0, pbs.stderr
    assert "#PBS -l Select=3" in pbs.stdout.splitlines()
