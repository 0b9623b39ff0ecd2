"""The derived ``MASTER_PORT`` (issue 40, class 9): spread over 12,000 ports by the job id, and,
where the batch shell runs on the rendezvous host, moved past ports something already listens
on. The expression runs for real under bash against a socket this test holds open."""

from __future__ import annotations

import socket
import subprocess

import pytest

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


def _listen_in_range() -> tuple[socket.socket, int]:
    """A socket listening on 127.0.0.1 at a port of the derived range (the first free one)."""
    for port in range(PORT_LOW + 100, PORT_LOW + PORT_SLOTS):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        s.listen()
        return s, port
    raise AssertionError("no free port in the derived range")


@pytest.mark.parametrize("probe", [False, True])
def test_jobs_1000_ids_apart_get_different_ports(probe: bool) -> None:
    expr = derived_port(probe=probe)
    ports = {_port(expr, str(n)) for n in (7, 1007, 2007, 11007)}
    assert len(ports) == 4 and all(PORT_LOW <= p < PORT_LOW + PORT_SLOTS for p in ports)
    assert _port(expr, "4242.pbs01") == PORT_LOW + 4242  # PBS ids: the leading digits
    assert _port(expr, "0099") == PORT_LOW + 99  # no octal


def test_a_port_in_use_is_passed_over() -> None:
    held, port = _listen_in_range()
    with held:
        job = str(port - PORT_LOW + PORT_SLOTS)  # a job whose derived port is the held one
        assert _port(derived_port(), job) == port
        got = _port(derived_port(probe=True), job)
        assert got != port and PORT_LOW <= got < PORT_LOW + PORT_SLOTS


def test_only_a_batch_shell_on_the_rendezvous_host_probes() -> None:
    lsf = environment(load_site("summit"), get_scheduler("lsf"))  # batch shell: a launch node
    assert "/dev/tcp" not in lsf["MASTER_PORT"]
    slurm = environment(load_site("generic-slurm"), get_scheduler("slurm"))
    assert "/dev/tcp/127.0.0.1" in slurm["MASTER_PORT"]
    documented = environment(load_site("frontier"), get_scheduler("slurm"))
    assert documented["MASTER_PORT"] == "3442"  # the site's own port stays


def test_the_installed_hpcenv_writes_the_probing_port() -> None:
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
    assert line == f'MASTER_PORT="{derived_port(probe=True)}"'
