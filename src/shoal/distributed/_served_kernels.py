"""Numba kernels of the owner-served blocked layers (:mod:`shoal.distributed.served`,
:mod:`shoal.distributed.pulled`): bucketing a block's in-edges by (sweep step, owner rank)
and numbering each bucket's distinct sources; marking a block's sources, renumbering its
in-edges to served indices and finding each list's run per owner."""

from __future__ import annotations

import numba
import numpy as np

from shoal.training._kernels import _range_ids


@numba.njit(cache=True, nogil=True)
def _served_index(u, num_core, me_base, halo_served):
    if u < num_core:
        return me_base + u
    return halo_served[u - num_core]


@numba.njit(cache=True, nogil=True)
def _owner(t, rank_offset):
    o = 0
    while rank_offset[o + 1] <= t:
        o += 1
    return o


@numba.njit(cache=True, nogil=True)
def _count_served(indptr, at, indices, num_core, me_base, halo_served, rank_offset, R, ptr):
    """``ptr[b + 1]`` = in-edges of the targets ``at`` (rows of ``indptr``) whose source lies
    in bucket ``b = step * W + owner`` (the source's served index ``t``: its owner's rows
    ``[rank_offset[o], rank_offset[o + 1])``, its step ``(t - rank_offset[o]) // R``), then
    prefix sums; returns the total."""
    W = rank_offset.shape[0] - 1
    for i in range(at.shape[0]):
        v = at[i]
        for e in range(indptr[v], indptr[v + 1]):
            t = _served_index(indices[e], num_core, me_base, halo_served)
            o = _owner(t, rank_offset)
            ptr[((t - rank_offset[o]) // R) * W + o + 1] += 1
    for b in range(1, ptr.shape[0]):
        ptr[b] += ptr[b - 1]
    return ptr[-1]


@numba.njit(cache=True, nogil=True)
def _bucket_served(
    indptr, at, indices, num_core, me_base, halo_served, rank_offset, R, ptr, off, dst
):
    """Fill the buckets of :func:`_count_served`: ``off`` the source's offset in its step's
    range of its owner's rows, ``dst`` the target's position in ``at`` (targets stay in
    order within a bucket)."""
    W = rank_offset.shape[0] - 1
    fill = ptr[:-1].copy()
    for i in range(at.shape[0]):
        v = at[i]
        for e in range(indptr[v], indptr[v + 1]):
            t = _served_index(indices[e], num_core, me_base, halo_served)
            o = _owner(t, rank_offset)
            r = t - rank_offset[o]
            s = r // R
            b = s * W + o
            k = fill[b]
            off[k] = r - s * R
            dst[k] = i
            fill[b] = k + 1


@numba.njit(cache=True, nogil=True)
def _number_buckets(ptr, off, mark, req_ptr, req):
    """For every bucket ``b`` (edges ``ptr[b]:ptr[b + 1]``): its distinct offsets, in
    increasing order, appended to ``req`` (``req_ptr[b]:req_ptr[b + 1]``), and each edge's
    ``off`` replaced by its offset's position among them (:func:`~shoal.training._kernels.
    _range_ids`). ``mark`` (one entry per offset of a range) must be all -1 and is left so.
    Returns the number of requests."""
    k = 0
    for b in range(ptr.shape[0] - 1):
        req_ptr[b] = k
        lo, hi = ptr[b], ptr[b + 1]
        if hi > lo:
            k += _range_ids(off[lo:hi], 0, mark, req[k:], off[lo:hi])
    req_ptr[ptr.shape[0] - 1] = k
    return k


@numba.njit(cache=True, nogil=True)
def _mark_sources(idx, mark):
    """``mark[u] = True`` for every source ``u`` in ``idx`` (a block's compact in-edges)."""
    for e in range(idx.shape[0]):
        mark[idx[e]] = True


@numba.njit(cache=True, nogil=True)
def _owner_lists(ids, cur, end, order, rank_offset, out):
    """Each owner's runs ``ids[cur[o, i]:end[o, i]]`` (served indices) as offsets among its
    rows (``- rank_offset[o]``) into ``out``, owner by owner in ``order``, targets in order."""
    k = 0
    for j in range(order.shape[0]):
        o = order[j]
        base = rank_offset[o]
        for i in range(cur.shape[1]):
            for e in range(cur[o, i], end[o, i]):
                out[k] = ids[e] - base
                k += 1


@numba.njit(cache=True, nogil=True)
def _to_served(ids, num_core, me_base, halo_served):
    """``ids[e]`` (a part's local ids: core, then halo) -> its served index, in place."""
    for e in range(ids.shape[0]):
        ids[e] = _served_index(ids[e], num_core, me_base, halo_served)


@numba.njit(cache=True, nogil=True)
def _owner_runs(ptr, ids, rank_offset, cur, end):
    """Each list ``ids[ptr[i]:ptr[i + 1]]`` (served indices) as runs, one per owner rank:
    ``cur[o, i]:end[o, i]`` its entries owned by ``o`` (empty when none). False when an
    owner's entries are not one non-decreasing run (the lists need sorting)."""
    W = rank_offset.shape[0] - 1
    seen = np.zeros(W, np.bool_)
    for i in range(ptr.shape[0] - 1):
        for o in range(W):
            cur[o, i] = ptr[i]
            end[o, i] = ptr[i]
            seen[o] = False
        prev = -1
        for e in range(ptr[i], ptr[i + 1]):
            o = _owner(ids[e], rank_offset)
            if o != prev:
                if seen[o]:
                    return False
                seen[o] = True
                cur[o, i] = e
                prev = o
            elif ids[e] < ids[e - 1]:
                return False
            end[o, i] = e + 1
    return True


@numba.njit(cache=True, nogil=True, parallel=True)
def _scatter_rows(src, at, out):
    """``out[at[i]] = src[i]`` (distinct ``at``), rows in parallel."""
    f = src.shape[1]
    for i in numba.prange(src.shape[0]):
        r = at[i]
        for j in range(f):
            out[r, j] = src[i, j]
