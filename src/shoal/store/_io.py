"""Bounded-memory file helpers of the store (private).

Pages of a memory-mapped file that a process touches count in its resident set, so the writer
never streams through a big memory map: it appends to ``.npy`` files with plain writes
(:class:`NpyAppender`), reads row ranges with positioned reads (:func:`read_rows`) and gathers
scattered rows through short-lived maps of a bounded window (:func:`gather_rows`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["NpyAppender", "gather_rows", "meta_checksum", "npy_info", "read_rows", "write_meta"]

_CHECKSUM_PLACEHOLDER = "sha256:" + "0" * 64
_CHECKSUM_RE = re.compile(rb'"checksum": "sha256:[0-9a-f]{64}"\n}\s*$')


class NpyAppender:
    """Write a ``.npy`` file of known shape by appending row blocks with plain writes.

    ``close()`` checks that exactly ``shape[0]`` rows were written.
    """

    def __init__(self, path: str | os.PathLike, dtype: Any, shape: tuple[int, ...]) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": self.shape,
        }
        self._f = open(self.path, "wb")
        np.lib.format.write_array_header_1_0(self._f, header)
        self.rows = 0

    def append(self, rows: np.ndarray) -> None:
        a = np.ascontiguousarray(rows, dtype=self.dtype)
        if a.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path.name}: row shape {a.shape[1:]} != {self.shape[1:]}")
        a.tofile(self._f)
        self.rows += a.shape[0]

    def write_out(self) -> None:
        """Write the rows appended so far to storage and drop their pages from the page
        cache: dirty pages are charged to the process's memory cgroup until written back (a
        capped rank appending gigabytes of rows)."""
        self._f.flush()
        os.fdatasync(self._f.fileno())
        os.posix_fadvise(self._f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        self._f.close()
        if self.rows != self.shape[0]:
            raise RuntimeError(
                f"{self.path.name}: wrote {self.rows} rows, expected {self.shape[0]}"
            )

    def __enter__(self) -> NpyAppender:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._f.close()


def npy_info(path: str | os.PathLike) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, data offset) of a ``.npy`` file, from its header only."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if fortran:
            raise ValueError(f"{path}: fortran-ordered arrays are not supported")
        return np.dtype(dtype), tuple(shape), f.tell()


def read_rows(path: str | os.PathLike, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of a C-ordered ``.npy`` file, by a positioned read (no map)."""
    dtype, shape, offset = npy_info(path)
    row_items = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    stop = min(stop, shape[0])
    count = max(0, stop - start) * row_items
    a = np.fromfile(
        path, dtype=dtype, count=count, offset=offset + start * row_items * dtype.itemsize
    )
    return a.reshape((max(0, stop - start), *shape[1:]))


def gather_rows(
    path: str | os.PathLike,
    rows: np.ndarray,
    out: np.ndarray | None = None,
    *,
    block: int = 1 << 13,
) -> np.ndarray:
    """``array[rows]`` of a ``.npy`` file through short-lived memory maps of ``block`` rows at a
    time, so at most ``block`` touched rows count in the resident set at once."""
    rows = np.asarray(rows, dtype=np.int64)
    dtype, shape, offset = npy_info(path)
    if out is None:
        out = np.empty((rows.shape[0], *shape[1:]), dtype=dtype)
    if rows.size == 0 or shape[0] == 0:
        return out
    for s in range(0, rows.shape[0], block):
        mm = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
        out[s : s + block] = mm[rows[s : s + block]]
        del mm
    return out


def write_meta(path: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` with a ``checksum`` of its own bytes as the last field.

    The checksum is the SHA-256 of the file with the checksum value replaced by zeros, so any
    changed byte, in the checksum or elsewhere, is detected by :func:`meta_checksum`.
    """
    body = dict(meta)
    body.pop("checksum", None)
    body["checksum"] = _CHECKSUM_PLACEHOLDER
    text = json.dumps(body, indent=2) + "\n"
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    text = text.replace(f'"checksum": "{_CHECKSUM_PLACEHOLDER}"', f'"checksum": "{digest}"')
    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def meta_checksum(raw: bytes) -> tuple[str | None, str]:
    """(stored checksum or None when the field is missing/damaged, recomputed checksum)."""
    m = _CHECKSUM_RE.search(raw)
    if not m:
        return None, ""
    pos = m.start() + len(b'"checksum": "')
    stored = raw[pos : pos + 71].decode()
    blank = raw[:pos] + _CHECKSUM_PLACEHOLDER.encode() + raw[pos + 71 :]
    return stored, "sha256:" + hashlib.sha256(blank).hexdigest()
