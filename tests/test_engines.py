"""Engine layer: registry, environment, build-output parsing (faked), and one real podman build."""

from __future__ import annotations

import io
import itertools
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from hpcenv import engines
from hpcenv.errors import BuildError, ConfigError, EnvironmentProblem

PODMAN_OK = """\
[1/2] STEP 1/3: FROM localhost/hpcenv-base:bookworm AS build
[1/2] STEP 2/3: RUN echo building
building
--> 1a2b3c
[1/2] STEP 3/3: RUN touch /x
--> Using cache 4d5e6f
[2/2] STEP 1/2: FROM localhost/hpcenv-base:bookworm
[2/2] STEP 2/2: COPY --from=build /x /x
[2/2] COMMIT localhost/t:1
Successfully tagged localhost/t:1
"""

PODMAN_FAIL = """\
STEP 1/3: FROM localhost/hpcenv-base:bookworm
STEP 2/3: RUN false
Error: building at STEP "RUN false": while running runtime: exit status 1
"""


class FakePopen:
    """Stands in for subprocess.Popen: replays canned output and an exit code."""

    calls: list[list[str]] = []

    def __init__(self, output: str, rc: int):
        self.stdout = io.StringIO(output)
        self._rc = rc

    @classmethod
    def factory(cls, output: str, rc: int = 0):
        def make(argv, **kwargs):
            cls.calls.append(list(argv))
            assert kwargs["env"] == engines.engine_env()
            return cls(output, rc)

        return make

    def wait(self) -> int:
        return self._rc

    def kill(self) -> None:
        pass


def fake_clock(step: float = 2.0):
    counter = itertools.count()
    return lambda: next(counter) * step


def test_engine_env_adds_only_what_the_host_needs(monkeypatch):
    from hpcenv import hostconf

    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    monkeypatch.delenv("CONTAINERS_CONF_OVERRIDE", raising=False)
    env = engines.engine_env()
    added = {k: v for k, v in env.items() if k.startswith("CONTAINERS_CONF")}
    assert added == hostconf.podman_conf().env
    monkeypatch.setenv(hostconf.MODE_ENV, "never")
    assert not {k for k in engines.engine_env() if k.startswith("CONTAINERS_CONF")}
    assert 'runtime = "runc"' in engines.containers_conf_path().read_text()  # the reference file


def test_registry_by_name_and_unknown_name():
    assert engines.engine_names() == ["buildah", "docker", "podman", "podman-hpc"]
    assert isinstance(engines.get_engine(), engines.PodmanEngine)
    assert isinstance(engines.get_engine("buildah"), engines.BuildahEngine)
    with pytest.raises(ConfigError, match="buildah, docker, podman, podman-hpc"):
        engines.get_engine("rkt")


def test_tracker_numbers_steps_across_stages():
    seen: list[tuple[int, int, str, float | None]] = []
    tracker = engines.StepTracker(on_step=lambda *a: seen.append(a), clock=fake_clock())
    for line in PODMAN_OK.splitlines():
        tracker.feed(line)
    tracker.finish()
    assert [(i, n) for i, n, _, _ in seen] == [(1, 3), (2, 3), (3, 3), (4, 5), (5, 5)]
    assert seen[0][3] is None and seen[1][3] == 2.0
    assert seen[4][2] == "COPY --from=build /x /x"
    assert [s.index for s in tracker.steps] == [1, 2, 3, 4, 5]
    assert all(s.seconds == 2.0 for s in tracker.steps)


def test_a_step_is_named_by_its_command_not_its_mount_flags():
    seen: list[str] = []
    tracker = engines.StepTracker(on_step=lambda _i, _n, t, _s: seen.append(t))
    tracker.feed(
        "[1/2] STEP 12/13: RUN --mount=type=cache,id=hpcenv-ccache,target=/var/cache/hpcenv-ccache "
        "--mount=type=secret,id=hpcenv-pip.conf,target=/run/secrets/x /opt/venv/bin/pip install a"
    )
    tracker.feed("[1/2] STEP 13/13: RUN --mount-less-flag true")
    assert seen == ["RUN /opt/venv/bin/pip install a", "RUN --mount-less-flag true"]


def test_tracker_reads_docker_legacy_and_buildkit_output():
    seen: list[tuple[int, int, str]] = []
    tracker = engines.StepTracker(on_step=lambda i, n, t, _s: seen.append((i, n, t)))
    for line in [
        "Step 1/2 : FROM debian:bookworm",
        "Step 2/2 : RUN true",
    ]:
        tracker.feed(line)
    assert seen == [(1, 2, "FROM debian:bookworm"), (2, 2, "RUN true")]
    seen.clear()
    tracker = engines.StepTracker(on_step=lambda i, n, t, _s: seen.append((i, n, t)))
    for line in [
        "#4 [build 1/3] FROM docker.io/library/debian:bookworm",
        "#5 [build 2/3] RUN apt-get update",
        "#5 0.412 Get:1 http://deb.debian.org/debian bookworm InRelease",
        "#5 [build 2/3] RUN apt-get update",
        "#5 DONE 3.1s",
    ]:
        tracker.feed(line)
    assert seen == [
        (1, 3, "FROM docker.io/library/debian:bookworm"),
        (2, 3, "RUN apt-get update"),
    ]


def test_build_streams_full_log_and_reports_steps(monkeypatch, tmp_path):
    FakePopen.calls.clear()
    monkeypatch.setattr(engines.subprocess, "Popen", FakePopen.factory(PODMAN_OK))
    monkeypatch.setattr(engines.PodmanEngine, "_run_root", lambda self: tmp_path)
    log = tmp_path / "logs" / "build.log"
    seen: list[int] = []
    result = engines.PodmanEngine().build(
        tmp_path,
        tmp_path / "Dockerfile",
        "localhost/t:1",
        log_path=log,
        build_args={"SUITE": "bookworm"},
        volumes=["/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro"],
        on_step=lambda i, n, t, s: seen.append(i),
    )
    argv = FakePopen.calls[-1]
    assert argv[:3] == ["podman", "build", "--layers"]
    assert argv[argv.index("--build-arg") :][:2] == ["--build-arg", "SUITE=bookworm"]
    assert "-v" in argv and argv[-1] == str(tmp_path)
    assert seen == [1, 2, 3, 4, 5]
    assert len(result.steps) == 5 and result.tag == "localhost/t:1"
    text = log.read_text()
    assert text.startswith("$ podman build")
    assert PODMAN_OK in text


def test_build_failure_names_step_and_log(monkeypatch, tmp_path):
    monkeypatch.setattr(engines.subprocess, "Popen", FakePopen.factory(PODMAN_FAIL, rc=1))
    monkeypatch.setattr(engines.PodmanEngine, "_run_root", lambda self: tmp_path)
    log = tmp_path / "fail.log"
    with pytest.raises(BuildError) as info:
        engines.PodmanEngine().build(tmp_path, tmp_path / "Dockerfile", "t", log_path=log)
    err = info.value
    assert err.step == "RUN false"
    assert err.log_path == log
    assert str(log) in str(err) and "exit status 1" in str(err)
    assert "Error: building at STEP" in log.read_text()


def _until_told(told: list[object], seconds: float = 10) -> None:
    """Wait (up to ``seconds``) for a waiting build or import to report the lock it waits on."""
    deadline = time.monotonic() + seconds
    while not told and time.monotonic() < deadline:
        time.sleep(0.01)


def test_builds_into_one_storage_take_turns(monkeypatch, tmp_path):
    """A second build into the same storage waits for the lock in its run root, says so once,
    and starts its engine only once the first is done (buildah #5674: concurrent builds race)."""
    import threading
    import time

    from hpcenv.paths import file_lock

    started: list[float] = []

    def popen(argv, **kwargs):
        started.append(time.monotonic())
        return FakePopen(PODMAN_OK, 0)

    monkeypatch.setattr(engines.subprocess, "Popen", popen)
    monkeypatch.setattr(engines.PodmanEngine, "_run_root", lambda self: tmp_path)
    engine = engines.PodmanEngine()
    lock = tmp_path / engines.STORAGE_LOCK_NAME
    assert engine.storage_lock_path() == lock
    told: list[object] = []
    with file_lock(lock):  # as a first build holds it
        build = threading.Thread(
            target=engine.build,
            args=(tmp_path, tmp_path / "Dockerfile", "localhost/t:2"),
            kwargs={"log_path": tmp_path / "b.log", "on_wait": told.append},
        )
        build.start()
        _until_told(told)
        time.sleep(0.3)
        released = time.monotonic()
        assert told == [lock] and started == []  # waiting, and no engine started
    build.join(10)
    assert len(started) == 1 and started[0] >= released


def test_a_base_import_that_waits_for_the_storage_says_so(monkeypatch, tmp_path):
    """hpcenv build's base image import takes the same storage lock as its build, and the
    caller hears of the wait (its one line) instead of a silent spinner."""
    from hpcenv.baseimage import BASE_CHANGES, ensure_base_image
    from hpcenv.paths import file_lock

    calls: list[list[str]] = []

    def run(self, *args, **kwargs):
        import subprocess

        calls.append(list(args))
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(engines.PodmanEngine, "_run_root", lambda self: tmp_path)
    monkeypatch.setattr(engines.PodmanEngine, "image_exists", lambda self, tag: False)
    monkeypatch.setattr(engines.PodmanEngine, "_cmd", run)
    tarball = tmp_path / "cache" / "base" / "bookworm-minbase.tar"
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(b"")  # a cached rootfs: only the import is left to do
    told: list[Path] = []
    lock = tmp_path / engines.STORAGE_LOCK_NAME
    with file_lock(lock):  # as another build holds it
        importing = threading.Thread(
            target=ensure_base_image,
            kwargs={
                "tag": "localhost/b:1",
                "engine": engines.PodmanEngine(),
                "on_wait": told.append,
            },
        )
        importing.start()
        _until_told(told)
        assert told == [lock] and calls == []  # waiting, nothing imported yet
    importing.join(10)
    assert [c[0] for c in calls] == ["import"] and calls[0][1:3] == ["--change", BASE_CHANGES[0]]


@pytest.mark.parametrize(
    ("stdout", "rc", "expected"),
    [
        ("/run/containers/storage\n", 0, "/run/containers/storage"),
        ("/run/user/1000/containers\n", 0, "/run/user/1000/containers"),
        ("relative/run\n", 0, None),
        ("/run/a\n/etc\n", 0, None),
        ("", 0, None),
        ("/run/containers/storage\n", 125, None),
    ],
)
def test_only_one_absolute_run_root_is_used(stdout, rc, expected):
    import subprocess

    proc = subprocess.CompletedProcess(["podman", "info"], rc, stdout, "")
    got = engines._reported_dir(proc)
    assert (None if got is None else str(got)) == expected


def test_a_run_root_that_is_not_this_users_folder_locks_nothing(monkeypatch, tmp_path):
    """A remote podman reports the server's run root: missing here, or another user's."""
    import os

    missing = tmp_path / "missing"
    monkeypatch.setattr(engines.PodmanEngine, "_run_root", lambda self: missing)
    assert engines.PodmanEngine().storage_lock_path() is None
    with engines.PodmanEngine().storage_lock():  # builds as before, unlocked
        assert not missing.exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    if os.getuid() == 0:
        os.chown(theirs, 12345, 12345)
        monkeypatch.setattr(engines.PodmanEngine, "_run_root", lambda self: theirs)
        assert engines.PodmanEngine().storage_lock_path() is None


def test_docker_locks_nothing_of_its_own():
    assert engines.DockerEngine().storage_lock_path() is None


def test_missing_binary_is_an_environment_problem(tmp_path):
    engine = engines.PodmanEngine(binary=str(tmp_path / "no-such-podman"))
    ok, why = engine.available()
    assert not ok and "hpcenv doctor" in why
    with pytest.raises(EnvironmentProblem, match="hpcenv doctor"):
        engine.build(tmp_path, tmp_path / "Dockerfile", "t", log_path=tmp_path / "l.log")


def test_docker_refuses_build_volumes_and_oci_archives(tmp_path):
    docker = engines.DockerEngine()
    with pytest.raises(ConfigError, match="bind-mount"):
        docker.build(tmp_path, tmp_path / "D", "t", log_path=tmp_path / "l", volumes=["/a:/b"])
    with pytest.raises(ConfigError, match="docker-archive"):
        docker.save("t", tmp_path / "t.tar", fmt="oci-archive")


@pytest.mark.podman
def test_real_build_runs_its_steps_in_the_dockerfiles_shell(tmp_path):
    """Every hpcenv Dockerfile sets SHELL bash -o pipefail: podman's default OCI format would
    run the steps under /bin/sh without pipefail (buildah #2741), so a failed download piped
    into tar or gpg would pass its step. hpcenv builds the Docker format: the step fails."""
    from hpcenv.baseimage import ensure_base_image

    podman = engines.get_engine("podman")
    ok, why = podman.available()
    assert ok, why
    base = ensure_base_image(engine=podman)
    marker = uuid.uuid4().hex[:8]
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\n"
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
        f'RUN echo "{marker} shell $0 options $SHELLOPTS"\n'
        "RUN false | true\n"
    )
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as info:
        podman.build(
            tmp_path, tmp_path / "Dockerfile", f"localhost/hpcenv-test-shell:{marker}", log_path=log
        )
    assert "false | true" in str(info.value)
    said = next(line for line in log.read_text().splitlines() if line.startswith(marker))
    assert said.startswith(f"{marker} shell /bin/bash options ") and "pipefail" in said


def test_podman_and_buildah_build_the_docker_format():
    for engine in (engines.PodmanEngine(), engines.BuildahEngine()):
        argv = engine.build_argv("/ctx", "/ctx/Dockerfile", "t")
        assert argv[1:5] == ["build", "--layers", "--format", "docker"]
    assert engines.DockerEngine().build_argv("/c", "/c/D", "t")[1:3] == [
        "build",
        "--progress=plain",
    ]


@pytest.mark.podman
def test_real_podman_build_from_base_image(tmp_path):
    from hpcenv.baseimage import ensure_base_image
    from hpcenv.paths import file_lock

    podman = engines.get_engine("podman")
    ok, why = podman.available()
    assert ok, why
    base = ensure_base_image(engine=podman)
    marker = uuid.uuid4().hex[:8]
    tag = f"localhost/hpcenv-test-engines:{marker}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\n"
        f"LABEL org.hpcenv.test={marker}\n"
        "ARG GREETING=hi\n"
        f'RUN echo "$GREETING {marker}" > /greeting && cat /greeting\n'
        "RUN test -s /greeting\n"
    )
    seen: list[tuple[int, int, str]] = []
    name = f"hpcenv-test-{marker}"
    try:
        result = podman.build(
            tmp_path,
            tmp_path / "Dockerfile",
            tag,
            log_path=tmp_path / "build.log",
            build_args={"GREETING": "hello"},
            on_step=lambda i, n, t, s: seen.append((i, n, t)),
        )
        assert [i for i, _, _ in seen] == [1, 2, 3, 4, 5]
        assert seen[0][2].startswith("FROM localhost/hpcenv-base")
        assert f"hello {marker}" in result.log_path.read_text()
        assert podman.image_exists(tag)
        assert podman.labels(tag)["org.hpcenv.test"] == marker
        assert podman.image_size(tag) > 50_000_000

        again = podman.build(
            tmp_path,
            tmp_path / "Dockerfile",
            tag,
            log_path=tmp_path / "b2.log",
            build_args={"GREETING": "hello"},
        )
        assert "Using cache" in again.log_path.read_text()

        archive = podman.save(tag, tmp_path / "img.tar")
        with tarfile.open(archive) as tar:
            assert "index.json" in tar.getnames()

        # Builds into this storage take turns: with its lock held, a build waits, then runs.
        lock = podman.storage_lock_path()
        info = podman._cmd("info", "--format", "{{.Store.RunRoot}}").stdout.strip()
        assert lock is not None and lock.parent == Path(info) and lock.parent.is_dir()
        told: list[Path] = []
        hold = 3.0
        with file_lock(lock):
            waiting = threading.Thread(
                target=podman.build,
                args=(tmp_path, tmp_path / "Dockerfile", tag),
                kwargs={
                    "log_path": tmp_path / "b3.log",
                    "build_args": {"GREETING": "hello"},
                    "on_wait": told.append,
                },
            )
            began = time.monotonic()
            waiting.start()
            time.sleep(hold)
            assert not (tmp_path / "b3.log").exists()  # nothing ran while the lock was held
        waiting.join(300)
        assert told == [lock] and time.monotonic() - began >= hold
        assert "Using cache" in (tmp_path / "b3.log").read_text()

        podman.run_detached(tag, name, env={"X": "1"}, user="nobody")
        out = podman._cmd("exec", name, "sh", "-c", "id -un; cat /greeting; echo $X").stdout
        assert out.split() == ["nobody", "hello", marker, "1"]
    finally:
        podman.remove_container(name)
        podman.remove_image(tag)
    podman.remove_container(name)  # a second removal is not an error
    assert not podman.image_exists(tag)
