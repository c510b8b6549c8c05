"""Numba kernels of the sampler's edge exclusion (private; numpy arrays only): counting and
drawing in-neighbours while skipping excluded ``(src, dst)`` edges, with the random streams of
:mod:`shoal.sample._kernels` (rows without exclusions draw exactly as there)."""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from shoal.sample._kernels import PARALLEL_MIN, _fill_row, _floyd, _mix64
from shoal.utils.jit import parallel_and_serial

__all__: list[str] = []


@numba.njit(cache=True, inline="always")
def _is_excluded(ex_keys, lo, hi, key):
    """Whether ``key`` is in the sorted ``ex_keys[lo:hi]`` (binary search)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if ex_keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo < ex_keys.shape[0] and ex_keys[lo] == key


def _count_excl_py(indptr, indices, nodes, n_dst, fanout, ex_keys, n_ids, counts, n_ex):
    """``_count`` without the excluded edges: ``ex_keys`` holds sorted ``dst * n_ids + src``
    keys; ``n_ex[i]`` = the excluded entries in frontier node ``i``'s row (every repeat of an
    excluded edge counts)."""
    num_rows = indptr.shape[0] - 1
    for i in prange(n_dst):
        v = nodes[i]
        n_ex[i] = 0
        if v >= num_rows:
            counts[i] = 0
            continue
        b, e = np.int64(indptr[v]), np.int64(indptr[v + 1])
        lo = np.searchsorted(ex_keys, np.int64(v) * n_ids)
        hi = np.searchsorted(ex_keys, (np.int64(v) + 1) * n_ids)
        if hi > lo:
            for o in range(b, e):
                if _is_excluded(ex_keys, lo, hi, np.int64(v) * n_ids + np.int64(indices[o])):
                    n_ex[i] += 1
        d = e - b - n_ex[i]
        counts[i] = d if (fanout < 0 or d <= fanout) else fanout


def _fill_excl_py(indptr, indices, nodes, n_dst, rowptr, key, picked, dst, ex_keys, n_ids, n_ex):
    """``_fill`` without the excluded edges. Rows with none draw exactly as ``_fill``; a row
    with some draws its ``k`` among the remaining entries (Floyd over their ranks)."""
    for i in prange(n_dst):
        start = rowptr[i]
        k = rowptr[i + 1] - start
        if k == 0:
            continue
        if n_ex[i] == 0:
            _fill_row(indptr, indices, nodes[i], i, start, k, key, picked, dst, False)
            continue
        v = nodes[i]
        b, e = np.int64(indptr[v]), np.int64(indptr[v + 1])
        lo = np.searchsorted(ex_keys, np.int64(v) * n_ids)
        hi = np.searchsorted(ex_keys, (np.int64(v) + 1) * n_ids)
        keep = np.empty(e - b - n_ex[i], dtype=np.int64)
        c = 0
        for o in range(b, e):
            if not _is_excluded(ex_keys, lo, hi, np.int64(v) * n_ids + np.int64(indices[o])):
                keep[c] = o
                c += 1
        d = c
        for j in range(k):
            dst[start + j] = i
        if k == d:
            for j in range(k):
                picked[start + j] = indices[keep[j]]
            continue
        _floyd(_mix64(key ^ np.uint64(i)), d, k, picked, start)
        for q in range(k):
            picked[start + q] = indices[keep[picked[start + q]]]


_count_excl_par, _count_excl_ser = parallel_and_serial(_count_excl_py)
_fill_excl_par, _fill_excl_ser = parallel_and_serial(_fill_excl_py)


def _count_excl(indptr, indices, nodes, n_dst, fanout, ex_keys, n_ids, counts, n_ex):
    (_count_excl_par if n_dst >= PARALLEL_MIN else _count_excl_ser)(
        indptr, indices, nodes, n_dst, fanout, ex_keys, n_ids, counts, n_ex
    )


def _fill_excl(indptr, indices, nodes, n_dst, rowptr, key, picked, dst, ex_keys, n_ids, n_ex):
    (_fill_excl_par if n_dst >= PARALLEL_MIN else _fill_excl_ser)(
        indptr, indices, nodes, n_dst, rowptr, key, picked, dst, ex_keys, n_ids, n_ex
    )
