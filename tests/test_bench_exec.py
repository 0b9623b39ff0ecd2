"""The bench's and tune's long-lived container runs each launch through the OCI runtime's own
``exec`` where it reaches the container (hpcenv.shells.runtime_exec), else ``podman exec``.

Unit tests fake podman and the runtime's ``state``; the real test starts a container of the
local image and checks that both ways run the command as the same user, in the same folder, with
the same capability sets and seccomp filter, pass the environment and keep the exit code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from requirements import need_image

import hpcenv.shells as shells

CID = "a" * 64


def _fake_runtime(tmp_path: Path, status: str, rc: int = 0) -> Path:
    exe = tmp_path / "runc"
    exe.write_text(f'#!/bin/sh\necho \'{{"id": "{CID}", "status": "{status}"}}\'\nexit {rc}\n')
    exe.chmod(0o755)
    return exe


def _with(monkeypatch: pytest.MonkeyPatch, inspect_out: str, runtime: Path | None) -> None:
    def fake_podman(*args: str, check: bool = True, timeout: float = 600) -> Any:
        return subprocess.CompletedProcess(args, 0, inspect_out, "")

    monkeypatch.setattr(shells, "podman", fake_podman)
    monkeypatch.setattr(shells.shutil, "which", lambda name: str(runtime) if runtime else None)


def test_a_running_runc_container_is_reached_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _fake_runtime(tmp_path, "running")
    _with(monkeypatch, f"{CID} runc\n", runtime)
    assert shells.runtime_exec("c") == (str(runtime), CID)


@pytest.mark.parametrize(
    ("inspect_out", "status", "rc"),
    [
        (f"{CID} kata\n", "running", 0),  # a runtime whose command line is not known
        (f"{CID} runc\n", "stopped", 0),  # not running
        (f"{CID} runc\n", "running", 1),  # another state root (rootless): `state` fails
        ("not-an-id runc\n", "running", 0),
        ("", "running", 0),
    ],
)
def test_otherwise_podman_exec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inspect_out: str, status: str, rc: int
) -> None:
    _with(monkeypatch, inspect_out, _fake_runtime(tmp_path, status, rc))
    assert shells.runtime_exec("c") is None


def test_no_runtime_on_path_means_podman_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    _with(monkeypatch, f"{CID} runc\n", None)
    assert shells.runtime_exec("c") is None


@pytest.mark.podman
@pytest.mark.alongside
def test_both_ways_run_the_same_process_spec() -> None:
    image = need_image("localhost/hpcenv/horovod-cpu:local", "the launches run in it")
    probe = "id; pwd; grep -E '^(Cap(Prm|Eff|Bnd)|Seccomp):' /proc/self/status; echo $X"
    with shells.Container(image) as ctr:
        assert ctr.direct is not None, "rootful podman with runc: the runtime's exec is reachable"
        assert Path(ctr.direct[0]).name == "runc"
        direct = ctr.run(probe, env={"X": "a b"}).require_ok()
        podman = ctr.run(probe, env={"X": "a b"}, via_podman=True).require_ok()
        assert direct.stdout == podman.stdout
        assert "uid=1000(hpc)" in direct.stdout and direct.stdout.endswith("a b\n")
        assert ctr.run("exit 3").returncode == 3
