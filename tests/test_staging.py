"""Data staging: manifests (Python and shell agree, also on links and odd names), stage-in
verification, per-job staging under a lock, atomic stage-out and stitching, also when racing,
on a full disk and against a planted symlink. The step scripts are the ones jobs run, executed
here with real bash + coreutils, many at once where the point is concurrency."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from requirements import AS_ROOT, need, need_root, need_tool, needs_tool

from hpcenv.errors import ConfigError
from hpcenv.jobs.render import step_script
from hpcenv.jobs.spec import MANIFEST_NAME
from hpcenv.jobs.staging import (
    array_chain,
    manifest_lines,
    training_chain,
    verify_manifest,
    write_manifest,
)
from hpcenv.paths import templates_dir


def _dataset(root: Path) -> Path:
    (root / "sub dir").mkdir(parents=True)
    (root / "a.bin").write_bytes(bytes(range(256)) * 64)
    (root / "sub dir" / "b.txt").write_text("hello\n")
    (root / "empty").write_bytes(b"")
    return root


def _step(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.sh"
    path.write_text(step_script(name) + "\n")
    return path


def _bash(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *map(str, args)], capture_output=True, text=True, timeout=60)


def test_python_manifest_roundtrip(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "d")
    manifest = write_manifest(data)
    lines = manifest.read_text().splitlines()  # plain names: text
    assert [ln.split("  ", 2)[2] for ln in lines] == ["a.bin", "empty", "sub dir/b.txt"]
    assert lines[0].startswith("16384  ")
    assert verify_manifest(data, manifest) == []
    (data / "sub dir" / "b.txt").write_text("HELLO\n")
    assert verify_manifest(data, manifest) == ["sha256: sub dir/b.txt differs"]
    (data / "a.bin").write_bytes(b"x")
    assert any(p.startswith("size: a.bin") for p in verify_manifest(data, manifest))
    with pytest.raises(ConfigError, match="not a directory"):
        manifest_lines(tmp_path / "nope")


def test_shell_manifest_matches_python(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "d")
    lib = templates_dir() / "jobs" / "_lib.sh"
    proc = _bash("-c", f'source "{lib}"; hpcenv_manifest "$1"', "x", data)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.encode().splitlines() == manifest_lines(data)
    # sha256sum -c accepts the manifest once the size column is dropped.
    manifest = write_manifest(data)
    check = _bash(
        "-c",
        'cd "$1" && sed -E "s/^[0-9]+  //" "$2" | sha256sum -c --strict -',
        "x",
        data,
        manifest,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_stage_in_copies_verifies_and_skips_when_done(tmp_path: Path) -> None:
    src = _dataset(tmp_path / "shared")
    manifest = write_manifest(src)
    dest = tmp_path / "node-local" / "data"
    script = _step(tmp_path, "stage_in")
    first = _bash(script, src, dest, manifest)
    assert first.returncode == 0, first.stderr
    assert "3 files" in first.stdout and "verified" in first.stdout
    assert verify_manifest(dest, dest / MANIFEST_NAME) == []
    second = _bash(script, src, dest, manifest)
    assert second.returncode == 0 and "already holds a verified copy" in second.stdout


def test_stage_in_refuses_corrupt_source(tmp_path: Path) -> None:
    src = _dataset(tmp_path / "shared")
    manifest = write_manifest(src)
    (src / "sub dir" / "b.txt").write_text("tampered\n")  # different size
    proc = _bash(_step(tmp_path, "stage_in"), src, tmp_path / "dest", manifest)
    assert proc.returncode != 0
    assert "size of" in proc.stderr and "b.txt" in proc.stderr
    (src / "sub dir" / "b.txt").write_text("HELLO\n")  # same size, other bytes
    proc = _bash(_step(tmp_path, "stage_in"), src, tmp_path / "dest2", manifest)
    assert proc.returncode != 0 and "checksum mismatch" in proc.stderr


def test_stage_out_is_atomic_and_never_overwrites(tmp_path: Path) -> None:
    results = _dataset(tmp_path / "results")
    dest = tmp_path / "project" / "run1"
    script = _step(tmp_path, "stage_out")
    ok = _bash(script, results, dest, 0)
    assert ok.returncode == 0, ok.stderr
    assert verify_manifest(dest, dest / MANIFEST_NAME) == []
    before = (dest / MANIFEST_NAME).read_text()

    (results / "a.bin").write_bytes(b"new results")
    again = _bash(script, results, dest, 0)
    assert again.returncode == 3 and "not overwriting" in again.stderr
    assert (dest / MANIFEST_NAME).read_text() == before

    forced = _bash(script, results, dest, 1)
    assert forced.returncode == 0, forced.stderr
    assert (dest / "a.bin").read_bytes() == b"new results"
    assert verify_manifest(dest, dest / MANIFEST_NAME) == []
    leftovers = [p.name for p in dest.parent.iterdir() if p.name != "run1"]
    assert leftovers == ["run1.hpcenv-lock"]


def test_publish_refuses_a_target_that_appears_meanwhile(tmp_path: Path) -> None:
    """The final rename itself never replaces (mv -n -T = RENAME_NOREPLACE)."""
    lib = templates_dir() / "jobs" / "_lib.sh"
    tmp = tmp_path / "out.tmp"
    tmp.write_text("mine")
    target = tmp_path / "out"
    target.write_text("theirs")
    proc = _bash("-c", f'source "{lib}"; hpcenv_publish "$1" "$2" 0 absent', "x", tmp, target)
    assert proc.returncode == 3 and target.read_text() == "theirs"
    assert "changed while this step ran" in proc.stderr


def test_stitch_orders_parts_and_checks_them(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(12):
        (parts / f"part-{i}.csv").write_text(f"{i}\n")
    out = tmp_path / "out" / "all.csv"
    script = _step(tmp_path, "stitch")
    proc = _bash(script, parts, 12, "part-", ".csv", out, 0)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "".join(f"{i}\n" for i in range(12))  # 10 after 9, not after 1
    assert _bash(script, parts, 12, "part-", ".csv", out, 0).returncode == 3
    (parts / "part-5.csv").unlink()
    missing = _bash(script, parts, 12, "part-", ".csv", tmp_path / "o2", 0)
    assert missing.returncode == 2 and "missing part" in missing.stderr


@needs_tool("shellcheck", why="the step scripts are shellchecked")
@pytest.mark.parametrize("name", ["stage_in", "stage_out", "stitch", "node_local"])
def test_step_scripts_pass_shellcheck(tmp_path: Path, name: str) -> None:
    proc = subprocess.run(
        ["shellcheck", str(_step(tmp_path, name))], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_chains_have_the_documented_shape() -> None:
    chain = training_chain(
        name="mnist",
        dataset="/proj/mnist",
        scratch="/scratch/$USER",
        command=["python3", "train.py"],
        results="/proj/results/r1",
    )
    assert [j.name for j in chain] == ["mnist-stage-in", "mnist", "mnist-stage-out"]
    assert chain[0].stage_in and not chain[0].stage_in.per_node
    assert chain[1].stage_in and chain[1].stage_in.source == "/scratch/$USER/mnist/dataset"
    assert chain[2].stage_out and chain[2].stage_out.dest == "/proj/results/r1"
    arr = array_chain(name="inf", command=["x"], chunks=4, parts="/p", output="/o")
    assert arr[0].array and arr[0].array.count == 4 and arr[1].stitch and arr[1].stitch.count == 4


# -- manifests: the same rules on both sides ---------------------------------------------------
LIB = templates_dir() / "jobs" / "_lib.sh"


def _lib(func: str, *args: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["bash", "-c", f'source "{LIB}"; {func} "$@"', "x", *map(str, args)],
        capture_output=True,
        timeout=60,
    )


ODD_NAMES = [
    " lead",
    "trail ",
    "two  spaces",
    "tab\there",
    "café-日本.bin",
    "-dash",
    "*star",
    "quote'\"",
    "$HOME",
    "semi;colon",
    "ends-with.hpcenv-manifest-not",
]


def test_manifests_agree_on_odd_names(tmp_path: Path) -> None:
    data = tmp_path / "d"
    (data / "sub  dir").mkdir(parents=True)
    for i, name in enumerate(ODD_NAMES):
        (data / name).write_bytes(bytes([i]) * (i + 1))
        (data / "sub  dir" / name).write_bytes(b"n" * i)
    raw = os.fsencode(data) + b"/latin1-\xe9.bin"  # not UTF-8
    Path(os.fsdecode(raw)).write_bytes(b"bytes")
    shell = _lib("hpcenv_manifest", data)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines() == manifest_lines(data)
    assert len(manifest_lines(data)) == 2 * len(ODD_NAMES) + 1
    manifest = write_manifest(data)
    assert verify_manifest(data, manifest) == []
    check = _lib("hpcenv_verify", data, manifest)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("name", ["new\nline", "back\\slash"])
def test_unlistable_names_are_refused_by_both(tmp_path: Path, name: str) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / name).write_text("x")
    with pytest.raises(ConfigError, match="not allowed in a manifest"):
        manifest_lines(data)
    shell = _lib("hpcenv_manifest", data)
    assert shell.returncode != 0 and b"not allowed in a manifest" in shell.stderr


@pytest.mark.parametrize("kind", ["file", "dir", "dangling"])
def test_links_are_refused_by_both(tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    data = _dataset(tmp_path / "d")
    target = {"file": outside / "secret", "dir": outside, "dangling": tmp_path / "nope"}[kind]
    (data / "link").symlink_to(target)
    with pytest.raises(ConfigError, match="link or special file"):
        manifest_lines(data)
    shell = _lib("hpcenv_manifest", data)
    assert shell.returncode != 0 and b"link or special file" in shell.stderr


def test_files_missing_from_the_manifest_are_reported(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "d")
    manifest = write_manifest(data)
    (data / "sub dir" / "added later.txt").write_text("unverified")
    assert verify_manifest(data, manifest) == ["not in the manifest: sub dir/added later.txt"]
    shell = _lib("hpcenv_verify", data, manifest)
    assert shell.returncode == 1 and b"added later.txt is not in the manifest" in shell.stderr


def test_verify_never_leaves_the_dataset(tmp_path: Path) -> None:
    """Entries that climb out (``..``, absolute) or go through a link are refused, never read:
    the file outside is a FIFO, so reading it would hang the verifier."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "secret")
    digest = "0" * 64
    cases = {
        "dotdot": f"0  {digest}  ../outside/secret\n",
        "absolute": f"0  {digest}  {outside}/secret\n",
        "inner dotdot": f"0  {digest}  sub dir/../../outside/secret\n",
    }
    for label, line in cases.items():
        data = _dataset(tmp_path / label)
        manifest = tmp_path / f"{label}.manifest"
        manifest.write_text(line + "".join(ln.decode() + "\n" for ln in manifest_lines(data)))
        problems = verify_manifest(data, manifest)
        assert problems and problems[0].startswith("refused:"), (label, problems)
        shell = _lib("hpcenv_verify", data, manifest)
        assert shell.returncode == 1 and b"leaves" in shell.stderr, (label, shell.stderr)
    data = _dataset(tmp_path / "via-link")
    (data / "escape").symlink_to(outside)
    manifest = tmp_path / "link.manifest"
    manifest.write_text(f"0  {digest}  escape/secret\n")
    assert any("link or special file" in p for p in verify_manifest(data, manifest))
    assert _lib("hpcenv_verify", data, manifest).returncode == 1
    # The installed CLI: one line, exit 2, and it returns (a followed FIFO would hang).
    (data / MANIFEST_NAME).symlink_to(manifest)
    hpcenv = Path(sys.executable).with_name("hpcenv")
    proc = subprocess.run(
        [str(hpcenv), "manifest", "--verify", str(data)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "link" in proc.stderr


def test_cli_manifest_write_and_verify(tmp_path: Path) -> None:
    hpcenv = Path(sys.executable).with_name("hpcenv")
    data = _dataset(tmp_path / "d")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(hpcenv), "manifest", *args, str(data)], capture_output=True, text=True, timeout=60
        )

    assert run().returncode == 0 and run("--verify").returncode == 0
    (data / "a.bin").write_bytes(b"changed")
    bad = run("--verify")
    assert bad.returncode == 2 and "size: a.bin" in bad.stderr
    (data / MANIFEST_NAME).unlink()
    missing = run("--verify")
    assert missing.returncode == 2 and "cannot read manifest" in missing.stderr


# -- stage-in: per destination lock, never rewrites ---------------------------------------------
def test_racing_stage_ins_copy_once_and_all_verify(tmp_path: Path) -> None:
    src = _dataset(tmp_path / "shared")
    for i in range(20):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(100_000))
    manifest = write_manifest(src)
    dest = tmp_path / "node-local" / "job-1" / "data"
    script = _step(tmp_path, "stage_in")
    procs = [
        subprocess.Popen(
            ["bash", str(script), str(src), str(dest), str(manifest)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [e for _, e in outs]
    copied = [o for o, _ in outs if "verified in" in o]
    reused = [o for o, _ in outs if "already holds a verified copy" in o]
    assert len(copied) == 1 and len(reused) == 7
    assert verify_manifest(dest, dest / MANIFEST_NAME) == []
    assert sorted(p.name for p in dest.parent.iterdir()) == ["data", "data.hpcenv-lock"]


def test_a_second_job_never_rewrites_staged_data(tmp_path: Path) -> None:
    first = _dataset(tmp_path / "first")
    second = tmp_path / "second"
    second.mkdir()
    (second / "a.bin").write_bytes(b"other data")
    dest = tmp_path / "scratch" / "dataset"
    script = _step(tmp_path, "stage_in")
    assert _bash(script, first, dest, write_manifest(first)).returncode == 0
    before = {p.name: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    other = _bash(script, second, dest, write_manifest(second))
    assert other.returncode == 3 and "not rewriting" in other.stderr
    assert {p.name: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    (dest / "a.bin").write_bytes(b"damaged")  # a changed copy is not "repaired" under readers
    again = _bash(script, first, dest, first / MANIFEST_NAME)
    assert again.returncode == 3 and (dest / "a.bin").read_bytes() == b"damaged"


# -- stage-out and stitch: racing, forced, full disk, symlinks ---------------------------------
def _results(root: Path, tag: str, files: int = 30) -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        (root / f"r{i}.bin").write_bytes(tag.encode() * 20_000)
    (root / "who").write_text(tag)
    return root


@contextlib.contextmanager
def _held(lock: Path) -> Iterator[None]:
    """Hold the destination's lock (as a publishing job would) while the racers start."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.mark.parametrize("force", [1, 0])
def test_racing_stage_outs_exactly_one_wins(tmp_path: Path, force: int) -> None:
    """10 pairs of stage-outs to one destination, both started while it held old results
    (forced pairs) or while it was absent: one publishes, the other reports failure; no run
    reports success for results that were then replaced."""
    script = _step(tmp_path, "stage_out")
    for pair in range(10):
        dest = tmp_path / f"pair{pair}" / "results"
        if force:
            _results(dest, "old")
        srcs = [_results(tmp_path / f"src{pair}-{k}", f"job{k}") for k in (0, 1)]
        with _held(dest.with_name("results.hpcenv-lock")):
            procs = [
                subprocess.Popen(
                    ["bash", str(script), str(s), str(dest), str(force)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for s in srcs
            ]
            deadline = time.monotonic() + 60
            while len(list(dest.parent.glob("results.hpcenv-tmp.*"))) < 2:
                assert time.monotonic() < deadline, "the racers never started copying"
                time.sleep(0.01)
            time.sleep(0.3)  # both now copy or wait on the lock
        outs = [p.communicate(timeout=120) for p in procs]
        codes = [p.returncode for p in procs]
        assert sorted(codes) == [0, 3], (codes, outs)
        winner = codes.index(0)
        assert (dest / "who").read_text() == f"job{winner}"
        assert "changed while this step ran" in outs[1 - winner][1]
        assert verify_manifest(dest, dest / MANIFEST_NAME) == []
        left = sorted(p.name for p in dest.parent.iterdir())
        assert left == ["results", "results.hpcenv-lock"], left


def test_stitch_writes_through_no_planted_symlink(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(3):
        (parts / f"part-{i}").write_text(f"{i}\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out" / "all.txt"
    out.parent.mkdir()
    for tag in ["1", "7", "42", "$$", "XXXXXX"]:  # the old predictable names and more
        (out.parent / f"all.txt.hpcenv-tmp.{tag}").symlink_to(victim)
    script = _step(tmp_path, "stitch")
    proc = _bash(script, parts, 3, "part-", "", out, 0)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "0\n1\n2\n" and victim.read_text() == "precious\n"
    assert not out.is_symlink()
    (out.parent / "link.txt").symlink_to(victim)  # OUTPUT itself a link: replaced, not followed
    forced = _bash(script, parts, 3, "part-", "", out.parent / "link.txt", 1)
    assert forced.returncode == 0, forced.stderr
    assert (
        victim.read_text() == "precious\n" and (out.parent / "link.txt").read_text() == "0\n1\n2\n"
    )
    assert _bash(script, parts, 3, "part-", "", out.parent / "link.txt", 0).returncode == 3


@contextlib.contextmanager
def _tmpfs(path: Path, size_kb: int) -> Iterator[Path]:
    why = "a small tmpfs is the full disk"
    need_root(why)
    for tool in ("mount", "umount"):
        need_tool(tool, why=why, how="util-linux provides it (apt-get install util-linux)")
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        need(f"a tmpfs mount (mount said: {proc.stderr.strip()})", why, AS_ROOT)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_leaves_no_temporary_files(tmp_path: Path) -> None:
    big = _results(tmp_path / "big", "x", files=10)  # 200 kB
    (big / "huge.bin").write_bytes(os.urandom(600_000))
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(4):
        (parts / f"part-{i}").write_bytes(os.urandom(200_000))
    manifest = write_manifest(big)
    with _tmpfs(tmp_path / "disk", 512) as disk:
        for name, args in (
            ("stage_out", (big, disk / "results", 0)),
            ("stage_in", (big, disk / "staged", manifest)),
            ("stitch", (parts, 4, "part-", "", disk / "all.bin", 0)),
        ):
            proc = _bash(_step(tmp_path, name), *args)
            assert proc.returncode != 0 and "No space left on device" in proc.stderr, name
            left = sorted(p.name for p in disk.iterdir() if not p.name.endswith(".hpcenv-lock"))
            assert left == [], (name, left)


# -- jobs: per-job node-local folders, removed at the end; chains not forced -------------------
def test_training_chain_does_not_force_by_default() -> None:
    chain = training_chain(name="m", dataset="/d", scratch="/s", command=["x"], results="/r")
    assert [j.stage_out.force for j in chain if j.stage_out] == [False, False]
    forced = training_chain(
        name="m", dataset="/d", scratch="/s", command=["x"], results="/r", force=True
    )
    assert [j.stage_out.force for j in forced if j.stage_out] == [True, True]


@pytest.mark.parametrize("fails", [False, True])
def test_node_local_folder_is_per_job_and_removed_at_the_end(tmp_path: Path, fails: bool) -> None:
    """The rendered job script, run by bash as Slurm would (SLURM_JOB_ID set): the command
    writes into {node_local}; the folder is named after the job id and is gone afterwards,
    also when the command fails."""
    from hpcenv.jobs.render import render_job
    from hpcenv.jobs.spec import JobSpec
    from hpcenv.site import load_site

    site = load_site("local")
    site = site.model_copy(
        update={
            "node_local": site.node_local.model_copy(  # type: ignore[union-attr]
                update={"path": "/tmp/$USER"}  # deeper: tests/test_node_local_path.py
            )
        }
    )
    seen = tmp_path / "seen"
    cmd = (
        f'echo "$1 $(stat -c %a "$1") $(stat -c %U "$1")" > {seen}; touch "$1/work"; '
        f"exit {1 if fails else 0}"
    )
    job = JobSpec(
        name="nl",
        command=["bash", "-c", cmd, "nl", "{node_local}"],
        launch="single",
        cores_per_rank=1,
        workdir=str(tmp_path / "w"),
    )
    script = tmp_path / "job.sh"
    script.write_text(render_job(site, job))
    (tmp_path / "w").mkdir()
    proc = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLURM_JOB_ID": "4711", "USER": "u1"},
    )
    assert proc.returncode == (1 if fails else 0), proc.stderr
    # in /tmp (shared, sticky): per user, per job, under a name nobody can guess; 0700, ours
    folder, mode, owner = seen.read_text().split()
    assert re.fullmatch(r"/tmp/hpcenv-u1-nl-4711-[0-9a-f]{16}", folder), folder
    assert (mode, owner) == ("700", pwd.getpwuid(os.getuid()).pw_name)
    assert not Path(folder).exists()
    assert "/tmp/hpcenv-u1-nl-4711-" not in script.read_text()  # drawn when the job runs
