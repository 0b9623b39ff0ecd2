"""A cache on group-writable project storage (issue 40, classes 1-3): what another user puts
there never decides what a job runs, is never written through, and never runs.

README sends ``$HPCENV_CACHE`` to project storage, where folders are group-writable and the umask
is 002. Each test plants what a project member could: a file owned by another user (uid 1234,
made with ``os.chown``: these tests run as root, as CI does), a group-writable file, or a link
at a name hpcenv writes, pointing at a file in ``tmp_path`` that stands for the user's
``~/.bashrc``. The unit tests call the one place of each rule (:mod:`hpcenv.reads`,
:mod:`hpcenv.paths`, :func:`hpcenv.output.write_private`); the process tests run the installed
``hpcenv`` and expect exit 2 with one line naming the file.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcenv.build_inputs import read_stamp, write_stamp
from hpcenv.errors import ConfigError
from hpcenv.paths import file_lock, private_dir

HPCENV = Path(sys.executable).with_name("hpcenv")
OTHER = 1234  # another project member


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("os.chown to another user needs root")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "cache"
    monkeypatch.setenv("HPCENV_CACHE", str(path))
    old = os.umask(0o002)  # project storage's usual umask
    try:
        yield path
    finally:
        os.umask(old)


@pytest.fixture
def bashrc(tmp_path: Path) -> Path:
    """Stands for the user's ``~/.bashrc``: what a planted link points at."""
    path = tmp_path / "home" / ".bashrc"
    path.parent.mkdir()
    path.write_text("# mine\n")
    return path


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ) | env,
        timeout=120,
    )


def one_line(proc: subprocess.CompletedProcess[str], *, after: str = "") -> str:
    """The one line of a refusal (exit 2); ``after``: a line ``build`` prints first."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    if after:
        assert lines[0].startswith(after), proc.stderr
        lines = lines[1:]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- class 2: files at fixed names, folders, locks ------------------------------------------


def test_cache_folders_are_0700_under_umask_002(cache: Path) -> None:
    folder = private_dir(cache / "images")
    assert _mode(cache) == 0o700 and _mode(folder) == 0o700


def test_a_cache_folder_of_another_user_is_refused(cache: Path) -> None:
    _need_root()
    (cache / "images").mkdir(parents=True, mode=0o777)
    os.chown(cache / "images", OTHER, OTHER)
    with pytest.raises(ConfigError, match=r"^refusing folder .*/images: it belongs to "):
        private_dir(cache / "images")


def test_a_group_writable_folder_of_the_users_own_is_closed(cache: Path) -> None:
    (cache / "locks").mkdir(parents=True)
    (cache / "locks").chmod(0o775)
    private_dir(cache / "locks")
    assert _mode(cache / "locks") == 0o755


def test_the_stamp_is_never_written_through_a_link(cache: Path, bashrc: Path) -> None:
    stamp = private_dir(cache / "images") / "build-local-horovod-cpu.inputs"
    stamp.with_name(stamp.name + ".partial").symlink_to(bashrc)  # the old fixed name
    write_stamp(stamp, "f" * 64, "sha256:" + "b" * 64)
    assert bashrc.read_text() == "# mine\n"
    assert read_stamp(stamp) == ("f" * 64, "sha256:" + "b" * 64) and _mode(stamp) == 0o600
    stamp.unlink()
    stamp.symlink_to(bashrc)  # a link at the stamp itself is replaced, not written through
    write_stamp(stamp, "f" * 64, "sha256:" + "b" * 64)
    assert bashrc.read_text() == "# mine\n" and not stamp.is_symlink()


def test_a_stamp_not_the_users_own_costs_a_build(cache: Path) -> None:
    _need_root()
    stamp = private_dir(cache / "images") / "x.inputs"
    write_stamp(stamp, "f" * 64, "sha256:" + "b" * 64)
    os.chown(stamp, OTHER, OTHER)
    assert read_stamp(stamp) is None


def test_podmans_configuration_is_never_written_through_a_link(
    cache: Path, bashrc: Path, tmp_path: Path
) -> None:
    from hpcenv.hostconf import _write

    folder = private_dir(cache / "podman")
    conf = folder / "containers.conf"
    profile = tmp_path / "home" / ".profile"
    profile.write_text("# mine too\n")
    folder.joinpath(f".containers.conf.{os.getpid()}").symlink_to(bashrc)  # the old fixed name
    conf.symlink_to(profile)
    _write(conf, "[engine]\n")
    assert bashrc.read_text() == "# mine\n" and profile.read_text() == "# mine too\n"
    assert conf.read_text() == "[engine]\n" and not conf.is_symlink() and _mode(conf) == 0o600


def test_a_lock_never_creates_a_links_target(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "home" / ".bash_logout"
    lock = private_dir(cache / "locks") / "build-local-horovod-cpu.lock"
    lock.symlink_to(target)
    refused = pytest.raises(ConfigError, match=r"^refusing lock file .*: it is a symbolic link")
    with refused, file_lock(lock):
        pass
    assert not target.exists() and not target.parent.exists()


def test_a_lock_of_another_user_is_refused(cache: Path) -> None:
    _need_root()
    lock = private_dir(cache / "locks") / "x.lock"
    lock.touch()
    os.chown(lock, OTHER, OTHER)
    with (
        pytest.raises(ConfigError, match=r"^refusing lock file .*: it belongs to "),
        file_lock(lock),
    ):
        pass


def test_a_new_lock_is_0600(cache: Path) -> None:
    lock = cache / "locks" / "x.lock"
    with file_lock(lock):
        assert _mode(lock) == 0o600 and _mode(lock.parent) == 0o700


def test_process_planted_lock_link_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    """``open("a")`` created the link's target; now hpcenv build refuses before building."""
    cache = tmp_path / "cache"
    target = tmp_path / "home" / ".bashrc"
    lock = cache / "locks" / "build-local-horovod-cpu.lock"
    lock.parent.mkdir(parents=True, mode=0o700)
    lock.symlink_to(target)
    args = ("build", "--site", "local", "--recipe", "horovod-cpu", "--format", "oci")
    line = one_line(run(*args, env={"HPCENV_CACHE": str(cache)}), after="build horovod-cpu")
    assert line == (
        f"error: refusing lock file {lock}: it is a symbolic link (a lock never follows one); "
        "delete it"
    )
    assert not target.exists() and not (cache / "logs").exists()


def test_process_cache_folder_of_another_user_exits_2(tmp_path: Path) -> None:
    _need_root()
    cache = tmp_path / "cache"
    (cache / "locks").mkdir(parents=True, mode=0o777)
    os.chown(cache / "locks", OTHER, OTHER)
    args = ("build", "--site", "local", "--recipe", "horovod-cpu", "--format", "oci")
    line = one_line(run(*args, env={"HPCENV_CACHE": str(cache)}), after="build horovod-cpu")
    assert f"refusing folder {cache / 'locks'}: it belongs to " in line
