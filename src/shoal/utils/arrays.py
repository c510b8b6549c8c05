"""Set operations on integer id arrays, by sorting.

numpy 2's ``np.unique`` (without ``return_*`` options) and ``np.union1d`` go through a hash
set, which is several times slower than sorting for integer ids drawn from a large range
(docs/measurements.md#reading-rows-from-disk), far slower at millions of distinct ids. Node
ids are exactly that case, so shoal uses these instead (a plain ``np.unique`` stays only
where the values are few: part and rank numbers). Results equal numpy's: sorted, distinct,
the input's dtype.
"""

from __future__ import annotations

import numpy as np

__all__ = ["descending_order", "setdiff_sorted", "union_sorted", "unique_sorted"]


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` (sorted distinct values of the flattened array), by one sort."""
    s = np.sort(np.asarray(a).ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=np.bool_)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def union_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)``: the sorted distinct values of both."""
    return unique_sorted(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))


def setdiff_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.setdiff1d(a, b)``: the sorted distinct values of ``a`` not in ``b``."""
    u = unique_sorted(a)
    return u[~np.isin(u, unique_sorted(b), assume_unique=True)]


def descending_order(values: np.ndarray) -> np.ndarray:
    """``np.argsort(-values, kind="stable")``: indices by decreasing value, ties by
    increasing index. Whole values in ``[0, 65535]`` (node degrees, mostly) are sorted as
    16-bit keys, which numpy sorts by radix in linear time (a comparison sort of 28M
    float32 degrees took seconds at the quarter of papers100M's start)."""
    v = np.asarray(values).ravel()
    if v.size and (np.issubdtype(v.dtype, np.integer) or np.issubdtype(v.dtype, np.floating)):
        whole = np.issubdtype(v.dtype, np.integer) or bool(np.all(v == np.floor(v)))
        if whole and v.min() >= 0 and v.max() <= 65535:
            key = v.astype(np.uint16)
            np.subtract(np.uint16(65535), key, out=key)
            return np.argsort(key, kind="stable")
    if np.issubdtype(v.dtype, np.unsignedinteger):
        v = v.astype(np.int64)
    return np.argsort(-v, kind="stable")
