"""One build of a recipe for a site at a time (hpcenv.build.build_lock): a second ``hpcenv build``
of the same waits for the first, says so, and builds nothing meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from hpcenv.paths import file_lock

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def test_a_second_holder_waits_and_is_told_once(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "x.lock"
    order: list[str] = []

    def second() -> None:
        with file_lock(lock, on_wait=lambda: order.append("waiting")):
            order.append("second holds it")

    with file_lock(lock, on_wait=lambda: order.append("first waited")):
        thread = threading.Thread(target=second)
        thread.start()
        deadline = time.monotonic() + 10
        while not order and time.monotonic() < deadline:
            time.sleep(0.01)
        order.append("first releases")
    thread.join(10)
    assert order == ["waiting", "first releases", "second holds it"]
    with file_lock(lock, on_wait=lambda: order.append("never")):  # free again: no wait
        pass
    assert "never" not in order


def test_a_second_build_of_the_same_waits_for_the_first(tmp_path: Path) -> None:
    """The installed command, as a process: with the build's lock held (as a first build holds
    it), ``hpcenv build`` names the lock and waits; it has started nothing (no log, no base)."""
    cache = tmp_path / "cache"
    lock = cache / "locks" / "build-local-horovod-cpu.lock"
    env = dict(os.environ, HPCENV_CACHE=str(cache))
    argv = [HPCENV, "build", "--site", "local", "--recipe", "horovod-cpu", "--format", "oci"]
    with file_lock(lock):
        proc = subprocess.Popen(
            argv,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            seen = ""
            deadline = time.monotonic() + 60
            assert proc.stderr is not None
            while "waiting for another" not in seen and time.monotonic() < deadline:
                line = proc.stderr.readline()
                if not line:
                    break
                seen += line
            assert "waiting for another hpcenv build of horovod-cpu for local" in seen, seen
            assert f"(lock {lock})\n" in seen, seen  # named whole, on its line
            time.sleep(1)
            assert proc.poll() is None  # still waiting
            assert not (cache / "logs").exists() and not (cache / "base").exists()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
