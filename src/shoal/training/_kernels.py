"""Numba kernels of the blocked layer-wise inference (:mod:`shoal.training.blocked`):
bucketing a block's in-edges by source range, the ids of one range, scatter-adding messages,
pulling in-neighbours' rows held in memory, and marking in-neighbours (the nodes each layer
must compute)."""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
from numba import prange

from shoal.utils._intrinsics import bfloat_to_float, half_to_float, prefetch_at, prefetch_row
from shoal.utils.jit import renamed


@numba.njit(cache=True, nogil=True, inline="always")
def _target_run(dst, p, parts):
    """Edges ``[a, b)`` of thread ``p`` of ``parts`` over sorted ``dst``: an equal share with
    both ends moved forward to target boundaries, so no target is split between threads."""
    m = dst.shape[0]
    a = m * p // parts
    b = m * (p + 1) // parts
    while 0 < a < m and dst[a] == dst[a - 1]:
        a += 1
    while 0 < b < m and dst[b] == dst[b - 1]:
        b += 1
    return a, b


#: edges ahead whose message row and accumulator row :func:`_scatter_add` prefetches: both
#: are read at random when a step's sources or a block's targets outgrow the caches
SCATTER_AHEAD = 8


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_edge(acc, msg, dst, pos, e, b):
    if e + SCATTER_AHEAD < b:
        prefetch_row(msg, pos[e + SCATTER_AHEAD])
        prefetch_row(acc, dst[e + SCATTER_AHEAD])


@numba.njit(cache=True, nogil=True, parallel=True)
def _scatter_add(acc, msg, dst, pos):
    """``acc[dst[e]] += msg[pos[e]]`` for every edge ``e``; ``dst`` must be sorted (edges of
    one target together), so threads take disjoint runs of targets."""
    m = dst.shape[0]
    f = acc.shape[1]
    parts = 8 if m >= 8192 else 1
    for p in prange(parts):
        a, b = _target_run(dst, p, parts)
        for e in range(a, b):
            _prefetch_edge(acc, msg, dst, pos, e, b)
            d = dst[e]
            s = pos[e]
            for j in range(f):
                acc[d, j] += msg[s, j]


def _scatter_add16_py(acc, msg, dst, pos, half):
    """:func:`_scatter_add` of 16-bit rows ``msg`` (uint16 bits: float16 when ``half``,
    else bfloat16), each widened to float32 as it is added."""
    m = dst.shape[0]
    f = acc.shape[1]
    parts = 8 if m >= 8192 else 1
    for p in prange(parts):
        a, b = _target_run(dst, p, parts)
        if half:  # one loop per kind: a branch inside the row loop keeps it scalar
            for e in range(a, b):
                _prefetch_edge(acc, msg, dst, pos, e, b)
                d = dst[e]
                s = pos[e]
                for j in range(f):
                    acc[d, j] += half_to_float(msg[s, j])
        else:
            for e in range(a, b):
                _prefetch_edge(acc, msg, dst, pos, e, b)
                d = dst[e]
                s = pos[e]
                for j in range(f):
                    acc[d, j] += bfloat_to_float(msg[s, j])


_scatter_add16 = numba.njit(cache=True, nogil=True, parallel=True)(_scatter_add16_py)


@numba.njit(cache=True, nogil=True)
def _count_by_range(indptr, block, indices, range_rows, ptr):
    """``ptr[r + 1]`` = in-edges of nodes ``block`` whose source lies in range ``r``
    (sources ``[r * range_rows, (r + 1) * range_rows)``), then prefix sums; returns the total."""
    for i in range(block.shape[0]):
        t = block[i]
        for e in range(indptr[t], indptr[t + 1]):
            ptr[indices[e] // range_rows + 1] += 1
    for r in range(1, ptr.shape[0]):
        ptr[r] += ptr[r - 1]
    return ptr[-1]


@numba.njit(cache=True, nogil=True)
def _bucket_by_range(indptr, indices, block, range_rows, ptr, src, dst):
    """The in-edges of ``block`` grouped by source range (counting sort; ``ptr`` from
    :func:`_count_by_range`): ``src`` the source's offset in its range (int32: a range has
    fewer than 2**31 rows), ``dst`` the target's position in ``block``; within a range edges
    stay in target order."""
    fill = ptr[:-1].copy()
    for i in range(block.shape[0]):
        t = block[i]
        for e in range(indptr[t], indptr[t + 1]):
            u = indices[e]
            r = u // range_rows
            k = fill[r]
            src[k] = u - r * range_rows
            dst[k] = i
            fill[r] = k + 1


@numba.njit(cache=True, nogil=True)
def _range_ids(src, lo, mark, ids, pos):
    """Distinct values of ``src`` (all in ``[lo, lo + len(mark))``) in increasing order into
    ``ids``, and ``pos[e]`` = the position of ``src[e]`` among them, without sorting (a mark
    per value; ``mark`` must be all -1 and is left so). Returns the number of distinct values."""
    for e in range(src.shape[0]):
        mark[src[e] - lo] = 0
    k = 0
    for u in range(mark.shape[0]):
        if mark[u] == 0:
            mark[u] = k
            ids[k] = lo + u
            k += 1
    for e in range(src.shape[0]):
        pos[e] = mark[src[e] - lo]
    for i in range(k):
        mark[ids[i] - lo] = -1
    return k


@numba.njit(cache=True, nogil=True)
def _copy_lists(indptr, indices, nodes, ptr, out):
    """``out[ptr[i]:ptr[i + 1]]`` = the in-neighbour list of ``nodes[i]``."""
    for i in range(nodes.shape[0]):
        a = indptr[nodes[i]]
        for k in range(ptr[i + 1] - ptr[i]):
            out[ptr[i] + k] = indices[a + k]


@numba.njit(cache=True, nogil=True)
def _mark_in_neighbours(indptr, indices, nodes, mark):
    """``mark[u] = True`` for every in-neighbour ``u`` of ``nodes`` (CSR rows)."""
    for i in range(nodes.shape[0]):
        v = nodes[i]
        for e in range(indptr[v], indptr[v + 1]):
            mark[indices[e]] = True


# ------------------------------------------------------------------ pulling in-neighbours
# A block of targets whose sources' rows are all in memory is summed straight from them:
# each target pulls its in-neighbours' rows (decoded from their stored dtype on the fly,
# weighted) into its own accumulator row; no edge is bucketed, no message materialised.
# The rows are read at random, so a cursor runs PULL_AHEAD edges ahead prefetching them.
# ``w`` is a weight per source id (empty: 1); int8 rows carry ``scales`` by source id.

#: edges ahead whose source rows are prefetched (4-32 measured alike; default 8)
PULL_AHEAD = 8
#: targets ahead whose list positions and first rows a chunked pull prefetches (default 8)
VISIT_AHEAD = 8


@numba.njit(cache=True, nogil=True, inline="always")
def _ahead(indptr, indices, targets, b, i, e, x, w):
    """Move the look-ahead cursor ``(i, e)`` (target ``i`` of ``[.., b)``, its edge ``e``) one
    edge on and prefetch that edge's source row; returns the new cursor."""
    e += 1
    while i < b and e >= indptr[targets[i] + 1]:
        i += 1
        if i < b:
            e = indptr[targets[i]]
    if i < b:
        u = indices[e]
        prefetch_row(x, u)
        if w.shape[0]:
            prefetch_row(w, u)
    return i, e


@numba.njit(cache=True, nogil=True, inline="always")
def _start(indptr, indices, targets, a, b, x, w):
    """The look-ahead cursor :data:`PULL_AHEAD` edges into targets ``[a, b)``, prefetching."""
    i, e = a, indptr[targets[a]] - 1 if a < b else 0
    for _ in range(PULL_AHEAD):
        i, e = _ahead(indptr, indices, targets, b, i, e, x, w)
    return i, e


# One kernel per stored kind and weighting, not one choosing either inside the edge loop: a
# single kernel branching per value (an overload per dtype, the float16/bfloat16 choice and
# the int8 scale tested inside) kept LLVM from vectorising the row and ran 3x slower (156
# against 50 ns an edge). :func:`pull_kernel` builds each variant from one loop, its choices
# integer constants of the closure (branches on them pruned when compiled; numba caches a
# closure over such constants, not one over another function). Only the parallel compilation
# is used, on one thread as on many: LLVM vectorises the row loop in numba's outlined parfor
# body but not in a plain compilation of the same loop, which ran 2.5-4x slower per edge at
# every size measured, 10 targets included (docs/measurements.md, "One compilation for every
# pull").


def _pull_loop(code: int, weighted: bool):
    def pull(indptr, indices, targets, x, w, scales, acc):
        n = targets.shape[0]
        f = acc.shape[1]
        parts = min(n, 64)
        for p in prange(parts):
            a, b = n * p // parts, n * (p + 1) // parts
            ci, ce = _start(indptr, indices, targets, a, b, x, w)
            for i in range(a, b):
                t = targets[i]
                for e in range(indptr[t], indptr[t + 1]):
                    ci, ce = _ahead(indptr, indices, targets, b, ci, ce, x, w)
                    u = indices[e]
                    c = w[u, 0] if weighted else np.float32(1.0)
                    if code == 3:  # int8 times its row's scale
                        c = c * scales[u]
                    if code == 1:
                        for j in range(f):
                            acc[i, j] += c * half_to_float(x[u, j])
                    elif code == 2:
                        for j in range(f):
                            acc[i, j] += c * bfloat_to_float(x[u, j])
                    else:
                        for j in range(f):
                            acc[i, j] += c * np.float32(x[u, j])

    return pull


_PULLS: dict[tuple, Callable] = {}


def _parallel(py_func: Callable) -> Callable:
    """``py_func`` (a loop over ``numba.prange``) compiled in parallel, cached under a name of
    its own (:func:`shoal.utils.jit.renamed`: the earlier serial twins' entries stay apart)."""
    return numba.njit(cache=True, parallel=True, nogil=True)(renamed(py_func, "parallel"))


def pull_kernel(code: int, weighted: bool) -> Callable:
    """The compiled pull ``(indptr, indices, targets, x, w, scales, acc)`` for rows stored as
    ``code`` (``FeatureDtype.code``; 16-bit kinds as uint16 bits, int8 rows times
    ``scales[u]``), ``weighted`` (``w[u, 0]`` per source; else ``w`` is empty and only steers
    the prefetching), targets in parallel: ``acc[i] += sum_u c_u * row(u)`` over the
    in-edges ``u -> targets[i]``."""
    key = (int(code), bool(weighted))
    kernel = _PULLS.get(key)
    if kernel is None:  # compiled when first called
        kernel = _PULLS[key] = _parallel(_pull_loop(*key))
    return kernel


# ------------------------------------------------------------------ pulling chunk by chunk
# Sources on disk are read in chunks of ids, in order; each target's (sorted) in-neighbour
# list is consumed chunk by chunk through a cursor: ``cur[i]`` is target i's next entry,
# ``end[i]`` its list's end in ``indices``. A chunk's needed ids are marked first (a second
# cursor, running one chunk ahead, so the next chunk is read while this one is summed).


@numba.njit(cache=True, nogil=True)
def _lists_sorted(cur, end, indices):
    """Whether every list ``indices[cur[i]:end[i]]`` is non-decreasing."""
    for i in range(cur.shape[0]):
        for e in range(cur[i] + 1, end[i]):
            if indices[e] < indices[e - 1]:
                return False
    return True


@numba.njit(cache=True, nogil=True)
def _sort_lists(ptr, indices):
    """Sort each list ``indices[ptr[i]:ptr[i + 1]]`` in place."""
    for i in range(ptr.shape[0] - 1):
        indices[ptr[i] : ptr[i + 1]].sort()


@numba.njit(cache=True, nogil=True)
def _mark_chunk(cur, end, indices, lo, hi, mark):
    """``mark[u - lo] = True`` for the entries ``u < hi`` from each cursor on; the cursors
    move past them. Returns the number of entries marked."""
    m = 0
    n = cur.shape[0]
    for i in range(n):
        if i + VISIT_AHEAD < n:  # the list position of a target a few visits on
            prefetch_at(indices, cur[i + VISIT_AHEAD])
        e = cur[i]
        stop = end[i]
        while e < stop and indices[e] < hi:
            mark[indices[e] - lo] = True
            e += 1
        m += e - cur[i]
        cur[i] = e
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _chunk_row(slot, u, lo):
    """The row of id ``u`` in a chunk's buffer: ``slot[u - lo]`` (the chunk's needed rows
    packed), or ``u - lo`` with ``slot`` empty (the chunk laid out densely by id)."""
    return u - lo if slot.shape[0] == 0 else slot[u - lo]


@numba.njit(cache=True, nogil=True, inline="always")
def _chunk_ahead(cur, end, indices, hi, b, i, e, lo, slot, buf, acc):
    """Move the look-ahead cursor ``(i, e)`` one entry on within the chunk (entries below
    ``hi``; targets after ``i`` still sit at their chunk's first entry), prefetching that
    entry's row and, on reaching a new target, its accumulator row."""
    e += 1
    if e >= end[i] or indices[e] >= hi:
        i += 1
        while i < b and (cur[i] >= end[i] or indices[cur[i]] >= hi):
            if i + VISIT_AHEAD < b:  # the list position of a target a few visits on
                prefetch_at(indices, cur[i + VISIT_AHEAD])
            i += 1
        if i < b:
            e = cur[i]
            prefetch_row(acc, i)
            if i + VISIT_AHEAD < b:
                prefetch_at(indices, cur[i + VISIT_AHEAD])
    if i < b:
        prefetch_row(buf, _chunk_row(slot, indices[e], lo))
    return i, e


def _pull_chunk_loop(code: int):
    def pull_chunk(cur, end, indices, lo, hi, slot, buf, w, acc):
        n = cur.shape[0]
        f = acc.shape[1]
        parts = min(n, 64)
        for p in prange(parts):
            a, b = n * p // parts, n * (p + 1) // parts
            # the look-ahead cursor, PULL_AHEAD entries of this chunk in front
            ci, ce = a, (cur[a] - 1 if a < b else 0)
            if a < b and (cur[a] >= end[a] or indices[cur[a]] >= hi):
                ce = end[a]  # target a has nothing here: the first step moves on
            for _ in range(PULL_AHEAD):
                if ci < b:
                    ci, ce = _chunk_ahead(cur, end, indices, hi, b, ci, ce, lo, slot, buf, acc)
            for i in range(a, b):
                e = cur[i]
                stop = end[i]
                while e < stop and indices[e] < hi:
                    if ci < b:
                        ci, ce = _chunk_ahead(cur, end, indices, hi, b, ci, ce, lo, slot, buf, acc)
                    u = indices[e]
                    c = w[u, 0] if w.shape[0] else np.float32(1.0)
                    r = _chunk_row(slot, u, lo)
                    if code == 1:
                        for j in range(f):
                            acc[i, j] += c * half_to_float(buf[r, j])
                    elif code == 2:
                        for j in range(f):
                            acc[i, j] += c * bfloat_to_float(buf[r, j])
                    else:
                        for j in range(f):
                            acc[i, j] += c * buf[r, j]
                    e += 1
                cur[i] = e

    return pull_chunk


_PULL_CHUNKS: dict[int, Callable] = {}


def pull_chunk_kernel(code: int) -> Callable:
    """The compiled chunked pull ``(cur, end, indices, lo, hi, slot, buf, w, acc)``: every
    target ``i`` adds the rows ``buf[slot[u - lo]]`` (``buf[u - lo]`` with ``slot`` empty: a
    dense chunk, no lookup an edge) of its entries ``u`` in ``[lo, hi)``
    from its cursor ``cur[i]`` on (times ``w[u, 0]`` when ``w`` is not empty) to
    ``acc[i]``, its cursor moved past them; ``buf`` float32 rows (``code`` 0) or the uint16
    bits of float16 (1) or bfloat16 (2) rows as stored: half the bytes of a chunk, twice
    the ids in its memory, half the visits of every target per pass."""
    kernel = _PULL_CHUNKS.get(int(code))
    if kernel is None:
        kernel = _PULL_CHUNKS[int(code)] = _parallel(_pull_chunk_loop(int(code)))
    return kernel
