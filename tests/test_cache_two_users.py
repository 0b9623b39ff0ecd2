"""A cache on project storage, with two real Unix users (issue 40, classes 1-3: "two real Unix
users where another user is involved").

``hpcenv-ua`` and ``hpcenv-ub`` (tests/two_users.py) share the project group of a folder that is
``root:hpcenv-proj`` 2775, as a site's project storage is, and both work with umask 002. Each
runs the installed ``hpcenv`` as a process, as that user. What one member makes there must never
decide what the other's job runs, be written through by the other's hpcenv, or run as the other;
the other's hpcenv refuses with one line naming the file and its owner, exit 2.
(tests/test_cache_trust.py covers each rule with files ``os.chown``-ed to a made-up uid.)
"""

from __future__ import annotations

import grp
import json
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from requirements import need_root, need_tool
from test_cache_trust import one_line
from two_users import PROJECT_GROUP, A, B, as_user, expose_prefix, make_user, sh

from hpcenv import naming

HPCENV = Path(sys.executable).with_name("hpcenv")
SUBMIT = ("submit", "--site", "generic-slurm", "-r", "horovod-cpu", "--dry-run", "--", "true")


@dataclass
class Project:
    folder: Path  # root:hpcenv-proj 2775, like /project/<id>
    prefix: list[str]  # the mount namespace that lets the users run this venv

    def hpcenv(self, user: str, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(HPCENV), *args]
        argv = as_user(user, self.prefix, *command, umask="002", HPCENV_CACHE=str(cache))
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def sh(self, user: str, script: str) -> subprocess.CompletedProcess[str]:
        return sh(user, script, umask="002")


@pytest.fixture
def project() -> Iterator[Project]:
    need_root("the test makes two Unix users and runs hpcenv as each")
    for tool in ("runuser", "useradd", "groupadd", "usermod"):
        need_tool(tool, why="two-user tests")
    make_user(A), make_user(B)
    tmp = Path(tempfile.mkdtemp(prefix="hpcenv-project-", dir="/tmp"))
    try:
        tmp.chmod(0o755)
        folder = tmp / "project"
        folder.mkdir()
        shutil.chown(folder, "root", PROJECT_GROUP)
        folder.chmod(0o2775)
        yield Project(folder, expose_prefix(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


def test_a_cache_one_member_made_is_theirs_alone(project: Project) -> None:
    """A's cache on project storage is 0700 whatever the umask; B can neither look in nor plant
    anything there, and B's hpcenv pointed at it says whose it is."""
    cache = project.folder / "cache"
    ok = project.hpcenv(A, *SUBMIT, cache=cache)
    assert ok.returncode == 0, ok.stderr
    info = cache.stat()
    assert info.st_uid == _uid(A) and stat.S_IMODE(info.st_mode) & 0o077 == 0, oct(info.st_mode)
    assert project.sh(B, f"ls {cache}").returncode != 0
    assert project.sh(B, f"mkdir {cache}/images").returncode != 0
    line = one_line(project.hpcenv(B, *SUBMIT, cache=cache))
    assert line.startswith(f"error: cache folder {cache} is not writable (it belongs to {A} ")
    assert "a folder of yours" in line


def test_an_image_record_a_member_planted_never_reaches_the_job(project: Project) -> None:
    """B makes the shared cache first and records their image for A's site and recipe (what an
    ``--on-login`` build writes); A's submit refuses it instead of running B's image."""
    cache = project.folder / "cache"
    record = {
        "site": "generic-slurm",
        "recipe": "horovod-cpu",
        "host": "login1",
        "folder": ".hpcenv-build/x",
        "tag": naming.image_tag(recipe="horovod-cpu", site="generic-slurm"),
        "image": "/tmp/theirs.sif",
        "image_id": "a" * 64,
        "builder": "apptainer",
        "built_at": "2026-11-28T00:00:00+00:00",
        "log": "/c/logs/x.log",
    }
    text = json.dumps(record).replace('"', '\\"')
    planted = project.sh(
        B,
        f'mkdir -p {cache}/images && chmod 2775 {cache} {cache}/images && echo "{text}" > '
        f"{cache}/images/generic-slurm-horovod-cpu.json",
    )
    assert planted.returncode == 0, planted.stderr
    proc = project.hpcenv(A, *SUBMIT, cache=cache)
    line = one_line(proc)
    record_path = cache / "images" / "generic-slurm-horovod-cpu.json"
    assert line.startswith(f"error: refusing image record {record_path}: it belongs to {B} "), line
    assert "theirs.sif" not in proc.stdout
    # B's own submit reads B's own record (group-writable: B is told to close it first)
    own = project.hpcenv(B, *SUBMIT, cache=cache)
    assert own.returncode == 2 and "others may write it" in own.stderr, own.stderr
    assert project.sh(B, f"chmod 0600 {cache}/images/*.json").returncode == 0
    own = project.hpcenv(B, *SUBMIT, cache=cache)
    assert own.returncode == 0 and "/tmp/theirs.sif" in own.stdout, own.stderr


def test_a_lock_link_a_member_planted_is_not_followed(project: Project) -> None:
    """B plants a link at the lock A's build opens, pointing at a file of A's (their
    ``~/.bashrc``): A's build refuses and the file is untouched."""
    cache = project.folder / "cache"
    bashrc = project.folder / "a-bashrc"
    assert project.sh(A, f"echo '# mine' > {bashrc} && chmod 0644 {bashrc}").returncode == 0
    plant = f"mkdir -p -m 2777 {cache}/locks && ln -s {bashrc} {cache}/locks/x.lock"
    assert project.sh(B, plant).returncode == 0
    args = ("build", "--site", "local", "--recipe", "horovod-cpu", "--format", "oci")
    proc = project.hpcenv(A, *args, cache=cache)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"refusing folder {cache}/locks: it belongs to {B} " in proc.stderr
    assert bashrc.read_text() == "# mine\n"


def test_a_job_record_a_member_planted_runs_nothing(project: Project) -> None:
    """B puts a job record in a jobs folder of theirs in A's cache path, whose SSH config runs a
    command; A's ``status``, ``logs`` and ``cancel`` refuse it and nothing runs."""
    cache = project.folder / "cache"
    marker = project.folder / "PWNED"
    config = project.folder / "b-ssh-config"
    record = {
        "job_id": "123",
        "name": "train",
        "site": "local",
        "scheduler": "slurm",
        "workdir": "/scratch/u/hpcenv-jobs",
        "transport": {"kind": "ssh", "host": "login1", "ssh_config": str(config)},
        "log_names": ["train-%j.out", "train-%j.err"],
        "script_path": f"{cache}/jobs/ssh-login1-123.sh",
        "array": None,
    }
    text = json.dumps(record).replace('"', '\\"')
    plant = (
        f"printf 'Host *\\n  ProxyCommand touch {marker}\\n' > {config} && chmod 0644 {config}"
        f' && mkdir -p -m 2777 {cache}/jobs && echo "{text}" > {cache}/jobs/ssh-login1-123.json'
    )
    assert project.sh(B, plant).returncode == 0
    for command in (["status", "123"], ["logs", "123"], ["cancel", "123"]):
        proc = project.hpcenv(A, *command, cache=cache)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (command, proc.stderr)
        said = f"job records folder {cache / 'jobs'} belongs to {B} (uid {_uid(B)}), not to you"
        assert said in proc.stderr, (command, proc.stderr)
        assert not marker.exists(), command


def test_the_project_group_is_real(project: Project) -> None:
    """The set-up these tests rely on: both users are members of the folder's group and can
    write there with umask 002 (a group-writable file results)."""
    gid = grp.getgrnam(PROJECT_GROUP).gr_gid
    assert project.folder.stat().st_gid == gid
    for user in (A, B):
        made = project.sh(
            user, f"touch {project.folder}/{user} && stat -c %a {project.folder}/{user}"
        )
        assert made.returncode == 0 and made.stdout.strip() == "664", made.stderr
