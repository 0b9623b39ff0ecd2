"""The derived ``MASTER_PORT`` (issue 40, class 9): spread over 12,000 ports by the job id (jobs
1,000 ids apart shared one); the expression runs for real under bash."""

from __future__ import annotations

import subprocess

from hpcenv.jobs.rendezvous import PORT_LOW, PORT_SLOTS, derived_port, environment
from hpcenv.jobs.schedulers import get_scheduler
from hpcenv.site import load_site


def _port(expr: str, job_id: str) -> int:
    proc = subprocess.run(
        ["bash", "-c", f'echo "{expr}"'],
        env={"HPCENV_JOB_ID": job_id, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_jobs_1000_ids_apart_get_different_ports() -> None:
    expr = derived_port()
    ports = {_port(expr, str(n)) for n in (7, 1007, 2007, 11007)}
    assert len(ports) == 4 and all(PORT_LOW <= p < PORT_LOW + PORT_SLOTS for p in ports)
    assert _port(expr, "4242.pbs01") == PORT_LOW + 4242  # PBS ids: the leading digits
    assert _port(expr, "0099") == PORT_LOW + 99  # no octal


def test_the_sites_documented_port_stays() -> None:
    documented = environment(load_site("frontier"), get_scheduler("slurm"))
    assert documented["MASTER_PORT"] == "3442"
    derived = environment(load_site("generic-slurm"), get_scheduler("slurm"))
    assert derived["MASTER_PORT"] == derived_port()


def test_the_installed_hpcenv_writes_the_derived_port() -> None:
    import sys
    from pathlib import Path

    hpcenv = str(Path(sys.executable).with_name("hpcenv"))
    argv = [hpcenv, "submit", "--site", "generic-slurm", "--recipe", "torch-ccl", "-N", "2"]
    proc = subprocess.run(
        [*argv, "--dry-run", "--", "python3", "train.py"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MASTER_PORT="))
    assert line == f'MASTER_PORT="{derived_port()}"'
