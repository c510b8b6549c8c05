"""Numba kernels of the typed sampler (private; numpy arrays only): per-relation draws.

In a typed graph's in-CSR over global ids, a node's in-neighbours are sorted, and node types
are consecutive id ranges, so the neighbours of each source type form one contiguous run of
the row: found with two binary searches. When each (source type, destination type) pair has
one relation (:meth:`~shoal.data.hetero.HeteroSchema.pair_relations`), that run *is* the
relation's neighbour list, and a relation's fanout is drawn from it as the untyped sampler
draws from a whole row (:func:`shoal.sample._kernels._floyd`, selection sampling above
``_FLOYD_MAX``), from a stream keyed by (hop, frontier position, relation).

A link batch's own edges (and their reverses) must not carry messages: the excluded ``(src,
dst)`` edges are sorted keys ``dst * n_ids + src`` (the untyped sampler's,
:mod:`shoal.sample._exclude_kernels`; none: an empty array). A relation's run without
excluded entries draws as above; one with some draws its fanout among the remaining entries,
from the same stream, so the other in-neighbours still fill the fanout.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from shoal.sample._exclude_kernels import _is_excluded
from shoal.sample._kernels import _draw_run, _mix64
from shoal.utils.ranges import range_index


@numba.njit(cache=True, inline="always")
def _run(indices, b, e, lo, hi):
    """``[s, t)``: the positions of ``indices[b:e]`` (sorted) with values in ``[lo, hi)``."""
    x, y = b, e
    while x < y:  # first >= lo
        m = (x + y) >> 1
        if indices[m] < lo:
            x = m + 1
        else:
            y = m
    s = x
    y = e
    while x < y:  # first >= hi
        m = (x + y) >> 1
        if indices[m] < hi:
            x = m + 1
        else:
            y = m
    return s, x


@numba.njit(cache=True, inline="always")
def _excluded_in(indices, s, d, ex_keys, lo, hi, base):
    """Entries of ``indices[s:s + d]`` whose key ``base + entry`` is in ``ex_keys[lo:hi]``."""
    c = 0
    if hi > lo:
        for o in range(s, s + d):
            if _is_excluded(ex_keys, lo, hi, base + np.int64(indices[o])):
                c += 1
    return c


@numba.njit(cache=True, inline="always")
def _draw_kept(indices, s, d, x, k, ex_keys, lo, hi, base, key, i, r, picked, dst, at):
    """Frontier position ``i``'s ``k`` draws of relation ``r`` among the ``d - x`` entries
    of ``indices[s:s + d]`` not excluded (``x == 0``: of the whole run) into ``picked[at:]``,
    from the stream of (hop key, position, relation); ``dst`` gets ``i``."""
    for j in range(k):
        dst[at + j] = i
    state = _mix64(key ^ np.uint64(i) ^ _mix64(np.uint64(r + 1)))
    if x == 0:
        _draw_run(indices, s, d, k, state, picked, at, False)
        return
    keep = np.empty(d - x, dtype=np.int64)
    c = 0
    for o in range(s, s + d):
        if not _is_excluded(ex_keys, lo, hi, base + np.int64(indices[o])):
            keep[c] = o
            c += 1
    _draw_run(keep, 0, c, k, state, picked, at, False)
    for j in range(k):
        picked[at + j] = indices[picked[at + j]]


@numba.njit(cache=True, inline="always")
def _capped(d, fanout):
    return d if (fanout < 0 or d <= fanout) else fanout


def _count_py(
    indptr,
    indices,
    keys,
    nodes,
    n,
    offsets,
    row_type,
    by_dst_ptr,
    by_dst,
    rel_lo,
    rel_hi,
    fan,
    ex_keys,
    n_ids,
    counts,
):
    """counts[i] = sum over the relations into ``nodes[i]``'s type of min(fanout, run less
    its excluded entries). Relation ``r``'s run in a row is its entries whose ``keys`` lie in
    ``[rel_lo[r], rel_hi[r])``: a graph's in-CSR over global ids gives ``keys = indices`` and
    its source type's id range, with ``row_type`` empty (a node's type from ``offsets``); a
    typed store part's CSR gives ``keys = etypes`` (each row grouped by relation) and ``[r,
    r + 1)``, with ``row_type`` the type of every local row (keys over local ids). A node
    past the CSR's rows (a halo node) draws nothing."""
    last = indptr.shape[0] - 1
    for i in prange(n):
        v = nodes[i]
        c = 0
        if v < last:
            b, e = np.int64(indptr[v]), np.int64(indptr[v + 1])
            t = row_type[v] if row_type.shape[0] else range_index(offsets, v)
            base = np.int64(v) * n_ids
            lo = np.searchsorted(ex_keys, base)
            hi = np.searchsorted(ex_keys, base + n_ids)
            for q in range(by_dst_ptr[t], by_dst_ptr[t + 1]):
                r = by_dst[q]
                s, u = _run(keys, b, e, rel_lo[r], rel_hi[r])
                c += _capped(u - s - _excluded_in(indices, s, u - s, ex_keys, lo, hi, base), fan[r])
        counts[i] = c


def _fill_py(
    indptr,
    indices,
    keys,
    nodes,
    n,
    offsets,
    row_type,
    by_dst_ptr,
    by_dst,
    rel_lo,
    rel_hi,
    fan,
    rowptr,
    key,
    picked,
    dst,
    ex_keys,
    n_ids,
):
    """Draw each relation's fanout of ``nodes[i]``'s in-neighbours (the runs of
    :func:`_count_py`) into ``picked[rowptr[i]:]`` (entries of ``indices``), relation after
    relation in the schema's order; ``dst`` gets ``i``."""
    last = indptr.shape[0] - 1
    for i in prange(n):
        v = nodes[i]
        at = rowptr[i]
        if v >= last or rowptr[i + 1] == at:
            continue
        b, e = np.int64(indptr[v]), np.int64(indptr[v + 1])
        t = row_type[v] if row_type.shape[0] else range_index(offsets, v)
        base = np.int64(v) * n_ids
        lo = np.searchsorted(ex_keys, base)
        hi = np.searchsorted(ex_keys, base + n_ids)
        for q in range(by_dst_ptr[t], by_dst_ptr[t + 1]):
            r = by_dst[q]
            s, u = _run(keys, b, e, rel_lo[r], rel_hi[r])
            d = u - s
            x = _excluded_in(indices, s, d, ex_keys, lo, hi, base)
            k = _capped(d - x, fan[r])
            _draw_kept(indices, s, d, x, k, ex_keys, lo, hi, base, key, i, r, picked, dst, at)
            at += k


_count = numba.njit(cache=True, parallel=True, nogil=True)(_count_py)
_fill = numba.njit(cache=True, parallel=True, nogil=True)(_fill_py)
