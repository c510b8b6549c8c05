"""Numba kernels of the neighbour sampler (private; numpy arrays only).

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

from shoal.utils._intrinsics import popcount, prefetch_at
from shoal.utils.idset import probe_slot
from shoal.utils.jit import parallel_and_serial

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
def _draw_run(indices, b, d, k, state, picked, start, offsets):
    """``k`` of the ``d`` entries from ``b`` into ``picked[start:start + k]``, uniformly without
    replacement from ``state`` (all of them when ``k == d``; Floyd's algorithm up to
    ``_FLOYD_MAX``, selection sampling above): positions when ``offsets``, else the values
    ``indices[...]``. The typed sampler draws each relation's run with it."""
    if k == d:
        for j in range(k):
            picked[start + j] = b + j if offsets else indices[b + j]
        return
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


@numba.njit(cache=True, inline="always")
def _fill_row(indptr, indices, v, i, start, k, key, picked, dst, offsets):
    """Draw frontier node ``i`` (= node ``v``)'s ``k`` in-neighbours into ``picked[start:]``."""
    b = np.int64(indptr[v])
    d = np.int64(indptr[v + 1]) - b
    for j in range(k):
        dst[start + j] = i
    _draw_run(indices, b, d, k, _mix64(key ^ np.uint64(i)), picked, start, offsets)


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


def _fill_keyed_py(indptr, indices, nodes, n_dst, rowptr, keys, pos, picked, offsets):
    """:func:`_fill_py` of rows from several batches at once: row ``i`` draws from the stream
    ``keys[i]`` at frontier position ``pos[i]`` (its batch's key and its position among that
    batch's rows), so each row draws what :func:`_fill_py` draws for it in its own batch."""
    for i in prange(n_dst):
        start = rowptr[i]
        k = rowptr[i + 1] - start
        if k == 0:
            continue
        v = nodes[i]
        b = np.int64(indptr[v])
        d = np.int64(indptr[v + 1]) - b
        state = _mix64(keys[i] ^ np.uint64(pos[i]))
        _draw_run(indices, b, d, k, state, picked, start, offsets)


#: Below this many rows the serial twin of a kernel runs: waking threads costs more.
#: The per-batch kernels release the GIL (``nogil``): a batch is sampled in a background thread
#: while the training thread launches the device's kernels (``DeviceFeed(background=True)``).
PARALLEL_MIN = 512

_count_par, _count_ser = parallel_and_serial(_count_py, nogil=True)
_fill_par, _fill_ser = parallel_and_serial(_fill_py, nogil=True)
_fill_keyed_par, _fill_keyed_ser = parallel_and_serial(_fill_keyed_py, nogil=True)


def _count(indptr, nodes, n_dst, fanout, counts):
    (_count_par if n_dst >= PARALLEL_MIN else _count_ser)(indptr, nodes, n_dst, fanout, counts)


def _fill_keyed(indptr, indices, nodes, n_dst, rowptr, keys, pos, picked, offsets=False):
    (_fill_keyed_par if n_dst >= PARALLEL_MIN else _fill_keyed_ser)(
        indptr, indices, nodes, n_dst, rowptr, keys, pos, picked, offsets
    )


def _fill(indptr, indices, nodes, n_dst, rowptr, key, picked, dst, offsets=False):
    (_fill_par if n_dst >= PARALLEL_MIN else _fill_ser)(
        indptr, indices, nodes, n_dst, rowptr, key, picked, dst, offsets
    )


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _reset(g2l, nodes, n):
    for i in range(n):
        g2l[nodes[i]] = -1


# ------------------------------------------------------------------ the batch's hashed id map
# An open-addressing table (linear probing, Fibonacci hashing) of the batch's global ids,
# ``keys`` (-1: empty) and their local ids ``vals``, sized to the batch (a power of two at
# least twice the ids it holds): ``O(batch)`` memory instead of the dense map's ``O(N)``.
# Local ids are given in the same order as the dense map's (first appearance). The probe is
# :func:`shoal.utils.idset.probe_slot`.


@numba.njit(cache=True, nogil=True)
def _h_seed_ids(seeds, keys, vals, shift, nodes):
    """Register the seeds as local ids 0..S-1; returns the index of a duplicate or -1."""
    for i in range(seeds.shape[0]):
        s = seeds[i]
        h = probe_slot(keys, s, shift)
        if keys[h] == s:
            return i
        keys[h] = s
        vals[h] = i
        nodes[i] = s
    return -1


@numba.njit(cache=True, nogil=True)
def _h_relabel(picked, num_edges, keys, vals, shift, nodes, n_nodes, col):
    """:func:`_relabel` over the hashed map; returns the new node count."""
    n = n_nodes
    for e in range(num_edges):
        u = picked[e]
        h = probe_slot(keys, u, shift)
        if keys[h] == u:
            col[e] = vals[h]
        else:
            keys[h] = u
            vals[h] = n
            nodes[n] = u
            col[e] = n
            n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _h_insert_all(nodes, n, keys, vals, shift):
    """Insert ``nodes[:n]`` with local ids ``0..n-1`` into an empty table (a grown one)."""
    for i in range(n):
        h = probe_slot(keys, nodes[i], shift)
        keys[h] = nodes[i]
        vals[h] = i


#: lookups ahead whose bucket is prefetched by :func:`_take_drawn` (its bounds twice as far)
TAKE_AHEAD = 8


@numba.njit(cache=True, nogil=True)
def _take_drawn(pos, starts, shift, values, picked, out):
    """``out[i] = values[j]`` with ``pos[j] == picked[i]`` (``pos`` sorted distinct, every
    ``picked`` in it): the bucket ``picked >> shift`` narrows the search to
    ``pos[starts[b]:starts[b + 1]]`` (a few entries, one or two cache lines) where a binary
    search over all of ``pos`` misses the cache at most of its ~24 levels. Returns how many
    were not found (their ``out`` left unset)."""
    missing = 0
    n = picked.shape[0]
    for i in range(n):
        # two stages ahead: the bucket's bounds, then the bucket's first positions and entries
        if i + 2 * TAKE_AHEAD < n:
            prefetch_at(starts, picked[i + 2 * TAKE_AHEAD] >> shift)
        if i + TAKE_AHEAD < n:
            at = starts[picked[i + TAKE_AHEAD] >> shift]
            prefetch_at(pos, at)
            prefetch_at(values, at)
        p = picked[i]
        b = p >> shift
        lo = starts[b]
        hi = starts[b + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if pos[mid] < p:
                lo = mid + 1
            else:
                hi = mid
        if lo < pos.shape[0] and pos[lo] == p:
            out[i] = values[lo]
        else:
            missing += 1
    return missing


# ------------------------------------------------------- a group's drawn positions as bits
# (:class:`shoal.sample.sampler.DrawnMarks`): bit ``p & 63`` of word ``p >> 6`` marks
# position ``p``; ``before[w]``, the set bits of the words before ``w``, ranks a marked
# position among the hop's sorted distinct ones: its entry's index, with no search.


@numba.njit(cache=True, nogil=True)
def _mark_bits(bits, picked):
    """Set the bit of every position in ``picked`` (each in range)."""
    n = picked.shape[0]
    for i in range(n):
        if i + TAKE_AHEAD < n:
            prefetch_at(bits, picked[i + TAKE_AHEAD] >> 6)
        p = picked[i]
        bits[p >> 6] |= np.int64(1) << (p & 63)


@numba.njit(cache=True, nogil=True)
def _bit_ranks(bits, before):
    """``before[w]``: the set bits of ``bits[:w]``; returns the set bits of all."""
    c = 0
    for w in range(bits.shape[0]):
        before[w] = c
        c += popcount(bits[w])
    return c


@numba.njit(cache=True, nogil=True)
def _bit_positions(bits, out):
    """The marked positions, ascending, into ``out`` (as long as the set bits)."""
    k = 0
    for w in range(bits.shape[0]):
        x = bits[w]
        while x != 0:
            low = x & -x
            out[k] = (w << 6) + popcount(low - 1)
            k += 1
            x ^= low


@numba.njit(cache=True, nogil=True)
def _take_marked(bits, before, values, picked, out):
    """``out[i]``: the entry of position ``picked[i]``, ``values[rank]`` by its bit's rank
    among the marked positions. Returns how many were not marked (their ``out`` unset)."""
    missing = 0
    n = picked.shape[0]
    for i in range(n):
        if i + TAKE_AHEAD < n:
            w = picked[i + TAKE_AHEAD] >> 6
            prefetch_at(bits, w)
            prefetch_at(before, w)
        p = picked[i]
        w = p >> 6
        x = bits[w]
        b = p & 63
        if (x >> b) & 1 == 0:
            missing += 1
        else:
            out[i] = values[before[w] + popcount(x & ((np.int64(1) << b) - 1))]
    return missing


@numba.njit(cache=True, nogil=True)
def _take_held(starts, ends, local, values, picked, inside, out):
    """For each position ``picked[i]``: whether it falls in a held row ``j`` (``starts[j] <=
    p < ends[j]``, ``starts`` sorted, rows disjoint) into ``inside[i]``, and if so its entry
    ``values[local[j] + p - starts[j]]`` into ``out[i]`` (else 0). Returns how many fell
    inside."""
    m = starts.shape[0]
    k = 0
    for i in range(picked.shape[0]):
        p = picked[i]
        lo, hi = 0, m  # the first row starting after p
        while lo < hi:
            mid = (lo + hi) >> 1
            if starts[mid] <= p:
                lo = mid + 1
            else:
                hi = mid
        j = lo - 1
        if j >= 0 and p < ends[j]:
            inside[i] = True
            out[i] = values[local[j] + p - starts[j]]
            k += 1
        else:
            inside[i] = False
            out[i] = 0
    return k
