"""Two real Unix users, two real Slurm jobs, hpcenv's defaults on the ``local`` site (issue 20,
"Multi-user by design": "A second Unix user on the same machine cannot change what another
user's job reads or writes, nor block it ... (tested with two real users, two real jobs)").

``hpcenv-ua`` and ``hpcenv-ub`` each run the installed ``hpcenv submit --wait`` themselves
(``runuser``), on the host (``--no-container --single``), staging their own dataset to the
node (``--stage-in``); the job checks its staged copy against the manifest and prints its
content. Before and while the jobs run, each user tries every takeover of the other's job on
the same node: predictable folders made first in ``/tmp`` and ``/tmp/hpcenv-local`` (open,
and as symbolic links), planted lock files, links and FIFOs at the names a stage step could
lock, and reading, changing or renaming the other's staged copy once its folder appears.
Both jobs must succeed (exit 0) with their own data, and neither user can read the other's.

Why hpcenv runs as each user through a private mount namespace: the test's interpreter (a
venv whose base Python lives under ``/root``, mode 0700, on this machine and in CI when
pyenv provides ``python3``) cannot be run by other users. Rather than loosen ``/root``'s mode
on the machine, the users' ``hpcenv`` runs in a mount namespace (``unshare --mount``) in which
each folder that blocks them is covered by an empty 0755 tmpfs with only the interpreter's,
the venv's and this checkout's folders bound back in. Nothing outside that process tree
changes. The job itself runs under slurmd outside it and needs no Python (bash, coreutils).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from requirements import need_root, need_tool
from two_users import PROJECT_GROUP, A, B, as_user, expose_prefix, home, make_user, sh

from hpcenv.jobs.staging import write_manifest

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600), pytest.mark.alongside]

ROOT = Path(__file__).resolve().parent.parent

# The job: check the staged copy against its manifest where it is read, print what it holds,
# then stay a while so the other user can try to read or change it.
# The job checks its staged copy, prints it, then stays until the test has gone after its
# folder ($2 appears; at most 120 s): the two jobs may run one after the other on the one node.
JOB = (
    'cd "$1" && sed -E "s/^[0-9]+  //" .hpcenv-manifest | sha256sum --strict -c - '
    '&& echo "content: $(cat x.bin)" && echo "folder: $1" '
    '&& n=0 && while [ ! -e "$2" ] && [ "$n" -lt 600 ]; do sleep 0.2; n=$((n + 1)); done'
)


def _as(user: str, prefix: list[str], *argv: str) -> list[str]:
    return as_user(user, prefix, *argv, SLURM_CONF=os.environ["SLURM_CONF"])


def _sh(user: str, script: str) -> subprocess.CompletedProcess[str]:
    return sh(user, script)


def _dataset(user: str, text: str) -> Path:
    """``user``'s dataset in ``user``'s home (0700): nobody else can read the source either."""
    src = home(user) / f"ds-{uuid.uuid4().hex[:8]}"
    src.mkdir()
    (src / "x.bin").write_text(text)
    write_manifest(src)
    pw = pwd.getpwnam(user)
    for p in (src, *src.iterdir()):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    return src


def _plant(attacker: str, victim: str, name: str, planted: list[Path]) -> None:
    """Every predictable name the attacker can take first, for the victim's job ``name``."""
    paths = {
        "open": [
            Path(f"/tmp/{victim}"),
            Path(f"/tmp/hpcenv-local/{victim}"),
            Path(f"/tmp/hpcenv-local/{victim}/{name}-1"),
        ],
        "link": [Path(f"/tmp/hpcenv-{victim}-{name}"), Path(f"/tmp/hpcenv-local/{victim}-{name}")],
        "fifo": [
            Path(f"/tmp/hpcenv-{victim}-{name}.hpcenv-lock"),
            Path(f"/tmp/hpcenv-local/{victim}/data.hpcenv-lock"),
        ],
    }
    elsewhere = Path(f"/tmp/hpcenv-mu-{attacker}-{uuid.uuid4().hex[:6]}")
    _sh(attacker, f"mkdir -m 0777 {elsewhere}")
    planted.append(elsewhere)
    if not Path("/tmp/hpcenv-local").exists():
        _sh(attacker, "mkdir -m 0777 /tmp/hpcenv-local")
        planted.append(Path("/tmp/hpcenv-local"))
    for kind, items in paths.items():
        for p in items:
            if p.exists() or p.is_symlink():
                continue
            cmd = {
                "open": f"mkdir -p -m 0777 {p}",
                "link": f"ln -s {elsewhere} {p}",
                "fifo": f"mkfifo -m 0666 {p}",
            }[kind]
            if _sh(attacker, cmd).returncode == 0:
                planted.append(p)


def _attack_staged(attacker: str, victim: str, name: str, job: subprocess.Popen[str]) -> list[str]:
    """Once the victim's node-local folder appears, try to read, change and move its data;
    return the attempts that succeeded (must be none)."""
    deadline = time.monotonic() + 240  # the one-node queue may hold other jobs first
    folder: Path | None = None
    while folder is None and time.monotonic() < deadline:
        if job.poll() is not None:
            out, err = job.communicate()
            pytest.fail(f"{victim}'s submit ended (exit {job.returncode}) first: {err[-3000:]}")
        found = sorted(Path("/tmp").glob(f"hpcenv-{victim}-{name}-*"))
        found = [f for f in found if f.is_dir() and not f.is_symlink()]
        if found and (found[0] / "data" / "x.bin").exists():
            folder = found[0]
        time.sleep(0.1)
    if folder is None:
        queue = subprocess.run(
            ["squeue", "-a", "-o", "%i %u %T %r"], capture_output=True, text=True
        )
        job.kill()
        logs = [
            f"{p}: {p.read_text()[-800:]}" for p in (home(victim) / "hpcenv-jobs").glob(f"{name}-*")
        ]
        pytest.fail(
            f"{victim}'s node-local folder never appeared; queue: {queue.stdout}; {job.communicate()[1][-1500:]}; {logs}"
        )
    data = folder / "data"
    attempts = [
        f"cat {data}/x.bin",
        f"ls {folder}",
        f"echo theirs > {data}/x.bin",
        f"touch {data}/extra",
        f"mv {folder} {folder}.moved",
        f"rm -rf {folder}",
        f"ln -s /etc/passwd {folder}/data2",
        f"mkdir {folder}/data.hpcenv-lock",
    ]
    return [a for a in attempts if _sh(attacker, a).returncode == 0]


def _attack_then_release(
    attacker: str, victim: str, name: str, job: subprocess.Popen[str], release: Path
) -> list[str]:
    """:func:`_attack_staged`, then let the victim's job end (whichever runs first)."""
    try:
        return _attack_staged(attacker, victim, name, job)
    finally:
        release.touch()


def test_two_users_two_jobs_each_reads_its_own_data(slurm: SlurmInfo, tmp_path: Path) -> None:
    need_root("the test makes two Unix users and submits a Slurm job as each")
    for tool in ("runuser", "useradd", "mkfifo"):
        need_tool(tool, why="two users, two jobs")
    make_user(A), make_user(B)
    tmp_path.chmod(0o755)
    prefix = expose_prefix(tmp_path)
    hpcenv = Path(sys.executable).with_name("hpcenv")
    # the installed hpcenv: its console script, run by this venv's python (reachable above)
    for user in (A, B):
        probe = subprocess.run(
            _as(user, prefix, sys.executable, str(hpcenv), "--help"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probe.returncode == 0, f"{user} cannot run hpcenv: {probe.stderr[-2000:]}"
    tag = uuid.uuid4().hex[:6]
    text = {A: f"data of {A} {tag}", B: f"data of {B} {tag}"}
    src = {u: _dataset(u, text[u]) for u in (A, B)}
    name = {u: f"mu-{u[-2:]}-{tag}" for u in (A, B)}
    planted: list[Path] = []
    procs: dict[str, subprocess.Popen[str]] = {}
    gate = Path(f"/tmp/hpcenv-mu-release-{tag}")  # root's; every user may look into it
    gate.mkdir(mode=0o755)
    gate.chmod(0o755)
    release = {u: gate / u for u in (A, B)}
    try:
        _plant(B, A, name[A], planted)
        _plant(A, B, name[B], planted)
        for user in (A, B):
            argv = [
                sys.executable,
                str(hpcenv),
                "submit",
                "--site",
                "local",
                "--no-container",
                "--single",
                "--name",
                name[user],
                "--stage-in",
                str(src[user]),
                "--wait",
                "--timeout",
                "400",
                "--json",
                "--",
                "bash",
                "-c",
                JOB,
                "job",
                "{data}",
                str(release[user]),
            ]
            procs[user] = subprocess.Popen(
                _as(user, prefix, *argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd="/",
            )
        # meanwhile each user goes after the other's staged copy, both at once: the one-node
        # queue runs the jobs in either order, each job stays until its attack is over
        with ThreadPoolExecutor(max_workers=2) as pool:
            attacks = {
                other: pool.submit(
                    _attack_then_release, other, user, name[user], procs[user], release[user]
                )
                for user, other in ((A, B), (B, A))
            }
            won = {attacker: attack.result() for attacker, attack in attacks.items()}
        results = {u: p.communicate(timeout=450) for u, p in procs.items()}
        for user, (_out, err) in results.items():
            assert procs[user].returncode == 0, f"{user}'s job: {err[-3000:]}"
        assert won == {A: [], B: []}, f"takeovers that worked: {won}"
        for user in (A, B):
            other = B if user == A else A
            logs = subprocess.run(
                _as(user, prefix, sys.executable, str(hpcenv), "logs", _job_id(results[user][0])),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert logs.returncode == 0, logs.stderr
            assert f"content: {text[user]}" in logs.stdout and "x.bin: OK" in logs.stdout
            assert text[other] not in logs.stdout
            assert f"folder: /tmp/hpcenv-{user}-{name[user]}-" in logs.stdout
            # the job's node-local folder went with it; the default workdir is the user's own
            workdir = home(user) / "hpcenv-jobs"
            assert workdir.is_dir() and workdir.stat().st_uid == pwd.getpwnam(user).pw_uid
            assert not list(Path("/tmp").glob(f"hpcenv-{user}-{name[user]}-*"))
        # neither user can read the other's dataset or job folder
        for user, other in ((A, B), (B, A)):
            assert _sh(user, f"cat {src[other]}/x.bin").returncode != 0
            assert _sh(user, f"ls {home(other)}/hpcenv-jobs").returncode != 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        for path in reversed(planted):
            if path.is_symlink() or not path.is_dir():
                path.unlink(missing_ok=True)
            else:
                shutil.rmtree(path, ignore_errors=True)
        for user in (A, B):
            shutil.rmtree(src[user], ignore_errors=True)
        shutil.rmtree(gate, ignore_errors=True)


def _job_id(stdout: str) -> str:
    import json

    return str(json.loads(stdout)["job_id"])


def test_a_members_folder_in_a_group_workdir_does_not_stop_the_job(
    slurm: SlurmInfo, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 40, class 8, with two real users and a real Slurm job: a project folder both use as
    ``--workdir`` (root:hpcenv-proj 2775, umask 002), where B made ``.hpcenv`` first and left it
    open to the group (what would let B swap A's step scripts). A's job still runs (exit 0):
    its steps go to a folder of its own, A's alone, and B's folder is left as it was."""
    import grp

    need_root("the test makes two Unix users and submits a Slurm job as one")
    need_tool("runuser", why="two users, one group folder")
    make_user(A), make_user(B)
    tmp_path.chmod(0o755)
    prefix = expose_prefix(tmp_path)
    top = Path(tempfile.mkdtemp(prefix="hpcenv-group-", dir="/tmp"))  # others may enter
    top.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    group = top / "project"
    group.mkdir()
    os.chown(group, 0, grp.getgrnam(PROJECT_GROUP).gr_gid)
    group.chmod(0o2775)
    assert sh(B, f"umask 002 && mkdir -m 2775 {group}/.hpcenv").returncode == 0
    argv = [sys.executable, str(Path(sys.executable).with_name("hpcenv")), "submit"]
    argv += ["--site", "local", "--no-container", "--single", "--name", "grp", "--workdir"]
    argv += [str(group), "--wait", "--timeout", "240", "--json", "--", "true"]
    cmd = as_user(A, prefix, *argv, umask="002", SLURM_CONF=os.environ["SLURM_CONF"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = _job_id(proc.stdout)
    err = (group / f"grp-{job}.err").read_text()
    assert "this job's steps go to a folder of its own" in err, err
    (steps,) = group.glob(f".hpcenv-*/{job}")
    info = steps.stat()
    assert info.st_uid == pwd.getpwnam(A).pw_uid and stat.S_IMODE(info.st_mode) & 0o077 == 0
    assert (group / ".hpcenv").stat().st_uid == pwd.getpwnam(B).pw_uid  # left as it was
    assert sh(B, f"ls {steps}").returncode != 0  # B cannot look into A's steps
