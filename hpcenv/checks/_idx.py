"""IDX files (the MNIST format): big-endian header, magic = (type code << 8) | ndim.

``train-images-idx3-ubyte`` has magic 2051 (ubyte, 3 dims), ``*-labels-idx1-ubyte`` 2049.
Stdlib + numpy only: imported by the in-image checks and by the host-side data step.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

_TYPE_CODES: dict[int, str] = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}
_CODE_OF = {np.dtype(v).str.lstrip("<>|"): k for k, v in _TYPE_CODES.items()}


def idx_magic(dtype: np.dtype, ndim: int) -> int:
    """The magic number IDX uses for arrays of ``dtype`` with ``ndim`` dimensions."""
    code = _CODE_OF.get(np.dtype(dtype).str.lstrip("<>|"))
    if code is None:
        raise ValueError(f"IDX has no type code for dtype {np.dtype(dtype)}")
    if not 1 <= ndim <= 255:
        raise ValueError(f"IDX arrays have 1..255 dimensions, not {ndim}")
    return (code << 8) | ndim


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzip-compressed when ``path`` ends in ``.gz``)."""
    path = Path(path)
    arr = np.asarray(array)
    magic = idx_magic(arr.dtype, arr.ndim)
    big = arr.astype(_TYPE_CODES[magic >> 8], copy=False)
    data = struct.pack(f">I{arr.ndim}I", magic, *arr.shape) + np.ascontiguousarray(big).tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file into a native-endian array; checks magic, dimensions and length."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX header")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in _TYPE_CODES or ndim == 0:
        raise ValueError(f"{path}: bad IDX magic {int.from_bytes(data[:4], 'big')}")
    head = 4 + 4 * ndim
    if len(data) < head:
        raise ValueError(f"{path}: header truncated")
    shape = struct.unpack(f">{ndim}I", data[4:head])
    dtype = np.dtype(_TYPE_CODES[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - head != expected:
        raise ValueError(f"{path}: {len(data) - head} data bytes, header {shape} needs {expected}")
    arr = np.frombuffer(data, dtype=dtype, offset=head).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))
