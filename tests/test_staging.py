"""Data staging: manifests (Python and shell agree), stage-in verification, atomic stage-out and
stitching. The step scripts are the ones jobs run, executed here with real bash + coreutils."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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
    lines = manifest.read_text().splitlines()
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
    assert proc.stdout.splitlines() == manifest_lines(data)
    # sha256sum -c accepts the manifest once the size column is dropped.
    manifest = write_manifest(data)
    check = _bash("-c", 'cd "$1" && sed -E "s/^[0-9]+  //" "$2" | sha256sum -c --strict -', "x",
                  data, manifest)  # fmt: skip
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
    ok = _bash(script, results, dest, 0, "101")
    assert ok.returncode == 0, ok.stderr
    assert verify_manifest(dest, dest / MANIFEST_NAME) == []
    before = (dest / MANIFEST_NAME).read_text()

    (results / "a.bin").write_bytes(b"new results")
    again = _bash(script, results, dest, 0, "102")
    assert again.returncode == 3 and "not overwriting" in again.stderr
    assert (dest / MANIFEST_NAME).read_text() == before

    forced = _bash(script, results, dest, 1, "103")
    assert forced.returncode == 0, forced.stderr
    assert (dest / "a.bin").read_bytes() == b"new results"
    assert verify_manifest(dest, dest / MANIFEST_NAME) == []
    leftovers = [p.name for p in dest.parent.iterdir() if p.name != "run1"]
    assert leftovers == []


def test_publish_refuses_a_target_that_appears_meanwhile(tmp_path: Path) -> None:
    """The final rename itself never replaces (mv -n -T = RENAME_NOREPLACE)."""
    lib = templates_dir() / "jobs" / "_lib.sh"
    tmp = tmp_path / "out.tmp"
    tmp.write_text("mine")
    target = tmp_path / "out"
    target.write_text("theirs")
    proc = _bash("-c", f'source "{lib}"; hpcenv_publish "$1" "$2" 0 t', "x", tmp, target)
    assert proc.returncode == 3 and target.read_text() == "theirs" and not tmp.exists()


def test_stitch_orders_parts_and_checks_them(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(12):
        (parts / f"part-{i}.csv").write_text(f"{i}\n")
    out = tmp_path / "out" / "all.csv"
    script = _step(tmp_path, "stitch")
    proc = _bash(script, parts, 12, "part-", ".csv", out, 0, "7")
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "".join(f"{i}\n" for i in range(12))  # 10 after 9, not after 1
    assert _bash(script, parts, 12, "part-", ".csv", out, 0, "8").returncode == 3
    (parts / "part-5.csv").unlink()
    missing = _bash(script, parts, 12, "part-", ".csv", tmp_path / "o2", 0, "9")
    assert missing.returncode == 2 and "missing part" in missing.stderr


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed")
@pytest.mark.parametrize("name", ["stage_in", "stage_out", "stitch"])
def test_step_scripts_pass_shellcheck(tmp_path: Path, name: str) -> None:
    proc = subprocess.run(
        ["shellcheck", str(_step(tmp_path, name))], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_chains_have_the_documented_shape() -> None:
    chain = training_chain(name="mnist", dataset="/proj/mnist", scratch="/scratch/$USER",
                           command=["python3", "train.py"], results="/proj/results/r1")  # fmt: skip
    assert [j.name for j in chain] == ["mnist-stage-in", "mnist", "mnist-stage-out"]
    assert chain[0].stage_in and not chain[0].stage_in.per_node
    assert chain[1].stage_in and chain[1].stage_in.source == "/scratch/$USER/mnist/dataset"
    assert chain[2].stage_out and chain[2].stage_out.dest == "/proj/results/r1"
    arr = array_chain(name="inf", command=["x"], chunks=4, parts="/p", output="/o")
    assert arr[0].array and arr[0].array.count == 4 and arr[1].stitch and arr[1].stitch.count == 4
