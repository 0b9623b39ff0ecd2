"""Fixtures that start and stop the real services job tests use: a one-node Slurm, a loopback
sshd, and the two rehearsal sites: the two-node Slurm in network namespaces (``local-2node``,
scripts/slurm-2node-up.sh / -down.sh), the site MPI of ``local-bind`` (Intel MPI in
/opt/site/intel-mpi, scripts/site-mpi-setup.sh) and the SIF sites' ``apptainer`` command
(/opt/site/apptainer, scripts/site-apptainer-setup.sh).

Both run the project's scripts (scripts/slurm-up.sh, scripts/sshd-up.sh), which keep every file
under ``$HPCENV_STATE`` (default /var/tmp/hpcenv-services). A service that was already running
when the session started is reused and left running; one the fixture started is stopped at the
end. Test modules load them with ``pytest_plugins = ["services"]``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from requirements import IMAGES, need, need_root, need_tool

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("HPCENV_STATE", "/var/tmp/hpcenv-services"))
SSHD_PORT = int(os.environ.get("HPCENV_SSHD_PORT", "2222"))
# The prototype or the local recipe image; HPCENV_TEST_IMAGE first when set.
IMAGE_CANDIDATES = [
    os.environ.get("HPCENV_TEST_IMAGE", ""),
    "localhost/hpcenv/horovod-cpu:local",
    "localhost/hpcenv-proto:latest",
]


@dataclass(frozen=True)
class SlurmInfo:
    conf: Path
    node: str
    jobcomp: Path


@dataclass(frozen=True)
class TwoNodeInfo:
    conf: Path
    nodes: tuple[str, str]
    state: Path
    node_local: Path  # the same path on both nodes, each node's own disk


@dataclass(frozen=True)
class SshdInfo:
    host: str
    port: int
    key: Path
    known_hosts: Path


def _script(
    name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


def _alive(pidfile: Path) -> bool:
    """The service in ``pidfile`` runs: its pid is alive and has the program's name (the rule of
    scripts/pidfile.sh; a stale file's number may belong to any process by now). ``holder.pid``
    names a namespace holder, which is ``sleep``; every other file is named after its program."""
    program = {"holder": "sleep"}.get(pidfile.stem, pidfile.stem)
    try:
        pid = int(pidfile.read_text().strip())
        return pid > 0 and Path(f"/proc/{pid}/comm").read_text().strip() == program
    except (OSError, ValueError):
        return False


def _need_root_and(*tools: str) -> None:
    """Root and the service's programs: a failure under CI, a skip elsewhere (requirements.py)."""
    why = "the local Slurm, the two-node rehearsal and the loopback sshd run real daemons"
    need_root(why)
    for tool in tools:
        need_tool(tool, why=why)


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmInfo]:
    """A running one-node Slurm; sets SLURM_CONF for this process and its children."""
    _need_root_and("munged", "slurmctld", "slurmd", "sbatch")
    was_up = _alive(STATE / "slurm" / "slurmctld.pid") and _alive(STATE / "slurm" / "slurmd.pid")
    proc = _script("slurm-up.sh")
    if proc.returncode != 0:
        pytest.fail(f"slurm-up.sh failed: {proc.stderr.strip() or proc.stdout.strip()}")
    conf = STATE / "slurm" / "slurm.conf"
    os.environ["SLURM_CONF"] = str(conf)
    yield SlurmInfo(
        conf=conf, node=socket.gethostname().split(".")[0], jobcomp=STATE / "slurm" / "jobcomp.txt"
    )
    if not was_up:
        _script("slurm-down.sh")


@pytest.fixture
def two_node(two_node_cluster: TwoNodeInfo) -> Iterator[TwoNodeInfo]:
    """The two-node rehearsal cluster for one test; after the test, a job of it still queued or
    running (a test that failed on a hung job, or gave up waiting) is cancelled, so the next
    test does not queue behind it: the cluster lives for the session, and a job that hangs
    holds both nodes until its walltime (CI, 2026-11-28: one hung 2-node job failed the next
    test too, waiting behind it)."""
    yield two_node_cluster
    env = {**os.environ, "SLURM_CONF": str(two_node_cluster.conf)}
    left = subprocess.run(
        ["squeue", "-h", "-a", "-o", "%i"], capture_output=True, text=True, env=env
    ).stdout.split()
    if not left:
        return
    subprocess.run(["scancel", *left], capture_output=True, env=env)
    for _ in range(60):  # until Slurm has let the nodes go
        queued = subprocess.run(
            ["squeue", "-h", "-a", "-o", "%i"], capture_output=True, text=True, env=env
        ).stdout.split()
        if not queued:
            break
        time.sleep(1)


@pytest.fixture(scope="session")
def two_node_cluster() -> Iterator[TwoNodeInfo]:
    """The two-node rehearsal cluster (node1, node2 in network namespaces); stopped at the end
    unless it was already running. Tests use ``SLURM_CONF=info.conf`` (the site file names it)."""
    _need_root_and("munged", "slurmctld", "slurmd", "sbatch", "ip", "nsenter", "unshare")
    state = STATE / "slurm-2node"
    was_up = _alive(state / "slurmctld.pid") and all(
        _alive(state / n / "slurmd.pid") for n in ("node1", "node2")
    )
    proc = _script("slurm-2node-up.sh")
    if proc.returncode != 0:
        _script("slurm-2node-down.sh")
        pytest.fail(f"slurm-2node-up.sh failed: {proc.stderr.strip() or proc.stdout.strip()}")
    yield TwoNodeInfo(
        conf=state / "slurm.conf",
        nodes=("node1", "node2"),
        state=state,
        node_local=Path("/tmp/hpcenv-2node-local"),
    )
    if not was_up:
        down = _script("slurm-2node-down.sh")
        assert down.returncode == 0, down.stderr
        # Nothing left behind: no namespace, link, holder or daemon of the rehearsal.
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        left = [n for n in ("node1", "node2") if n in netns.split()]
        left += [x for x in ("hpcbr2n", "veth-node1", "veth-node2") if x in links]
        left += [str(p) for p in state.glob("*.pid") if _alive(p)]
        left += [str(p) for p in state.glob("node*/*.pid") if _alive(p)]
        assert not left, f"slurm-2node-down.sh left {left}"


@pytest.fixture(scope="session")
def site_mpi_prefix() -> Path:
    """The local-bind site MPI (Intel MPI), installed by the project's script when missing."""
    prefix = Path(os.environ.get("HPCENV_SITE_MPI_PREFIX", "/opt/site/intel-mpi"))
    if not (prefix / "lib" / "libmpi.so.12").exists():
        proc = _script("site-mpi-setup.sh")
        if proc.returncode != 0:
            pytest.fail(f"site-mpi-setup.sh failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return prefix


@pytest.fixture(scope="session")
def site_apptainer() -> Path:
    """The rehearsal sites' ``apptainer`` command (/opt/site/apptainer/bin/apptainer, installed
    by scripts/site-apptainer-setup.sh; local-bind-sif and local-2node-sif name it in
    ``runtime.executable``) and the helper image it runs, ready."""
    from hpcenv.apptainer import Apptainer
    from hpcenv.site import load_site

    exe = Path(str(load_site("local-2node-sif").runtime.executable))
    proc = _script("site-apptainer-setup.sh")
    if proc.returncode != 0 or not exe.is_file():
        pytest.fail(f"site-apptainer-setup.sh failed: {proc.stderr.strip() or proc.stdout.strip()}")
    Apptainer().ensure_helper()
    return exe


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshdInfo]:
    """A loopback sshd with its own host key, client key and known_hosts file."""
    _need_root_and("sshd", "ssh-keygen")
    was_up = _alive(STATE / "sshd" / "sshd.pid")
    proc = _script("sshd-up.sh")
    if proc.returncode != 0:
        pytest.fail(f"sshd-up.sh failed: {proc.stderr.strip() or proc.stdout.strip()}")
    d = STATE / "sshd"
    yield SshdInfo("127.0.0.1", SSHD_PORT, d / "id_ed25519", d / "known_hosts")
    if not was_up:
        _script("sshd-down.sh")


@pytest.fixture(scope="session")
def sshd_jump() -> Iterator[SshdInfo]:
    """A second loopback sshd (its own state folder, port ``HPCENV_SSHD_JUMP_PORT``, default
    2223), for ProxyJump: the same script as :func:`sshd`, so it is the same kind of server."""
    _need_root_and("sshd", "ssh-keygen")
    port = int(os.environ.get("HPCENV_SSHD_JUMP_PORT", "2223"))
    env = {"HPCENV_STATE": str(STATE / "jump"), "HPCENV_SSHD_PORT": str(port)}
    d = STATE / "jump" / "sshd"
    was_up = _alive(d / "sshd.pid")
    proc = _script("sshd-up.sh", env=env)
    if proc.returncode != 0:
        pytest.fail(f"sshd-up.sh (jump) failed: {proc.stderr.strip() or proc.stdout.strip()}")
    yield SshdInfo("127.0.0.1", port, d / "id_ed25519", d / "known_hosts")
    if not was_up:
        _script("sshd-down.sh", env=env)


@pytest.fixture(scope="session")
def local_image() -> str:
    """The local recipe image or the prototype; missing: a failure under CI, else a skip."""
    why = "job tests run their ranks in it"
    need_tool("podman", why=why)
    tag = find_image()
    if tag is None:
        what = f"the local image (none of {', '.join(filter(None, IMAGE_CANDIDATES))} in podman)"
        need(what, why, f"{IMAGES}, or set HPCENV_TEST_IMAGE")
    return tag


def find_image() -> str | None:
    """The first candidate image that exists in local podman storage, else None."""
    if not shutil.which("podman"):
        return None
    from hpcenv.engines import engine_env

    env = engine_env()
    for tag in filter(None, IMAGE_CANDIDATES):
        proc = subprocess.run(["podman", "image", "exists", tag], env=env, capture_output=True)
        if proc.returncode == 0:
            return tag
    return None
