"""Two real Unix users on one machine: user B tries every takeover of user A's node-local data,
locks and staged copies, and A's step scripts (rendered by :func:`hpcenv.jobs.render.step_script`,
run by bash as each user with ``runuser``) must refuse with one clear line or be unaffected,
and never read B's data (issue 20: "Multi-user by design").

The users ``hpcenv-ua`` and ``hpcenv-ub`` are made once (``useradd``, idempotent) and left in
place (other runs reuse them; nothing of theirs outlives a test). The shared folder stands in
for a node's ``/tmp`` or ``/dev/shm``: root's, mode 1777.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from requirements import need_root, need_tool
from two_users import A, B, make_user

from hpcenv.jobs.render import step_script
from hpcenv.jobs.staging import write_manifest


@dataclass
class Node:
    root: Path  # like /tmp: root's, 1777
    steps: Path  # the rendered step scripts, readable by all

    def run(self, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
        env = ["env", "-i", "PATH=/usr/bin:/bin", f"USER={user}", "LANG=C.UTF-8"]
        return subprocess.run(
            ["runuser", "-u", user, "--", *env, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
        )

    def step(self, user: str, name: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(user, "bash", str(self.steps / f"{name}.sh"), *map(str, args))

    def sh(self, user: str, script: str) -> subprocess.CompletedProcess[str]:
        return self.run(user, "bash", "-c", script)


@pytest.fixture
def node() -> Iterator[Node]:
    need_root("the test makes two Unix users and runs as each")
    for tool in ("runuser", "useradd", "flock"):
        need_tool(tool, why="two-user tests")
    make_user(A), make_user(B)
    root = Path(tempfile.mkdtemp(prefix="hpcenv-multiuser-", dir="/tmp"))
    try:
        root.chmod(0o1777)
        steps = root / "steps"
        steps.mkdir(mode=0o755)
        steps.chmod(0o755)
        for name in ("node_local", "stage_in", "stage_out", "stitch"):
            (steps / f"{name}.sh").write_text(step_script(name) + "\n")
            (steps / f"{name}.sh").chmod(0o644)
        yield Node(root, steps)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _dataset(node: Node, owner: str, text: str) -> Path:
    """A dataset with its manifest, owned by ``owner``, readable by all."""
    src = node.root / f"dataset-{owner}"
    src.mkdir()
    (src / "x.bin").write_text(text)
    write_manifest(src)
    uid = pwd.getpwnam(owner).pw_uid
    for p in (src, *src.iterdir()):
        os.chown(p, uid, uid)
        p.chmod(0o755 if p.is_dir() else 0o644)
    return src


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines, "no message"
    return lines[0]


# --- the node-local job folder -------------------------------------------------------------


def test_the_job_folder_is_per_user_per_job_and_0700(node: Node) -> None:
    job = node.root / A / "train-1"
    proc = node.step(A, "node_local", "make", job)
    assert proc.returncode == 0, proc.stderr
    for folder in (job.parent, job):
        st = folder.stat()
        assert (pwd.getpwuid(st.st_uid).pw_name, stat.S_IMODE(st.st_mode)) == (A, 0o700)
    # B cannot look in, nor put anything there
    assert node.sh(B, f"ls {job}").returncode != 0
    assert node.sh(B, f"mkdir {job}/data").returncode != 0
    # a second make of the same job (a requeued job keeps its id) reuses A's own folder...
    again = node.step(A, "node_local", "make", job)
    assert again.returncode == 0 and "reusing it" in again.stdout
    # ...but never one another user made at that name
    theirs = node.root / A / "train-2"
    assert node.sh(A, f"chmod 0777 {job.parent}").returncode == 0
    assert node.sh(B, f"mkdir -m 0700 {theirs}").returncode == 0
    assert node.sh(A, f"chmod 0700 {job.parent}").returncode == 0
    refused = node.step(A, "node_local", "make", theirs)
    assert refused.returncode == 3 and B in refused.stderr
    assert node.step(A, "node_local", "remove", job).returncode == 0
    assert not job.exists()


@pytest.mark.parametrize("how", ["folder", "open-folder", "symlink"])
def test_a_per_user_folder_made_by_another_user_is_refused(node: Node, how: str) -> None:
    """B makes A's per-user folder first (or a link there): A's job refuses, naming the folder
    and its owner, and puts nothing in it."""
    mine = node.root / A
    bs = node.root / "b-elsewhere"
    assert node.sh(B, f"mkdir -m 0777 {bs}").returncode == 0
    if how == "symlink":
        assert node.sh(B, f"ln -s {bs} {mine}").returncode == 0
    else:
        mode = "0777" if how == "open-folder" else "0755"
        assert node.sh(B, f"mkdir -m {mode} {mine}").returncode == 0
    proc = node.step(A, "node_local", "make", mine / "train-7")
    assert proc.returncode == 3
    line = _one_line(proc.stderr)
    assert str(mine) in line and "refusing" in line
    if how != "symlink":
        assert f"belongs to {B}" in line
    assert list(bs.iterdir()) == [] and not (mine / "train-7").exists()
    # remove never deletes a folder that is not ours
    node.sh(B, f"mkdir -p {bs}/keep")
    node.step(A, "node_local", "remove", bs)
    assert (bs / "keep").is_dir()


def test_own_per_user_folder_writable_by_others_is_refused(node: Node) -> None:
    mine = node.root / A
    assert node.sh(A, f"mkdir -m 0777 {mine}").returncode == 0
    proc = node.step(A, "node_local", "make", mine / "train-1")
    assert proc.returncode == 3
    assert "writable by other users (mode 777)" in _one_line(proc.stderr)


def test_a_shared_root_another_user_made_is_refused(node: Node) -> None:
    """A site path with no $USER (/tmp/hpcenv-local): B made that root, non-sticky: B could
    move A's folder away and put his own in its place, so A refuses."""
    shared = node.root / "hpcenv-local"
    assert node.sh(B, f"mkdir -m 0777 {shared}").returncode == 0
    proc = node.step(A, "node_local", "make", shared / A / "train-1")
    assert proc.returncode == 3
    line = _one_line(proc.stderr)
    assert f"{shared} belongs to {B}" in line


def test_a_shared_root_one_user_made_refuses_the_others(node: Node) -> None:
    """A site path without $USER: the first user's job makes the root, and as its owner could
    move the others' folders, their jobs refuse it (clearly) rather than trust it."""
    shared = node.root / "hpcenv-local"
    assert node.step(A, "node_local", "make", shared / A / "j-1").returncode == 0
    proc = node.step(B, "node_local", "make", shared / B / "j-2")
    assert proc.returncode == 3
    assert f"{shared} belongs to {A}" in _one_line(proc.stderr)


# --- stage-in: verified where it is read ---------------------------------------------------


def test_staged_data_cannot_be_swapped_after_verification(node: Node) -> None:
    src = _dataset(node, A, "mine")
    job = node.root / A / "train-1"
    assert node.step(A, "node_local", "make", job).returncode == 0
    data = job / "data"
    proc = node.step(A, "stage_in", src, data, src / ".hpcenv-manifest")
    assert proc.returncode == 0, proc.stderr
    # B tries to change, replace or add to the staged copy: every attempt fails
    for attempt in (
        f"echo theirs > {data}/x.bin",
        f"rm -rf {data}",
        f"mv {data} {job}/old",
        f"touch {data}/extra",
        f"ln -sf /etc/passwd {data}/x.bin",
    ):
        assert node.sh(B, attempt).returncode != 0, attempt
    assert (data / "x.bin").read_text() == "mine"
    for p in (data, data / "x.bin"):
        assert not p.stat().st_mode & 0o022
        assert pwd.getpwuid(p.stat().st_uid).pw_name == A
    # a second stager (another task of the job) reuses it, verified again
    again = node.step(A, "stage_in", src, data, src / ".hpcenv-manifest")
    assert again.returncode == 0 and "already holds a verified copy" in again.stdout


def test_staging_a_dataset_of_another_user_gives_a_copy_of_ours(node: Node) -> None:
    """Run by root (as CI runs jobs), cp -a would keep B as the owner: B could then change
    the verified copy. The copy is the stager's."""
    src = _dataset(node, B, "shared dataset")
    dest = node.root / "root-job"
    dest.mkdir(mode=0o700)
    proc = subprocess.run(
        [
            "bash",
            str(node.steps / "stage_in.sh"),
            str(src),
            str(dest / "d"),
            str(src / ".hpcenv-manifest"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (dest / "d" / "x.bin").stat().st_uid == 0


def test_stage_in_refuses_a_destination_others_can_write(node: Node) -> None:
    src = _dataset(node, A, "mine")
    open_dir = node.root / "project"
    assert node.sh(B, f"mkdir -m 0777 {open_dir}").returncode == 0
    proc = node.step(A, "stage_in", src, open_dir / "data", src / ".hpcenv-manifest")
    assert proc.returncode == 3
    line = _one_line(proc.stderr)
    assert "another user could change" in line and f"{open_dir} belongs to {B}" in line
    assert not (open_dir / "data").exists()


def test_stage_in_refuses_data_another_user_put_at_the_destination(node: Node) -> None:
    """In a sticky shared folder B stages first, at A's destination, a copy of the same
    manifest but B's: A refuses it instead of reading B's files."""
    src = _dataset(node, A, "mine")
    dest = node.root / "data"
    assert node.sh(B, f"cp -a {src} {dest}").returncode == 0
    assert node.sh(B, f"cp {src}/.hpcenv-manifest {dest}/.hpcenv-manifest").returncode == 0
    proc = node.step(A, "stage_in", src, dest, src / ".hpcenv-manifest")
    assert proc.returncode == 3
    line = _one_line(proc.stderr)
    assert f"belongs to {B}" in line and str(dest) in line


# --- locks never through a symlink ---------------------------------------------------------


def _victim(node: Node) -> Path:
    victim = node.root / "a-precious"
    assert node.sh(A, f"echo keep > {victim}").returncode == 0
    return victim


@pytest.mark.parametrize("step", ["stage_in", "stage_out", "stitch"])
@pytest.mark.parametrize("plant", ["symlink", "dangling", "their-file"])
def test_a_planted_lock_is_refused_and_nothing_is_written_through_it(
    node: Node, step: str, plant: str
) -> None:
    victim = _victim(node)
    src = _dataset(node, A, "mine")
    dest = node.root / "out"  # in the sticky shared folder, beside anyone's
    lock = Path(f"{dest}.hpcenv-lock")
    target = {"symlink": victim, "dangling": node.root / "made-by-a", "their-file": None}[plant]
    if target is None:
        assert node.sh(B, f": > {lock}").returncode == 0
    else:
        assert node.sh(B, f"ln -s {target} {lock}").returncode == 0
    if step == "stage_in":
        proc = node.step(A, "stage_in", src, dest, src / ".hpcenv-manifest")
    elif step == "stage_out":
        proc = node.step(A, "stage_out", src, dest, "0")
    else:
        assert node.sh(A, f"cp {src}/x.bin {node.root}/x0.bin").returncode == 0
        proc = node.step(A, "stitch", node.root, "1", "x", ".bin", dest, "0")
    assert proc.returncode == 3, proc.stderr
    line = _one_line(proc.stderr)
    assert str(lock) in line and "refusing" in line
    assert victim.read_text() == "keep\n"
    assert not (node.root / "made-by-a").exists()
    assert not dest.exists()
    assert [p.name for p in node.root.iterdir() if ".hpcenv-tmp" in p.name] == []


def test_a_users_own_lock_is_reused(node: Node) -> None:
    src = _dataset(node, A, "mine")
    dest = node.root / "out"
    assert node.step(A, "stage_out", src, dest, "0").returncode == 0
    lock = Path(f"{dest}.hpcenv-lock")
    assert pwd.getpwuid(lock.stat().st_uid).pw_name == A and not lock.is_symlink()
    again = node.step(A, "stage_out", src, dest, "1")
    assert again.returncode == 0, again.stderr
