"""The rehearsal sites' pieces that need no services: the two-node site's own cluster config
reaches every scheduler command (submit, status, logs, cancel), a NODE_FAIL names the failed node
and Slurm's reason, the project's rehearsal scripts pass shellcheck, doctor's findings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from requirements import needs_tool

from hpcenv.jobs.schedulers import Slurm, client_env
from hpcenv.jobs.transport import (
    Completed,
    LocalTransport,
    Transport,
    TransportSpec,
    make_transport,
)
from hpcenv.site import load_site

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = [
    "munge-up.sh",
    "site-mpi-setup.sh",
    "slurm-2node-up.sh",
    "slurm-2node-down.sh",
    "slurm-up.sh",
    "slurm-down.sh",
    "slurm-common.sh",
    "site-apptainer",
    "site-apptainer-setup.sh",
]


def test_two_node_site_names_its_own_cluster_for_every_command() -> None:
    site = load_site("local-2node")
    env = client_env(site)
    assert env == {"SLURM_CONF": "/var/tmp/hpcenv-services/slurm-2node/slurm.conf"}
    t = LocalTransport(env)
    assert t.run("echo $SLURM_CONF").stdout.strip() == env["SLURM_CONF"]
    # The job record keeps it, so status/logs/cancel later talk to the same cluster.
    again = make_transport(TransportSpec(**t.spec.model_dump()))
    assert again.run("echo $SLURM_CONF").stdout.strip() == env["SLURM_CONF"]
    assert client_env(load_site("local")) == {}


class _Answers(Transport):
    def __init__(self, answers: dict[str, str]) -> None:
        self.spec = TransportSpec()
        self.answers = answers

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        for prefix, out in self.answers.items():
            if command.startswith(prefix):
                return Completed(0, out, "")
        return Completed(1, "", "unexpected")

    def close(self) -> None:
        return None


def test_node_failure_names_the_node_and_slurms_reason() -> None:
    job = (
        "JobId=41 JobName=x JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
        "ExitCode=0:0 NodeList=node[1-2] StdOut=/s/x-41.out StdErr=/s/x-41.err"
    )
    nodes = (
        "NodeName=node1 Arch=x86_64 State=IDLE Reason=(null)\n"
        "NodeName=node2 Arch=x86_64 State=DOWN+NOT_RESPONDING "
        "Reason=Not responding [slurm@2026-11-22T12:00:00]\n"
    )
    t = _Answers({"scontrol show job -o 41": job + "\n", "scontrol show node -o": nodes})
    st = Slurm().status(t, "41")
    assert st.phase == "failed"
    assert "failed node: node2 DOWN+NOT_RESPONDING (Not responding" in st.message()
    assert "node1" not in st.message().split("failed node:")[1]


@needs_tool("shellcheck", why="the rehearsal scripts are shellchecked")
@pytest.mark.parametrize("name", SCRIPTS)
def test_rehearsal_scripts_pass_shellcheck(name: str) -> None:
    # -x: follow what a script sources (scripts/slurm-common.sh), so its use is checked too
    proc = subprocess.run(
        ["shellcheck", "-x", str(ROOT / "scripts" / name)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_doctor_site_mpi_missing_names_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcenv import doctor

    monkeypatch.setattr(doctor, "SITE_MPI_PREFIX", tmp_path / "nowhere")
    check = doctor.check_site_mpi(doctor.Host())
    assert check.status == "missing" and "scripts/site-mpi-setup.sh" in check.fix
