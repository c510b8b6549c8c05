"""Rows of an ``(N, F)`` array gathered by id into a float32 buffer: copied from memory (or a
memory map's pages: :func:`gather_rows`), or read from a mapped file with one positioned read
per row, never through this process's resident set (:func:`read_rows`). Rows stored in a
compact dtype (float16, bfloat16, int8 with its scales) are decoded into the float32 buffer
as they are gathered (:mod:`shoal.rows.decode`)."""

from __future__ import annotations

import os

import numpy as np

from shoal.rows import _kernels as K
from shoal.rows.decode import decode_rows, source_scales
from shoal.rows.direct import RowFile
from shoal.rows.source import RowSource
from shoal.utils.featdtype import scales_of

__all__ = ["gather_rows", "read_rows", "source_rows"]


def gather_rows(
    src: np.ndarray,
    ids: np.ndarray,
    out: np.ndarray | None = None,
    *,
    normalize: bool = False,
    scales: np.ndarray | None = None,
) -> np.ndarray:
    """``out[:len(ids)] = src[ids]`` as float32 (``out`` default: a new array).

    ``src`` is any ``(N, F)`` array of a feature dtype (a memory map is fine), decoded as
    gathered; ``ids`` any order. int8 rows take ``scales`` (indexed like ``src``'s rows;
    default: those stored beside ``src``'s file, :func:`~shoal.utils.featdtype.scales_of`).
    ``normalize=True`` divides each gathered row by its sum (Kipf & Welling's row
    normalisation of bag-of-words features), leaving all-zero rows alone.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if src.ndim != 2:
        raise ValueError(f"features must be 2-D, got shape {src.shape}")
    n = ids.shape[0]
    if out is None:
        out = np.empty((n, src.shape[1]), dtype=np.float32)
    elif out.shape[0] < n or out.shape[1] != src.shape[1] or out.dtype != np.float32:
        raise ValueError(f"out must be float32 with >= {n} rows and {src.shape[1]} columns")
    if n and (ids.min() < 0 or ids.max() >= src.shape[0]):
        raise ValueError(f"row ids must be in [0, {src.shape[0]})")
    if scales is None and src.dtype == np.int8:
        scales = scales_of(src)
    decode_rows(src, ids, out, scales=scales)
    if normalize:
        K._row_normalize(out, n)
    return out


def read_rows(
    src: np.ndarray,
    ids: np.ndarray,
    out: np.ndarray | None = None,
    *,
    normalize: bool = False,
    at: np.ndarray | None = None,
    scales: np.ndarray | None = None,
) -> np.ndarray:
    """``out[:len(ids)] = src[ids]`` as float32, like :func:`gather_rows`, but a memory-mapped
    float32 ``src`` is read with one positioned read (``pread``) per row instead of page
    faults: the rows land in ``out`` and the page cache, never in this process's resident set
    (a page fault maps whole (large) folios around each row, so gathering a few thousand
    random rows from a mapped file can map all of it). Other arrays go to :func:`gather_rows`.

    ``at`` (positions in ``out``) writes row ``ids[i]`` to ``out[at[i]]`` instead (no
    temporary copy); ``normalize`` then applies to those rows only. Rows of a compact dtype
    are gathered from the map and decoded (:func:`gather_rows`, ``scales`` for int8).
    """
    ids = np.asarray(ids, dtype=np.int64)
    n = ids.shape[0]
    where = RowFile.of(src) if src.dtype == np.float32 else None
    if where is None:
        if at is None:
            return gather_rows(src, ids, out, normalize=normalize, scales=scales)
        out[at] = gather_rows(src, ids, normalize=normalize, scales=scales)
        return out
    rows = n if at is None else (int(at.max()) + 1 if len(at) else 0)
    if out is None:
        out = np.empty((rows, src.shape[1]), dtype=np.float32)
    elif out.shape[0] < rows or out.shape[1] != src.shape[1] or out.dtype != np.float32:
        raise ValueError(f"out must be float32 with >= {rows} rows and {src.shape[1]} columns")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    if n and (ids.min() < 0 or ids.max() >= src.shape[0]):
        raise ValueError(f"row ids must be in [0, {src.shape[0]})")
    name, first, stride = where.path, where.offset, where.stride
    row_bytes = src.shape[1] * 4
    fd = os.open(name, os.O_RDONLY)
    try:
        if (
            at is None
            and n > 1
            and stride == row_bytes
            and ids[-1] - ids[0] == n - 1
            and (np.diff(ids) == 1).all()
        ):
            # one run of consecutive rows (a sequential pass): one read
            got = os.preadv(fd, [memoryview(out[:n]).cast("B")], first + int(ids[0]) * stride)
            bad = 0 if got == n * row_bytes else n
        else:
            dest = np.arange(n, dtype=np.int64) if at is None else np.asarray(at, np.int64)
            bad = K._pread_rows(fd, first, stride, row_bytes, ids, dest, out)
    finally:
        os.close(fd)
    if bad:
        raise OSError(f"{name}: {bad} rows could not be read (file truncated?)")
    if normalize:
        if at is None:
            K._row_normalize(out, n)
        else:
            out[at] = gather_rows(out, np.asarray(at, np.int64), normalize=True)
    return out


def source_rows(
    src: RowSource, ids: np.ndarray, out: np.ndarray | None = None, *, normalize: bool = False
) -> np.ndarray:
    """``out[:len(ids)]`` = rows ``ids`` (any order, repeats allowed) of a row source, by one
    planned read of their sorted distinct ids (:meth:`RowSource.read`); float32 out (compact
    rows are read as stored, then decoded into ``out``)."""
    ids = np.asarray(ids, dtype=np.int64)
    n = ids.shape[0]
    if out is None:
        out = np.empty((n, src.dim), np.float32)
    if n == 0:
        return out[:0]
    uniq, inv = np.unique(ids, return_inverse=True)
    if len(uniq) == n and np.dtype(src.dtype) == np.float32:  # straight into place
        order = np.argsort(ids, kind="stable")
        src.read(uniq, out, dest=order)
    else:
        buf = np.empty((len(uniq), src.dim), src.dtype)
        src.read(uniq, buf)
        scales = source_scales(src)
        decode_rows(buf, inv.reshape(-1), out, scales=None if scales is None else scales[uniq])
    if normalize:
        K._row_normalize(out, n)
    return out[:n]
