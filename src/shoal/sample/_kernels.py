"""Numba kernels of the neighbour sampler and the feature gather (private; numpy arrays only).

Random numbers come from one SplitMix64 stream per destination node, keyed by
``(batch seed, hop, position of the node in the frontier)``, so a sample depends only on the
seed and never on the number of threads or on the order threads run in.
SplitMix64: G. L. Steele, D. Lea, C. H. Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014 (the ``mix64`` finaliser, constants of its Figure 1).
Sampling without replacement: R. W. Floyd's algorithm (J. Bentley, "Programming pearls: a
sample of brilliance", CACM 30(9), 1987) for small fanouts, Knuth's selection sampling
(Algorithm S, TAOCP vol. 2, 3.4.2) for large ones.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: fanouts above this use selection sampling (O(degree)) instead of Floyd (O(fanout^2)).
_FLOYD_MAX = 64


@numba.njit(cache=True, inline="always")
def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, inline="always")
def _next(state):
    """Advance a SplitMix64 state; returns (new state, 64 random bits)."""
    state = state + _GOLDEN
    return state, _mix64(state)


@numba.njit(cache=True, inline="always")
def _below(bits, n):
    """A number in [0, n) from 64 random bits (multiply-shift on the top 32 bits)."""
    return np.int64(((bits >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@numba.njit(cache=True)
def _stream_key(seed, hop):
    return _mix64(np.uint64(seed) ^ _mix64(np.uint64(hop) + _GOLDEN))


def _count_py(indptr, nodes, n_dst, fanout, counts):
    """counts[i] = number of neighbours sampled for frontier node nodes[i]."""
    num_rows = indptr.shape[0] - 1
    for i in prange(n_dst):
        v = nodes[i]
        d = np.int64(indptr[v + 1] - indptr[v]) if v < num_rows else np.int64(0)
        counts[i] = d if (fanout < 0 or d <= fanout) else fanout


@numba.njit(cache=True, inline="always")
def _floyd(state, d, k, picked, start):
    """Floyd's sample of ``k`` distinct positions of ``[0, d)`` into ``picked[start:]``: for
    j = d-k .. d-1 draw t in [0, j]; take t unless taken, else take j."""
    filled = 0
    for j in range(d - k, d):
        state, bits = _next(state)
        t = _below(bits, j + 1)
        for q in range(filled):
            if picked[start + q] == t:
                t = j
                break
        picked[start + filled] = t
        filled += 1


@numba.njit(cache=True, inline="always")
def _fill_row(indptr, indices, v, i, start, k, key, picked, dst, offsets):
    """Draw frontier node ``i`` (= node ``v``)'s ``k`` in-neighbours into ``picked[start:]``."""
    b = np.int64(indptr[v])
    d = np.int64(indptr[v + 1]) - b
    for j in range(k):
        dst[start + j] = i
    if k == d:
        for j in range(k):
            picked[start + j] = b + j if offsets else indices[b + j]
        return
    state = _mix64(key ^ np.uint64(i))
    if k <= _FLOYD_MAX:
        _floyd(state, d, k, picked, start)
        for q in range(k):
            o = b + picked[start + q]
            picked[start + q] = o if offsets else indices[o]
    else:
        # Selection sampling: keep offset j with probability (needed)/(remaining).
        need = k
        filled = 0
        for j in range(d):
            state, bits = _next(state)
            if _below(bits, d - j) < need:
                picked[start + filled] = b + j if offsets else indices[b + j]
                filled += 1
                need -= 1
                if need == 0:
                    break


def _fill_py(indptr, indices, nodes, n_dst, rowptr, key, picked, dst, offsets):
    """Write the sampled in-neighbours (global ids) of nodes[:n_dst] into picked[rowptr[i]:...];
    with ``offsets``, their positions in ``indices`` instead (``indices`` is not read: the
    caller reads those entries from disk), the same draws either way."""
    for i in prange(n_dst):
        start = rowptr[i]
        k = rowptr[i + 1] - start
        if k == 0:
            continue
        _fill_row(indptr, indices, nodes[i], i, start, k, key, picked, dst, offsets)


#: Below this many rows the serial twin of a kernel runs: waking threads costs more.
PARALLEL_MIN = 512

_count_par = numba.njit(cache=True, parallel=True)(_count_py)
_count_ser = numba.njit(cache=True)(_count_py)
_fill_par = numba.njit(cache=True, parallel=True)(_fill_py)
_fill_ser = numba.njit(cache=True)(_fill_py)


def _count(indptr, nodes, n_dst, fanout, counts):
    (_count_par if n_dst >= PARALLEL_MIN else _count_ser)(indptr, nodes, n_dst, fanout, counts)


def _fill(indptr, indices, nodes, n_dst, rowptr, key, picked, dst, offsets=False):
    (_fill_par if n_dst >= PARALLEL_MIN else _fill_ser)(
        indptr, indices, nodes, n_dst, rowptr, key, picked, dst, offsets
    )


@numba.njit(cache=True)
def _relabel(picked, num_edges, g2l, nodes, n_nodes, col):
    """Local ids for sampled nodes: known nodes keep theirs, new ones are appended to nodes.

    Returns the new node count. Sequential, so the order is that of first appearance.
    """
    n = n_nodes
    for e in range(num_edges):
        u = picked[e]
        lu = g2l[u]
        if lu < 0:
            lu = n
            g2l[u] = n
            nodes[n] = u
            n += 1
        col[e] = lu
    return n


@numba.njit(cache=True)
def _seed_ids(seeds, g2l, nodes):
    """Register the seeds as local ids 0..S-1; returns the index of a duplicate or -1."""
    for i in range(seeds.shape[0]):
        s = seeds[i]
        if g2l[s] >= 0:
            for j in range(i):
                g2l[seeds[j]] = -1
            return i
        g2l[s] = i
        nodes[i] = s
    return -1


@numba.njit(cache=True)
def _reset(g2l, nodes, n):
    for i in range(n):
        g2l[nodes[i]] = -1


def _gather_rows_py(src, ids, out):
    """out[i, :] = src[ids[i], :] (with dtype conversion), rows in parallel."""
    f = src.shape[1]
    for i in prange(ids.shape[0]):
        r = ids[i]
        for j in range(f):
            out[i, j] = src[r, j]


_gather_rows_par = numba.njit(cache=True, parallel=True)(_gather_rows_py)
_gather_rows_ser = numba.njit(cache=True)(_gather_rows_py)


def _gather_rows(src, ids, out):
    (_gather_rows_par if ids.shape[0] >= PARALLEL_MIN else _gather_rows_ser)(src, ids, out)


@numba.njit(cache=True, parallel=True)
def _row_normalize(out, n):
    """Divide each of the first n rows by its sum (rows summing to 0 are left alone)."""
    f = out.shape[1]
    for i in prange(n):
        s = 0.0
        for j in range(f):
            s += out[i, j]
        if s != 0.0:
            inv = 1.0 / s
            for j in range(f):
                out[i, j] *= inv


#: ``ssize_t pread(int fd, void *buf, size_t count, off_t offset)`` from the C library, bound
#: by name at link time (so the kernels below can be cached, unlike a ctypes pointer).
_pread = numba.types.ExternalFunction(
    "pread",
    numba.types.int64(numba.types.int32, numba.types.intp, numba.types.uint64, numba.types.int64),
)


@numba.njit(cache=True, parallel=True, nogil=True)
def _pread_rows(fd, first, stride, row_bytes, ids, dest, out):
    """Row ``ids[i]`` of a file (``row_bytes`` at ``first + ids[i] * stride``) into row
    ``dest[i]`` of the C-contiguous ``out``, one positioned read per row, rows in parallel.
    Returns the number of rows that could not be read whole (0 on success)."""
    base = out.ctypes.data
    bad = 0
    for i in prange(ids.shape[0]):
        pos = first + ids[i] * stride
        dst = base + dest[i] * row_bytes
        done = 0
        while done < row_bytes:  # pread may return short counts
            n = _pread(np.int32(fd), dst + done, np.uint64(row_bytes - done), pos + done)
            if n <= 0:
                bad += 1
                break
            done += n
    return bad


@numba.njit(cache=True, nogil=True)
def _plan_runs(ids, offset, stride, row_bytes, page, gap, max_run, run_start, run_end, row_ptr):
    """Coalesce the page-aligned extents of rows ``ids`` (sorted, unique) into read runs.

    Row ``v`` occupies bytes ``[offset + v * stride, + row_bytes)``; its extent is that range
    widened to whole ``page``s. Consecutive extents whose gap is at most ``gap`` bytes join one
    run while the run stays within ``max_run`` bytes. Writes runs ``[run_start, run_end)`` and
    ``row_ptr`` (run ``r`` holds ids ``row_ptr[r]:row_ptr[r + 1]``); returns the run count.
    """
    n = ids.shape[0]
    r = -1
    cur_lo = np.int64(0)
    cur_hi = np.int64(0)
    for i in range(n):
        pos = offset + ids[i] * stride
        lo = (pos // page) * page
        hi = ((pos + row_bytes + page - 1) // page) * page
        if r >= 0 and lo <= cur_hi + gap and hi - cur_lo <= max_run:
            if hi > cur_hi:
                cur_hi = hi
            continue
        if r >= 0:
            run_start[r] = cur_lo
            run_end[r] = cur_hi
        r += 1
        row_ptr[r] = i
        cur_lo = lo
        cur_hi = hi
    if r >= 0:
        run_start[r] = cur_lo
        run_end[r] = cur_hi
    row_ptr[r + 1] = n
    return r + 1


@numba.njit(cache=True, nogil=True)
def _read_runs(
    fd,
    run_start,
    run_end,
    row_ptr,
    r0,
    r1,
    ids,
    dest,
    offset,
    stride,
    row_bytes,
    staging,
    out,
    out2,
):
    """Read runs ``r0:r1`` (see :func:`_plan_runs`) into ``staging`` (page-aligned, at least
    the longest run) with one ``pread`` each, and copy their rows: the row of ``ids[i]`` goes
    to bytes ``[dest[i] * row_bytes, + row_bytes)`` of ``out`` (1-D uint8), or, when
    ``dest[i] < 0``, to row ``-1 - dest[i]`` of ``out2``. Serial and
    GIL-free: callers run several in threads. Returns bytes read, or ``-1 - i`` when run ``i``
    ended before its last row (a truncated file)."""
    sbase = staging.ctypes.data
    total = np.int64(0)
    for r in range(r0, r1):
        start = run_start[r]
        want = run_end[r] - start
        got = np.int64(0)
        while got < want:
            k = _pread(np.int32(fd), sbase + got, np.uint64(want - got), start + got)
            if k <= 0:
                break
            got += k
        total += got
        for i in range(row_ptr[r], row_ptr[r + 1]):
            rel = offset + ids[i] * stride - start
            if rel + row_bytes > got:
                return -1 - r
            if dest[i] >= 0:
                d = dest[i] * row_bytes
                for b in range(row_bytes):
                    out[d + b] = staging[rel + b]
            else:
                d = (-1 - dest[i]) * row_bytes
                for b in range(row_bytes):
                    out2[d + b] = staging[rel + b]
    return total


@numba.njit(cache=True, nogil=True, parallel=True)
def _gather_cached(ids, slot, cache, cold, rows, out):
    """``out[i] = cache[slot[ids[i]]]`` when the row is cached (``slot >= 0``), else the row of
    ``ids[i]`` in ``rows`` (``cold`` sorted: binary search), as float32, rows in parallel.
    Returns the number of cached rows, or ``-1 - i`` when an ``ids[i]`` is in neither."""
    f = out.shape[1]
    n = ids.shape[0]
    hit = np.zeros(n, np.int8)
    for i in prange(n):
        v = ids[i]
        s = slot[v]
        if s >= 0:
            hit[i] = 1
            for j in range(f):
                out[i, j] = cache[s, j]
            continue
        p = np.searchsorted(cold, v)
        if p >= cold.shape[0] or cold[p] != v:
            hit[i] = -1
            continue
        for j in range(f):
            out[i, j] = rows[p, j]
    hits = 0
    for i in range(n):
        if hit[i] < 0:
            return -1 - i
        hits += hit[i]
    return hits


@numba.njit(cache=True)
def _clock_victims(ref, hand, k, out):
    """CLOCK: ``k`` (<= len(ref)) distinct slots to evict from ``hand`` on; a slot whose
    reference bit is set gets a second chance (the bit is cleared). Chosen slots get the bit
    set (the new block is referenced) so one call never picks a slot twice. Returns the hand."""
    n = ref.shape[0]
    got = 0
    while got < k:
        if ref[hand]:
            ref[hand] = 0
        else:
            ref[hand] = 1
            out[got] = hand
            got += 1
        hand += 1
        if hand == n:
            hand = 0
    return hand
