"""Compact feature rows decoded into float32 (docs/format.md#feature-dtypes): the readers'
one entry to the dtypes of :mod:`shoal.utils.featdtype`.

Rows are stored (on disk, in caches, in windows) as float32, float16, bfloat16 (``uint16``
bits) or int8 with one float32 scale per row, and decoded by numba kernels straight into the
caller's float32 output, with no float32 copy in between: the model always computes in
float32. The stored numpy dtype says how (``uint16`` is bfloat16); int8 rows need their
``scales``, indexed like the rows they decode.
"""

from __future__ import annotations

import numpy as np

from shoal.rows import _kernels as K
from shoal.utils.featdtype import of_stored

__all__ = ["decode_cached", "decode_rows", "source_scales"]


def _out_ok(out: np.ndarray, n: int, dim: int) -> None:
    if out.dtype != np.float32 or out.ndim != 2 or out.shape[0] < n or out.shape[1] != dim:
        raise ValueError(f"out must be float32 with >= {n} rows and {dim} columns")


def decode_rows(
    src: np.ndarray, ids: np.ndarray, out: np.ndarray, *, scales: np.ndarray | None = None
) -> np.ndarray:
    """``out[i] = decode(src[ids[i]])`` for every ``i`` (``ids`` int64, any order), rows in
    parallel; ``src`` stored rows of any feature dtype, ``scales`` (int8 only) indexed like
    ``src``'s rows. Returns ``out``."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    _out_ok(out, ids.shape[0], src.shape[1])
    kind = of_stored(src.dtype)
    if kind.code == 0:
        K._gather_rows(src, ids, out)
    elif kind.scaled:
        if scales is None:
            raise ValueError("int8 rows need their scales")
        K._gather8(src, ids, out, np.asarray(scales, np.float32))
    else:
        K._gather16(src.view(np.uint16), ids, out, kind.code == 1)
    return out


def decode_cached(
    ids: np.ndarray,
    slot: np.ndarray,
    cache: np.ndarray,
    cold: np.ndarray,
    rows: np.ndarray,
    out: np.ndarray,
    *,
    scales: np.ndarray | None = None,
) -> int:
    """Row ``ids[i]`` decoded into ``out[i]`` from ``cache[slot[ids[i]]]`` when cached, else
    from ``rows`` (the window's rows of the sorted ids ``cold``); ``scales`` (int8) indexed by
    row id. Returns the number of cached rows, or ``-1 - i`` when ``ids[i]`` is in neither."""
    kind = of_stored(cache.dtype)
    if kind.code == 0:
        return int(K._gather_cached(ids, slot, cache, cold, rows, out))
    if kind.scaled:
        if scales is None:
            raise ValueError("int8 rows need their scales")
        return int(K._gather_cached8(ids, slot, cache, cold, rows, out, scales))
    c16, r16 = cache.view(np.uint16), rows.view(np.uint16)
    return int(K._gather_cached16(ids, slot, c16, cold, r16, out, kind.code == 1))


def source_scales(source: object) -> np.ndarray | None:
    """The per-row float32 scales of a row source's int8 rows (its ``scales`` attribute), or
    None (not int8, or a source without one)."""
    if np.dtype(getattr(source, "dtype", np.float32)) != np.int8:
        return None
    scales = getattr(source, "scales", None)
    if scales is None:
        raise ValueError(f"int8 rows of {getattr(source, 'path', source)!r} without their scales")
    return scales
