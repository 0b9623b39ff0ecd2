"""``hpcenv build --on-login``: the project's loopback sshd as the login node, the local podman
behind it. The image built there is the one the next ``submit`` runs (podman's
/run/.containerenv names the image id the container runs); a connection dropped mid-build
leaves the folder and log there, and the retry reuses the layers already built (Using cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hpcenv.jobs.transport import Completed, Transport, TransportError

if TYPE_CHECKING:
    from services import SlurmInfo, SshdInfo

pytest_plugins = ["services"]
HPCENV = Path(sys.executable).with_name("hpcenv")
FOLDER = Path("/root/.cache/hpcenv/remote-builds/local-mpi4py-os")


def _hpcenv(*args: str, cache: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCENV_CACHE": str(cache)}
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _ssh(info: SshdInfo) -> list[str]:
    return [
        "--ssh-host",
        info.host,
        "--ssh-port",
        str(info.port),
        "--ssh-user",
        "root",
        "--ssh-key",
        str(info.key),
        "--known-hosts",
        str(info.known_hosts),
    ]


def test_dry_run_says_what_is_sent_where_and_how(tmp_path: Path) -> None:
    res = _hpcenv(
        "build", "-s", "perlmutter", "-r", "torch-gpu", "--on-login", "--dry-run", cache=tmp_path
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "login node: ssh://perlmutter.nersc.gov\n" in out
    assert "folder: ~/.cache/hpcenv/remote-builds/perlmutter-torch-gpu (0700)" in out
    assert "run: podman-hpc build --layers" in out
    assert "run: podman-hpc migrate localhost/hpcenv/torch-gpu:perlmutter" in out
    res = _hpcenv(
        "build",
        "-s",
        "frontier",
        "-r",
        "daal4py",
        "--on-login",
        "--dry-run",
        "--json",
        cache=tmp_path,
    )
    plan = json.loads(res.stdout)[0]
    assert any(c.startswith("apptainer build daal4py-frontier.sif") for c in plan["commands"])
    assert not (tmp_path / "images").exists()  # a dry run writes nothing


def test_no_login_node_is_one_line_exit_2(tmp_path: Path) -> None:
    res = _hpcenv(
        "build", "-s", "local", "-r", "mpi4py-os", "--on-login", "--dry-run", cache=tmp_path
    )
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .endswith("has no ssh.host or login_host; pass --ssh-host")
    )


@pytest.mark.ssh
@pytest.mark.podman
@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_remote_build_is_what_the_next_job_runs(
    sshd: SshdInfo, slurm: SlurmInfo, local_image: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    res = _hpcenv(
        "build", "-s", "local", "-r", "mpi4py-os", "--on-login", "--json", *_ssh(sshd), cache=cache
    )
    assert res.returncode == 0, res.stderr
    built = json.loads(res.stdout)[0]
    record = json.loads((cache / "images" / "local-mpi4py-os.json").read_text())
    assert record["image_id"] == built["image_id"] and record["host"].startswith("ssh://root@")
    assert "STEP" in (cache / "logs").joinpath(Path(built["log"]).name).read_text()
    res = _hpcenv(
        "submit",
        "-s",
        "local",
        "-r",
        "mpi4py-os",
        "--single",
        "--wait",
        "--json",
        "--workdir",
        str(tmp_path / "job"),
        "--",
        "cat",
        "/opt/hpcenv/stack.lock.json",
        cache=cache,
    )
    assert res.returncode == 0, res.stderr
    # the job ran the recorded image (its tag names the id the remote build made), in it
    plan = _hpcenv(
        "submit",
        "-s",
        "local",
        "-r",
        "mpi4py-os",
        "--single",
        "--dry-run",
        "--json",
        "--",
        "true",
        cache=cache,
    )
    assert json.loads(plan.stdout)["image"] == record["image"], plan.stderr
    inspect = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", record["image"]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert inspect.stdout.strip() == record["image_id"]
    out = "".join(p.read_text() for p in (tmp_path / "job").glob("*.out"))
    assert '"recipe": "mpi4py-os"' in out or '"recipe":"mpi4py-os"' in out, out


class _Dropping(Transport):
    """The SSH transport whose connection drops at the first poll of the running build."""

    def __init__(self, inner: Transport) -> None:
        self.inner, self.spec = inner, inner.spec

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        if "sh -s -- " in command:  # the poll of the running build
            raise TransportError("Connection reset by peer")
        return self.inner.run(command, stdin, timeout)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.ssh
@pytest.mark.podman
@pytest.mark.timeout(1800)
def test_dropped_connection_then_retry_uses_cache(
    sshd: SshdInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcenv.build import make_plans
    from hpcenv.errors import JobError
    from hpcenv.jobs.transport import TransportSpec, make_transport
    from hpcenv.remote_build import RemoteBuild
    from hpcenv.site import load_site

    cache = tmp_path / "cache"
    monkeypatch.setenv("HPCENV_CACHE", str(cache))
    plan = make_plans(load_site("local"), ["mpi4py-os"], {})[0]
    spec = TransportSpec(
        kind="ssh",
        host=sshd.host,
        port=sshd.port,
        user="root",
        key_file=str(sshd.key),
        known_hosts=str(sshd.known_hosts),
    )
    with pytest.raises(JobError, match="lost while building .* run the same command again"):
        RemoteBuild(plan, _Dropping(make_transport(spec)), "oci").run()
    log = FOLDER / "build.log"
    deadline = time.monotonic() + 600
    while "STEP 3/" not in log.read_text() and not (FOLDER / "build.rc").exists():
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.5)
    pid = int((FOLDER / "build.pid").read_text())
    subprocess.run(["kill", "--", f"-{pid}"], check=False)  # the login node ends the session
    time.sleep(1)
    res = _hpcenv("build", "-s", "local", "-r", "mpi4py-os", "--on-login", *_ssh(sshd), cache=cache)
    assert res.returncode == 0, res.stderr
    text = next((cache / "logs").iterdir()).read_text()
    assert "STEP 2/" in text and "Using cache" in text


@pytest.mark.ssh
@pytest.mark.podman
@pytest.mark.timeout(1800)
def test_a_followed_build_that_stops_is_started_again(sshd: SshdInfo, tmp_path: Path) -> None:
    """Run again while the killed build is still ending (its podman cleaning up): the rerun
    follows it, sees it stop without an exit status, and starts the build again (once), so the
    same command succeeds instead of asking for a third run."""
    cache = tmp_path / "cache"
    first = _hpcenv(
        "build", "-s", "local", "-r", "mpi4py-os", "--on-login", *_ssh(sshd), cache=cache
    )
    assert first.returncode == 0, first.stderr
    ending = subprocess.Popen(["sleep", "3"])  # stands for the earlier build, still ending
    reaper = threading.Thread(target=ending.wait)  # reaped when it ends: no zombie "running"
    reaper.start()
    try:
        (FOLDER / "build.rc").unlink()
        (FOLDER / "build.pid").write_text(f"{ending.pid}\n")
        res = _hpcenv(
            "build", "-s", "local", "-r", "mpi4py-os", "--on-login", *_ssh(sshd), cache=cache
        )
    finally:
        reaper.join()
    assert res.returncode == 0, res.stderr
    assert f"following the build already running on the login node (pid {ending.pid})" in res.stderr
    assert "the build it followed stopped without finishing; starting it again" in res.stderr
    assert (FOLDER / "build.rc").read_text().strip() == "0"
