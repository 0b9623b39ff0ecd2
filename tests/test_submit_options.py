"""``submit`` options for the project, queue, QOS, constraint and any other scheduler option,
run as the installed ``hpcenv`` (exit codes and messages), and the two-rank local default."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_module, needs_tool

from hpcenv.site import load_site

HPCENV = Path(sys.executable).with_name("hpcenv")
CHECKS = Path(__file__).resolve().parents[1] / "hpcenv" / "checks"


def hpcenv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HPCENV), *args], capture_output=True, text=True, timeout=120)


def dry(site: str, *args: str) -> subprocess.CompletedProcess[str]:
    return hpcenv(
        "submit",
        "--site",
        site,
        "--recipe",
        "horovod-gpu",
        "--dry-run",
        *args,
        "--",
        "python3",
        "train.py",
    )


def real(site: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``submit`` for real: the account is checked before anything is queued or written."""
    return hpcenv("submit", "--site", site, "--recipe", "horovod-gpu", *args, "--", "python3", "x")


@pytest.mark.parametrize("site", ["summit", "frontier", "perlmutter", "aurora"])
def test_real_sites_refuse_a_missing_account_and_name_the_option(site: str) -> None:
    proc = real(site)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"site {site} needs a project" in proc.stderr and "--account" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("site", ["summit", "frontier", "perlmutter", "aurora"])
def test_a_dry_run_without_account_shows_the_job_with_a_placeholder(site: str) -> None:
    """Nothing is charged by a dry run: the job is shown with ``PROJECT`` as its account and a
    note that says what submitting needs (the same script submitted as it is is refused)."""
    proc = dry(site)
    assert proc.returncode == 0, proc.stderr
    assert "note: dry run: no project given, so the job shows 'PROJECT' as its account; " in (
        proc.stderr
    )
    assert "submitting needs --account" in proc.stderr
    assert "export HPCENV_PROJECT=PROJECT" in proc.stdout.splitlines()


@pytest.mark.parametrize("value", ["PROJ123", "m0000", "abc123", "CHANGEME"])
def test_placeholder_accounts_are_refused(value: str) -> None:
    shown = dry("frontier", "--account", value)  # a dry run too: the user gave it
    assert shown.returncode == 2 and f"account {value!r} (given) is a placeholder" in shown.stderr
    proc = real("frontier", "--account", value)
    assert proc.returncode == 2
    assert f"account {value!r} (given) is a placeholder" in proc.stderr
    assert "--account ID" in proc.stderr


def test_placeholder_in_a_site_file_is_refused(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[1] / "site-configs" / "generic-slurm.yaml").read_text()
    site = tmp_path / "mysite.yaml"
    site.write_text(text.replace("name: generic-slurm", "name: mysite") + "\n")
    # generic-slurm has no account; give it the placeholder OLCF's examples use
    site.write_text(
        site.read_text().replace("  kind: slurm\n", "  kind: slurm\n  account: PROJ123\n", 1)
    )
    proc = hpcenv("submit", "--site", str(site), "--no-container", "--", "true")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "site mysite's scheduler.account" in proc.stderr and "--account" in proc.stderr
    shown = hpcenv("submit", "--site", str(site), "--no-container", "--dry-run", "--", "true")
    assert shown.returncode == 0 and "#SBATCH --account=PROJECT" in shown.stdout, shown.stderr


def test_scheduler_options_reach_the_directives() -> None:
    proc = dry(
        "frontier",
        "-A",
        "stf007",
        "--partition",
        "extended",
        "--qos",
        "debug",
        "--constraint",
        "nvme",
        "--option",
        "--reservation=hackathon",
        "--option",
        "--mail-type END",
    )
    assert proc.returncode == 0, proc.stderr
    lines = set(proc.stdout.splitlines())
    assert {
        "#SBATCH --account=stf007",
        "#SBATCH --partition=extended",
        "#SBATCH --qos=debug",
        "#SBATCH -C nvme",
        "#SBATCH --reservation=hackathon",
        "#SBATCH --mail-type=END",
    } <= lines
    # capacity takes 1-16 nodes (prod starts at 256: ALCF's queue table)
    pbs = dry(
        "aurora",
        "-A",
        "stf007",
        "--queue",
        "capacity",
        "--option",
        "-l filesystems=home:flare:daos_user",
    )
    assert pbs.returncode == 0, pbs.stderr
    assert {"#PBS -A stf007", "#PBS -q capacity"} <= set(pbs.stdout.splitlines())
    assert "#PBS -l filesystems=home:flare:daos_user" in pbs.stdout


@pytest.mark.parametrize(
    "option, message",
    [
        ("--a\n#SBATCH --x", "--option"),  # a newline never starts a directive
        ("--a=1 --b=2", "one option"),
        ("plain", "one option"),
        ("--a=$(id)", "--option"),
    ],
)
def test_bad_scheduler_options_are_one_line_errors(option: str, message: str) -> None:
    proc = dry("frontier", "-A", "stf007", "--option", option)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_qos_on_a_scheduler_without_one_is_refused() -> None:
    proc = dry("summit", "-A", "stf007", "--qos", "debug")
    assert proc.returncode == 2
    assert "lsf has no --qos" in proc.stderr


def test_local_default_job_runs_two_ranks() -> None:
    proc = hpcenv(
        "submit",
        "--site",
        "local",
        "--no-container",
        "--dry-run",
        "--",
        "python3",
        "/opt/hpcenv/checks/allreduce_mpi.py",
    )
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --ntasks-per-node=2" in proc.stdout
    assert (
        "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --mpi=pmix" in proc.stdout
    )


@needs_tool("mpirun", why="the allreduce check runs as a one-rank Open MPI job")
def test_collective_check_refuses_world_size_one() -> None:
    """The allreduce check run as one rank exits 2 (it would 'pass' with busbw 0)."""
    need_module("mpi4py", "the allreduce check imports mpi4py")
    script = str(CHECKS / "allreduce_mpi.py")
    one = subprocess.run(
        [sys.executable, script, "--max-bytes", "64"], capture_output=True, text=True, timeout=120
    )
    assert one.returncode == 2, one.stdout + one.stderr
    assert "world size 1" in one.stderr and "--allow-single-rank" in one.stderr
    ok = subprocess.run(
        [sys.executable, script, "--max-bytes", "64", "--allow-single-rank"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and '"world_size": 1' in ok.stdout


def test_readme_site_quick_starts_dry_run_with_only_an_account() -> None:
    """Each real site's README quick-start submit line renders with nothing but --account."""
    import re
    import shlex

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    lines = re.findall(r"`(hpcenv submit --site (?:frontier|perlmutter|aurora)[^`]*)`", readme)
    assert {shlex.split(ln)[3] for ln in lines} == {"frontier", "perlmutter", "aurora"}
    for line in lines:
        argv = shlex.split(line.replace("<project>", "stf007"))
        cut = argv.index("--")
        proc = hpcenv(*argv[1:cut], "--dry-run", *argv[cut:])
        assert proc.returncode == 0, (line, proc.stderr)
        assert "stf007" in proc.stdout


def test_render_takes_the_account_for_job_sh(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = hpcenv(
        "render", "--site", "aurora", "--recipe", "torch-gpu", "-A", "stf007", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    job = (out / "job.sh").read_text()
    assert "#PBS -A stf007" in job and "export HPCENV_PROJECT=stf007" in job
    bad = hpcenv(
        "render",
        "--site",
        "aurora",
        "--recipe",
        "torch-gpu",
        "-A",
        "PROJ123",
        "--out",
        str(tmp_path / "bad"),
    )
    assert bad.returncode == 2 and "placeholder" in bad.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("site", ["frontier", "aurora"])
def test_single_task_on_a_site_with_reserved_cores_is_planned(site: str) -> None:
    """``--single`` asks for every core the site leaves to jobs, not the reserved ones (it used
    to ask for all of them and was refused as over-subscription on Frontier and Aurora)."""
    hpcenv = Path(sys.executable).with_name("hpcenv")
    argv = [
        str(hpcenv),
        "submit",
        "--site",
        site,
        "--recipe",
        "torch-gpu",
        "--single",
        "--account",
        "stf007",
        "--dry-run",
        "--json",
        "--",
        "true",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    placement = json.loads(proc.stdout)["placement"]
    reserved = {"frontier": 8, "aurora": 2}[site]
    node = load_site(site).node
    assert placement["cores_per_rank"] == node.cores - reserved
    assert not placement["oversubscribed"]
