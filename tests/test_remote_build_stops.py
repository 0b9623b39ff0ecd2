"""``build --on-login`` when the build on the login node stops without an exit status (killed),
with the login node faked by a transport that answers each command from a script of states:
the loopback sshd runs the same paths for real in tests/test_remote_build.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcenv.build import make_plans
from hpcenv.errors import JobError
from hpcenv.jobs.transport import Completed, Transport, TransportSpec
from hpcenv.remote_build import RemoteBuild
from hpcenv.site import load_site

ROOT = "/home/u/.hpcenv/remote-builds/x"


class LoginNode(Transport):
    """Answers: the folder and the state at the start of each attempt (``states``), then the
    state each time the build is followed (``follows``); records what was started."""

    def __init__(self, states: list[str], follows: list[str]) -> None:
        self.spec = TransportSpec(kind="ssh", host="login1")
        self.states, self.follows, self.started = states, follows, 0

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        if "mkdir -p" in command:
            return Completed(0, f"{ROOT}\n{self.states.pop(0)}\n", "")
        if "setsid nohup" in command:
            self.started += 1
        if "sh -s -- " in command:
            return Completed(0, f"{self.follows.pop(0)}\nSTEP 1/1: RUN true\n", "")
        if "cat image.id image.ref" in command:
            return Completed(0, "sha256:0123\nlocalhost/hpcenv/mpi4py-os:local\n", "")
        return Completed(0, "", "")

    def close(self) -> None:
        pass


@pytest.fixture
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    site = load_site("local")  # without its wheelhouse (a 183 MB torch wheel): a small context
    site = site.model_copy(update={"build": site.build.model_copy(update={"pip_find_links": []})})
    (plan,) = make_plans(site, ["mpi4py-os"], {}, tmp_path / "ctx")
    notes: list[str] = []

    def make(node: LoginNode) -> RemoteBuild:
        return RemoteBuild(plan, node, "oci", note=notes.append, interval=0)

    make.notes = notes  # type: ignore[attr-defined]
    return make


def test_its_own_build_that_stops_says_so_and_is_not_started_again(build) -> None:
    node = LoginNode(["new"], ["stopped"])
    with pytest.raises(JobError, match=r"stopped without finishing \(killed\?\).*run the same"):
        build(node).run()
    assert node.started == 1


def test_a_followed_build_that_stops_is_started_again_once(build) -> None:
    node = LoginNode(["running 42", "stopped"], ["stopped", "done 0"])
    result = build(node).run()
    assert node.started == 1 and result.image == "localhost/hpcenv/mpi4py-os:local"
    assert any("starting it again" in n for n in build.notes)


def test_followed_twice_and_stopped_twice_is_an_error_not_a_loop(build) -> None:
    node = LoginNode(["running 42", "running 43"], ["stopped", "stopped"])
    with pytest.raises(JobError, match=r"stopped without finishing"):
        build(node).run()
    assert node.started == 0 and not node.states and not node.follows
