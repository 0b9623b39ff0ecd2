"""``sites init`` on a login node over SSH: the project's loopback sshd, host keys checked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.site import load_site_file

if TYPE_CHECKING:
    from services import SshdInfo

pytest_plugins = ["services"]  # the sshd fixture


def test_transport_host_runs_the_same_commands_as_local() -> None:
    from hpcenv.hostdetect import LocalHost, TransportHost, detect
    from hpcenv.jobs.transport import LocalTransport

    via = detect(TransportHost(LocalTransport()), "x").data
    here = detect(LocalHost(), "x").data
    for key in ("arch", "node", "gpu", "runtime"):
        assert via[key] == here[key], key
    assert via["mpi"]["spec"] == here["mpi"]["spec"]


@pytest.mark.ssh
@pytest.mark.alongside
@pytest.mark.timeout(180)
def test_init_over_ssh_writes_a_valid_site(sshd: SshdInfo, tmp_path: Path) -> None:
    out = tmp_path / "login.yaml"
    res = CliRunner().invoke(
        app,
        [
            "sites",
            "init",
            "login",
            "--ssh-host",
            sshd.host,
            "--ssh-port",
            str(sshd.port),
            "--ssh-user",
            "root",
            "--ssh-key",
            str(sshd.key),
            "--known-hosts",
            str(sshd.known_hosts),
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    site = load_site_file(out)
    assert site.arch == "x86_64" and site.node.cores >= 1
    assert f"ssh://root@{sshd.host}:{sshd.port}" in site.provenance.verified["arch"]
