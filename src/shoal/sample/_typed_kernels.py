"""Numba kernels of the typed sampler (private; numpy arrays only): per-relation draws.

In a typed graph's in-CSR over global ids, a node's in-neighbours are sorted, and node types
are consecutive id ranges, so the neighbours of each source type form one contiguous run of
the row: found with two binary searches. When each (source type, destination type) pair has
one relation (:meth:`~shoal.data.hetero.HeteroSchema.pair_relations`), that run *is* the
relation's neighbour list, and a relation's fanout is drawn from it as the untyped sampler
draws from a whole row (:func:`shoal.sample._kernels._floyd`, selection sampling above
``_FLOYD_MAX``), from a stream keyed by (hop, frontier position, relation).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from shoal.sample._kernels import _FLOYD_MAX, _below, _floyd, _mix64, _next
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
    t = x
    return s, t


@numba.njit(cache=True, inline="always")
def _relation_draw(indices, b, e, offsets, st, fanout):
    """``(start, run length, draws)`` of the relation whose sources are of type ``st`` in the
    row ``indices[b:e]``: its run, and ``min(fanout, run)`` (all of it for a negative fanout)."""
    s, u = _run(indices, b, e, offsets[st], offsets[st + 1])
    d = u - s
    return s, d, (d if (fanout < 0 or d <= fanout) else fanout)


def _count_py(indptr, indices, nodes, n, offsets, by_dst_ptr, by_dst, src_type, fan, counts):
    """counts[i] = sum over the relations into ``nodes[i]``'s type of min(fanout, run)."""
    rows = indptr.shape[0] - 1
    for i in prange(n):
        v = nodes[i]
        c = 0
        if v < rows:
            b, e = np.int64(indptr[v]), np.int64(indptr[v + 1])
            t = range_index(offsets, v)
            for q in range(by_dst_ptr[t], by_dst_ptr[t + 1]):
                r = by_dst[q]
                c += _relation_draw(indices, b, e, offsets, src_type[r], fan[r])[2]
        counts[i] = c


def _fill_py(
    indptr, indices, nodes, n, offsets, by_dst_ptr, by_dst, src_type, fan, rowptr, key, picked, dst
):
    """Draw each relation's fanout of ``nodes[i]``'s in-neighbours into ``picked[rowptr[i]:]``
    (global ids), relation after relation in the schema's order; ``dst`` gets ``i``."""
    rows = indptr.shape[0] - 1
    for i in prange(n):
        v = nodes[i]
        at = rowptr[i]
        if v >= rows or rowptr[i + 1] == at:
            continue
        b, e = np.int64(indptr[v]), np.int64(indptr[v + 1])
        t = range_index(offsets, v)
        for q in range(by_dst_ptr[t], by_dst_ptr[t + 1]):
            r = by_dst[q]
            s, d, k = _relation_draw(indices, b, e, offsets, src_type[r], fan[r])
            for j in range(k):
                dst[at + j] = i
            state = _mix64(key ^ np.uint64(i) ^ _mix64(np.uint64(r + 1)))
            if k == d:
                for j in range(k):
                    picked[at + j] = indices[s + j]
            elif k <= _FLOYD_MAX:
                _floyd(state, d, k, picked, at)
                for j in range(k):
                    picked[at + j] = indices[s + picked[at + j]]
            else:
                need = k
                filled = 0
                for j in range(d):
                    state, bits = _next(state)
                    if _below(bits, d - j) < need:
                        picked[at + filled] = indices[s + j]
                        filled += 1
                        need -= 1
                        if need == 0:
                            break
            at += k


_count = numba.njit(cache=True, parallel=True, nogil=True)(_count_py)
_fill = numba.njit(cache=True, parallel=True, nogil=True)(_fill_py)
