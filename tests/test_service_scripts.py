"""The scripts that start and stop the test services (scripts/*.sh): shellchecked as files, and
their one pid-file rule (scripts/pidfile.sh) checked for real. A pid file outlives its process: a
CI run on a restored machine found the jump sshd's pid file from an earlier run naming a number
another process had by then, and sshd-up.sh signalled that process and died without a word. Now a
pid counts only when its process runs under the service's own name, a stale file is replaced and
never signalled, and a failed start says why."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from requirements import need_root, needs_tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
PIDFILE_SH = SCRIPTS / "pidfile.sh"


@needs_tool("shellcheck", why="the service scripts are shellchecked as files")
@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_service_script_passes_shellcheck(name: str) -> None:
    proc = subprocess.run(
        ["shellcheck", "-x", "-S", "style", str(SCRIPTS / name)],
        capture_output=True,
        text=True,
        cwd=SCRIPTS,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A running process that is none of the services (a ``sleep``), once it has that name:
    Popen can return while the kernel is still inside exec, with the child named ``python``
    (seen under load in a full CI run)."""
    proc = subprocess.Popen(["sleep", "300"])
    comm = Path(f"/proc/{proc.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_text().strip() != "sleep" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert comm.read_text().strip() == "sleep"
    yield proc
    proc.kill()
    proc.wait()


def _pid_if_ours(pidfile: Path, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", '. "$1"; pid_if_ours "$2" "$3"', "t", str(PIDFILE_SH), str(pidfile), name],
        capture_output=True,
        text=True,
    )


def test_a_pid_counts_only_when_its_process_has_the_services_name(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    pidfile = tmp_path / "x.pid"
    pidfile.write_text(f"{stranger.pid}\n")
    ours = _pid_if_ours(pidfile, "sleep")
    assert ours.returncode == 0 and ours.stdout.strip() == str(stranger.pid)
    assert _pid_if_ours(pidfile, "sshd").returncode == 1  # alive, but another program


@pytest.mark.parametrize(
    "content",
    ["", "0\n", "-1\n", "12abc\n", "1 2\n", "$(touch /tmp/x)\n", "4194305\n"],
    ids=["empty", "zero", "negative", "junk", "two", "command", "unused-number"],
)
def test_a_malformed_or_dead_pid_file_names_no_process(tmp_path: Path, content: str) -> None:
    pidfile = tmp_path / "x.pid"
    pidfile.write_text(content)
    proc = _pid_if_ours(pidfile, "sleep")
    assert proc.returncode == 1 and proc.stdout == ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(name: str, state: Path, port: int, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCENV_STATE": str(state), "HPCENV_SSHD_PORT": str(port), **extra}
    return subprocess.run(
        ["bash", str(SCRIPTS / name)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture
def sshd_state(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A state folder and a free port of this test's own; its sshd is stopped afterwards."""
    need_root("sshd-up.sh starts a real sshd as root")
    state, port = tmp_path / "state", _free_port()
    yield state, port
    _run("sshd-down.sh", state, port)


def _stale_sshd_pidfile(state: Path, pid: int) -> Path:
    """The pid file a dead sshd left in ``state``, its number now another process's."""
    (state / "sshd").mkdir(parents=True)
    pidfile = state / "sshd" / "sshd.pid"
    pidfile.write_text(f"{pid}\n")
    return pidfile


@pytest.mark.ssh
@pytest.mark.alongside
def test_sshd_up_replaces_a_stale_pid_file_and_never_signals_its_number(
    sshd_state: tuple[Path, int], stranger: subprocess.Popen[bytes]
) -> None:
    state, port = sshd_state
    pidfile = _stale_sshd_pidfile(state, stranger.pid)
    proc = _run("sshd-up.sh", state, port)
    assert proc.returncode == 0, proc.stderr
    assert stranger.poll() is None, "sshd-up.sh signalled a process that is not its sshd"
    pid = int(pidfile.read_text())
    assert pid != stranger.pid
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "sshd"
    down = _run("sshd-down.sh", state, port)
    assert down.returncode == 0 and f"stopped sshd ({pid})" in down.stdout
    assert not Path(f"/proc/{pid}").exists() and not pidfile.exists()


@pytest.mark.ssh
@pytest.mark.alongside
def test_sshd_down_leaves_a_stranger_named_by_a_stale_pid_file_alone(
    sshd_state: tuple[Path, int], stranger: subprocess.Popen[bytes]
) -> None:
    state, port = sshd_state
    pidfile = _stale_sshd_pidfile(state, stranger.pid)
    down = _run("sshd-down.sh", state, port)
    assert down.returncode == 0 and down.stdout == ""
    assert stranger.poll() is None and not pidfile.exists()


@pytest.mark.ssh
@pytest.mark.alongside
def test_sshd_up_says_why_when_its_port_is_taken(
    sshd_state: tuple[Path, int], tmp_path: Path
) -> None:
    state, port = sshd_state
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        proc = _run("sshd-up.sh", state, port)
    assert proc.returncode == 1
    assert f"sshd-up: sshd is not serving 127.0.0.1:{port}" in proc.stderr
    assert "Bind to port" in proc.stderr or "Cannot bind" in proc.stderr, proc.stderr


@pytest.mark.ssh
@pytest.mark.alongside
def test_sessions_get_the_callers_podman_storage_and_cache(sshd_state: tuple[Path, int]) -> None:
    """A fresh-machine run (scripts/fresh-setup-time.sh) sets both; what the tests run over SSH
    must use the same empty storage and cache, not the machine's warm ones."""
    state, port = sshd_state
    storage, cache = "/var/tmp/fresh/storage.conf", "/var/tmp/fresh/cache"
    up = _run("sshd-up.sh", state, port, CONTAINERS_STORAGE_CONF=storage, XDG_CACHE_HOME=cache)
    assert up.returncode == 0, up.stderr
    d = state / "sshd"
    session = subprocess.run(
        [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={d / 'known_hosts'}",
            "-o",
            "IdentitiesOnly=yes",
            "-i",
            str(d / "id_ed25519"),
            "-p",
            str(port),
            "root@127.0.0.1",
            "echo $CONTAINERS_STORAGE_CONF $XDG_CACHE_HOME",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert session.stdout.split() == [storage, cache], session.stderr


@pytest.mark.parametrize(
    "value",
    ["/a b", "/x\nPermitRootLogin yes", "relative/path", '/a"b'],
    ids=["space", "newline", "relative", "quote"],
)
def test_a_session_variable_that_is_not_a_plain_path_is_refused(
    sshd_state: tuple[Path, int], value: str
) -> None:
    state, port = sshd_state
    proc = _run("sshd-up.sh", state, port, XDG_CACHE_HOME=value)
    assert proc.returncode == 1
    assert "sshd-up: refusing XDG_CACHE_HOME=" in proc.stderr
    assert not (state / "sshd" / "sshd_config").exists()


def test_a_failing_step_is_named_not_silent(tmp_path: Path) -> None:
    """Any failure under ``set -e`` names its line (the trap), so a test never reports an empty
    message: here sshd-up.sh run as a user who is not root stops at its first check, and a state
    folder that is a file stops it at ``mkdir``."""
    need_root("the state folder check runs past the root check")
    state = tmp_path / "state"
    state.write_text("not a folder")
    proc = _run("sshd-up.sh", state, _free_port())
    assert proc.returncode != 0
    assert "sshd-up: failed (exit 1) at line" in proc.stderr and "mkdir" in proc.stderr


def test_the_stale_pid_rule_is_the_tests_rule_too(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    """tests/services.py decides whether a service was already up with the same rule."""
    from services import _alive

    pidfile = tmp_path / "sshd.pid"
    pidfile.write_text(f"{stranger.pid}\n")
    assert not _alive(pidfile)
    holder = tmp_path / "holder.pid"
    holder.write_text(f"{stranger.pid}\n")
    assert _alive(holder)
    stranger.send_signal(signal.SIGKILL)
    stranger.wait()
    assert not _alive(holder)
