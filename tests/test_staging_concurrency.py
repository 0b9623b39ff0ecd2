"""The staging step scripts under concurrency (issue 20, "One fuzzing harness over every entry
point ... the staging scripts under concurrency"): several stage-in, stage-out and stitch
processes at once on one destination, as one user and as two real users (``runuser``, the
users and the shared sticky folder of test_multiuser.py). Each round ends with one complete,
verified copy of exactly one source (never a mix) and every process either succeeded or
refused with one clear line (exit 3); the lock is never bypassed (no ``.hpcenv-tmp`` left, no
process of another user writing through it). The tally (runs, clear refusals, accepted) is
printed at the end and written to ``$HPCENV_STAGING_TALLY`` when set.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_multiuser import A, B, Node, _dataset

from hpcenv.jobs.staging import verify_manifest, write_manifest

pytest_plugins = ["test_multiuser"]  # the node fixture: two users, a shared sticky folder
TALLY: Counter[str] = Counter()
CLEAR = (
    "not overwriting",
    "holds other or changed data",
    "appeared meanwhile",
    "changed while this step ran",
    "refusing",
    "already exists",
    "another user could change",
)


@pytest.fixture(scope="module", autouse=True)
def tally_report() -> Iterator[None]:
    yield
    doc = {k: TALLY[k] for k in ("tried", "clear_error", "accepted_valid")}
    print("\nstaging concurrency tally:", json.dumps(doc))
    if out := os.environ.get("HPCENV_STAGING_TALLY"):
        Path(out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _start(node: Node, user: str, name: str, *args: str | Path) -> subprocess.Popen[str]:
    env = ["env", "-i", "PATH=/usr/bin:/bin", f"USER={user}", "LANG=C.UTF-8"]
    argv = ["bash", str(node.steps / f"{name}.sh"), *map(str, args)]
    return subprocess.Popen(
        ["runuser", "-u", user, "--", *env, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=node.root,
    )


def _outcomes(procs: list[subprocess.Popen[str]]) -> list[int]:
    """Each process's exit: 0 (accepted) or 3 with one clear line (refused); anything else
    fails the test."""
    codes = []
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        TALLY["tried"] += 1
        assert "Traceback" not in err and "line " not in err.split(":")[0], err
        if proc.returncode == 0:
            TALLY["accepted_valid"] += 1
        else:
            assert proc.returncode == 3, err
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert lines and any(word in lines[0] for word in CLEAR), err
            TALLY["clear_error"] += 1
        codes.append(proc.returncode)
    return codes


def _sources(node: Node, user: str, n: int, size: int = 200_000) -> list[Path]:
    """``n`` datasets of ``user``'s, each several files of its own bytes (a mix is visible)."""
    out = []
    for i in range(n):
        src = _dataset(node, user, f"{user} source {i}\n" * (size // 20))
        for j in range(3):
            (src / f"part-{j}.bin").write_bytes(bytes([i + 1]) * (size + j))
        write_manifest(src)
        uid = os.stat(src).st_uid
        for p in src.iterdir():
            os.chown(p, uid, uid)
            p.chmod(0o644)
        renamed = src.with_name(f"{src.name}-{i}")
        src.rename(renamed)
        out.append(renamed)
    return out


def _same_tree(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    other = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files == other and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def _no_leftovers(node: Node) -> None:
    left = [p.name for p in node.root.iterdir() if ".hpcenv-tmp" in p.name or "-old." in p.name]
    assert left == []


@pytest.mark.parametrize("users", [(A,), (A, B)], ids=["one-user", "two-users"])
def test_concurrent_stage_in_one_destination(node: Node, users: tuple[str, ...]) -> None:
    """Six stagers at once into one folder only the first user may write: one verified copy
    of one source; the same source is reused, another is refused, another user is refused."""
    job = node.root / A / "job-1"
    assert node.step(A, "node_local", "make", job).returncode == 0
    node.sh(A, f"chmod 0711 {job}")  # others may pass, not write: their refusals are tested
    dest = job / "data"
    srcs = {u: _sources(node, u, 2) if u == A else _sources(node, u, 1) for u in users}
    plan = [(A, srcs[A][0]), (A, srcs[A][0]), (A, srcs[A][1]), (A, srcs[A][0])]
    if B in users:
        plan += [(B, srcs[B][0]), (B, srcs[B][0])]
    else:
        plan += [(A, srcs[A][1]), (A, srcs[A][0])]
    procs = [_start(node, u, "stage_in", s, dest, s / ".hpcenv-manifest") for u, s in plan]
    codes = _outcomes(procs)
    winner = next(s for s in srcs[A] if _same_tree(s, dest))  # exactly one source, whole
    assert verify_manifest(dest, dest / ".hpcenv-manifest") == []
    for (user, src), code in zip(plan, codes, strict=True):
        assert code == (0 if (user, src) == (A, winner) else 3), (user, src, code)
    assert all(os.stat(p).st_uid == os.stat(job).st_uid for p in dest.rglob("*"))
    assert [p.name for p in job.iterdir() if ".hpcenv-tmp" in p.name] == []


@pytest.mark.parametrize("force", ["0", "1"])
@pytest.mark.parametrize("users", [(A,), (A, B)], ids=["one-user", "two-users"])
def test_concurrent_stage_out_one_destination(
    node: Node, users: tuple[str, ...], force: str
) -> None:
    """Six stage-outs of different results to one destination in the shared folder: the
    destination is one whole, verified copy of one of them; without --force exactly one wins."""
    srcs = [(u, s) for u in users for s in _sources(node, u, 6 // len(users))]
    dest = node.root / "results"
    procs = [_start(node, u, "stage_out", s, dest, force) for u, s in srcs]
    codes = _outcomes(procs)
    won = [(u, s) for (u, s), code in zip(srcs, codes, strict=True) if code == 0]
    assert won, "every stage-out refused"
    matches = [(u, s) for u, s in srcs if _same_tree(s, dest)]
    assert len(matches) == 1 and matches[0] in won  # whole, one source, one that succeeded
    assert verify_manifest(dest, dest / ".hpcenv-manifest") == []
    if force == "0":
        assert len(won) == 1
    lock_owner = os.stat(f"{dest}.hpcenv-lock").st_uid
    assert all(os.stat(dest).st_uid == lock_owner for _ in [0])  # published under its lock
    if len(users) == 2:  # the other user never took or bypassed the lock
        assert {u for u, _ in won} == {next(u for u in users if _uid(u) == lock_owner)}
    _no_leftovers(node)


@pytest.mark.parametrize("users", [(A,), (A, B)], ids=["one-user", "two-users"])
def test_concurrent_stitch_one_output(node: Node, users: tuple[str, ...]) -> None:
    """Six stitches of different parts into one output (with --force): the output is exactly
    one of the concatenations, never parts of two."""
    expected: list[bytes] = []
    procs = []
    for i in range(6):
        user = users[i % len(users)]
        parts = node.root / f"parts-{i}"
        assert node.sh(user, f"mkdir -m 0755 {parts}").returncode == 0
        blob = []
        for j in range(4):
            data = bytes([i * 16 + j]) * 300_000
            blob.append(data)
            (parts / f"p{j}.bin").write_bytes(data)
            os.chown(parts / f"p{j}.bin", _uid(user), _uid(user))
        expected.append(b"".join(blob))
        procs.append((user, parts))
    out = node.root / "stitched.bin"
    started = [_start(node, u, "stitch", p, "4", "p", ".bin", out, "1") for u, p in procs]
    codes = _outcomes(started)
    assert 0 in codes
    assert out.read_bytes() in expected
    _no_leftovers(node)


def _uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid
