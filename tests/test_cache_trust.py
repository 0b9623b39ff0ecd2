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

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcenv import naming
from hpcenv.build_inputs import read_stamp, write_stamp
from hpcenv.envpolicy import EnvNotAllowed
from hpcenv.errors import ConfigError
from hpcenv.image_records import read_record, write_record
from hpcenv.jobs.submit import check_record
from hpcenv.paths import file_lock, private_dir
from hpcenv.reads import NotYours
from hpcenv.tuning.model import Layout
from hpcenv.tuning.store import in_force, load

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


# -- class 1: image records ------------------------------------------------------------------


def _image_record(site: str = "frontier", recipe: str = "horovod-cpu") -> dict[str, Any]:
    return {
        "site": site,
        "recipe": recipe,
        "host": "login1.frontier.olcf.ornl.gov",
        "folder": ".hpcenv-build/x",
        "tag": naming.image_tag(recipe=recipe, site=site),
        "image": "/lustre/orion/stf007/scratch/u/hpcenv/images/horovod-cpu-frontier.sif",
        "image_id": "a" * 64,
        "builder": "apptainer",
        "built_at": "2026-11-28T00:00:00+00:00",
        "log": "/c/logs/x.log",
    }


def test_an_image_record_this_user_wrote_is_read(cache: Path) -> None:
    path = write_record("frontier", "horovod-cpu", _image_record())
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700  # whatever the umask
    assert read_record("frontier", "horovod-cpu") == _image_record()
    assert read_record("frontier", "torch-cpu") is None  # none: the default image applies


@pytest.mark.parametrize("how", ["other-owner", "group-writable", "link", "fifo"])
def test_an_image_record_not_the_users_own_is_refused(cache: Path, how: str) -> None:
    path = write_record("frontier", "horovod-cpu", _image_record())
    if how == "other-owner":
        _need_root()
        os.chown(path, OTHER, OTHER)
    elif how == "group-writable":
        path.chmod(0o664)
    elif how == "link":
        mine = path.with_name("mine.json")
        path.rename(mine)
        path.symlink_to(mine)
    else:
        path.unlink()
        os.mkfifo(path)
    with pytest.raises(NotYours) as err:
        read_record("frontier", "horovod-cpu")
    text = str(err.value)
    assert text.startswith(f"refusing image record {path}: ") and "\n" not in text


@pytest.mark.parametrize(
    "over",
    [
        {"site": "local"},
        {"recipe": "torch-cpu"},
        {"tag": "localhost/evil:latest"},
        {"image": "-v /:/host evil"},
        {"image": 5},
        {"extra": "x"},
    ],
)
def test_an_image_record_not_from_this_sites_build_is_refused(
    cache: Path, over: dict[str, Any]
) -> None:
    write_record("frontier", "horovod-cpu", _image_record() | over)
    with pytest.raises(ConfigError, match="^refusing image record .*--on-login"):
        read_record("frontier", "horovod-cpu")


def test_process_image_record_of_another_user_exits_2(tmp_path: Path) -> None:
    """submit would have run the image another project member recorded."""
    _need_root()
    cache = tmp_path / "cache"
    path = cache / "images" / "generic-slurm-horovod-cpu.json"
    path.parent.mkdir(parents=True)
    record = _image_record("generic-slurm") | {"image": "/tmp/theirs.sif"}
    path.write_text(json.dumps(record))
    os.chown(path, OTHER, OTHER)
    args = ("submit", "--site", "generic-slurm", "-r", "horovod-cpu", "--dry-run")
    proc = run(*args, "--", "true", env={"HPCENV_CACHE": str(cache)})
    line = one_line(proc)
    assert line.startswith(f"error: refusing image record {path}: it belongs to "), line
    assert f"uid {OTHER}" in line and "theirs.sif" not in proc.stdout
    os.chown(path, 0, 0)
    path.chmod(0o600)
    ok = run(*args, "--", "true", env={"HPCENV_CACHE": str(cache)})
    assert ok.returncode == 0, ok.stderr
    assert "/tmp/theirs.sif" in ok.stdout  # the user's own record: used


# -- class 1: tuning files -------------------------------------------------------------------


LAYOUT = Layout(nodes=1, ranks_per_node=2, cores_per_rank=1)


def _tuning(tmp_path: Path, env: dict[str, str]) -> Path:
    path = tmp_path / "tuning" / "local" / f"{LAYOUT.key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "site": "local",
        "image": "localhost/hpcenv/horovod-cpu:local",
        "image_id": "a" * 64,
        "layout": LAYOUT.model_dump(),
        "mpi": "openmpi",
        "date": "2026-11-28T00:00:00+00:00",
        "env": env,
    }
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    "env",
    [
        {"HOROVOD_TIMELINE": ".bashrc"},
        {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.66"},
        {"OMPI_MCA_plm": "rsh"},
    ],
)
def test_a_tuning_file_may_set_only_what_tune_measure_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """Values that fit the value pattern, names no deny-list word caught: refused, not applied
    and shown as "measured"."""
    monkeypatch.setenv("HPCENV_TUNING_DIR", str(tmp_path / "tuning"))
    path = _tuning(tmp_path, env)
    with pytest.raises(EnvNotAllowed, match=f"may not set {next(iter(env))}: not a variable"):
        in_force("local", LAYOUT, "x", "a" * 64)
    path.write_text(path.read_text().replace(next(iter(env)), "OMPI_MCA_pml_ucx_tls"))
    assert in_force("local", LAYOUT, "x", "a" * 64).tuning is not None


@pytest.mark.parametrize("how", ["other-owner", "group-writable"])
def test_a_tuning_file_not_the_users_own_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("HPCENV_TUNING_DIR", str(tmp_path / "tuning"))
    path = _tuning(tmp_path, {"OMPI_MCA_btl_vader_eager_limit": "32768"})
    if how == "other-owner":
        _need_root()
        os.chown(path, OTHER, OTHER)
    else:
        path.chmod(0o666)
    with pytest.raises(NotYours, match=f"^refusing tuning file {path}: "):
        in_force("local", LAYOUT, "x", "a" * 64)  # refused, not "ignored"
    with pytest.raises(NotYours):
        load(path)


def test_process_planted_tuning_file_exits_2(tmp_path: Path) -> None:
    from hpcenv.jobs.placement import place
    from hpcenv.site import load_site
    from hpcenv.tuning.apply import layout_of

    layout = layout_of(place(load_site("generic-slurm"), 1, None))
    path = tmp_path / "tuning" / "generic-slurm" / f"{layout.key}.json"
    path.parent.mkdir(parents=True)
    doc = {
        "site": "generic-slurm",
        "image": "/tmp/x.sif",
        "image_id": "a" * 64,
        "layout": layout.model_dump(),
        "mpi": "openmpi",
        "date": "2026-11-28T00:00:00+00:00",
        "env": {"HOROVOD_TIMELINE": ".bashrc"},
    }
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    env = {"HPCENV_TUNING_DIR": str(tmp_path / "tuning"), "HPCENV_CACHE": str(tmp_path / "c")}
    args = ("submit", "--site", "generic-slurm", "--image", "/tmp/x.sif", "--dry-run", "--", "true")
    line = one_line(run(*args, env=env))
    assert str(path) in line and "HOROVOD_TIMELINE" in line


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


# -- class 3: a job record's ssh_config ------------------------------------------------------


def _ssh_record(config: str) -> dict[str, Any]:
    return {
        "job_id": "123",
        "name": "train",
        "site": "local",
        "scheduler": "slurm",
        "workdir": "/scratch/u/hpcenv-jobs",
        "transport": {"kind": "ssh", "host": "login1", "ssh_config": config},
        "log_names": ["train-%j.out", "train-%j.err"],
        "script_path": "/home/u/.cache/hpcenv/jobs/ssh-login1-123.sh",
        "array": None,
    }


def _ssh_config(tmp_path: Path, marker: Path) -> Path:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  ProxyCommand touch {marker}\n  LocalCommand touch {marker}\n")
    config.chmod(0o644)
    return config


def test_a_records_ssh_config_must_be_the_users_or_roots_and_closed(tmp_path: Path) -> None:
    config = _ssh_config(tmp_path, tmp_path / "PWNED")
    assert check_record(_ssh_record(str(config))).transport.ssh_config == str(config)
    assert check_record(_ssh_record("/dev/null")).transport.ssh_config == "/dev/null"
    config.chmod(0o664)
    with pytest.raises(ConfigError, match=r"^transport\.ssh_config: .*others may write it"):
        check_record(_ssh_record(str(config)))
    config.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(config, OTHER, OTHER)
        with pytest.raises(ConfigError, match=rf"^transport\.ssh_config: .*uid {OTHER}"):
            check_record(_ssh_record(str(config)))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        check_record(_ssh_record(str(fifo)))


def test_process_status_refuses_a_planted_ssh_config_and_runs_nothing(tmp_path: Path) -> None:
    _need_root()
    marker = tmp_path / "PWNED"
    config = _ssh_config(tmp_path, marker)
    os.chown(config, OTHER, OTHER)
    jobs = tmp_path / "cache" / "jobs"
    jobs.mkdir(parents=True, mode=0o700)
    record = jobs / "ssh-login1-123.json"
    record.write_text(json.dumps(_ssh_record(str(config))))
    record.chmod(0o600)
    env = {"HPCENV_CACHE": str(tmp_path / "cache")}
    for command in (["status", "123"], ["logs", "123"], ["cancel", "123"]):
        line = one_line(run(*command, env=env))
        assert "transport.ssh_config" in line and str(config) in line and "refused" in line
    listing = run("status", env=env)  # the listing shows the refusal, runs nothing
    assert "transport.ssh_config" in listing.stdout + listing.stderr
    assert not marker.exists()


def test_a_job_record_not_the_users_own_is_refused(tmp_path: Path) -> None:
    from hpcenv.jobs.submit import _read_record

    record = tmp_path / "ssh-login1-123.json"
    record.write_text(json.dumps(_ssh_record("/dev/null")))
    record.chmod(0o600)
    assert _read_record(record).job_id == "123"
    record.chmod(0o620)
    with pytest.raises(NotYours, match=r"^refusing a job record .*: others may write it"):
        _read_record(record)
