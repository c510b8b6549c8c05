"""HDRF: High-Degree (are) Replicated First streaming vertex-cut partitioning.

Petroni, Querzoni, Daudjee, Kamali, Iacoboni, "HDRF: Stream-Based Partitioning for Power-Law
Graphs", CIKM 2015. Section 3 ("The HDRF algorithm") defines, for an edge ``e = (u, v)``
arriving on the stream and every part ``p``::

    theta(u) = delta(u) / (delta(u) + delta(v)),   theta(v) = 1 - theta(u)       (partial degrees)
    g(x, p)  = 1 + (1 - theta(x))  if p in A(x) else 0                         (A = replica set)
    C_REP(u, v, p) = g(u, p) + g(v, p)
    C_BAL(p) = lambda * (maxsize - |p|) / (epsilon + maxsize - minsize)
    C_HDRF(u, v, p) = C_REP + C_BAL      ->  e goes to argmax_p C_HDRF

with ``delta`` the partial degrees seen so far (incremented for ``u`` and ``v`` before
scoring), ``|p|`` the number of edges in part ``p``. We use the paper's ``lambda = 1``,
``epsilon = 1``; ties go to the lowest part index (the paper breaks them at random).

The pass keeps O(V * p) bytes of replica flags, O(V) partial degrees and O(p) loads; the edge
file is read in chunks, the edge -> part output goes to a temporary ``.npy`` file on disk
(unlinked once memory-mapped, so nothing is left behind), and every node's owner is the part
holding most of its edges (ties to the lowest index; isolated nodes fill the lightest parts).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition._streaming import (
    _assign_edges,
    _check_inputs,
    _vertex_cut,
)
from shoal.partition.base import Assignment, PartitionConfig, Partitioner

__all__ = ["HDRF"]


#: How many edges ahead the packed kernel touches the endpoints' state (software prefetch).
_LOOKAHEAD = 16


@njit(cache=True)
def _load_range(load):
    """maxsize and minsize of the part loads, and how many parts are at minsize: kept
    incrementally by :func:`_add_load` (loads only grow by one per edge)."""
    mins = load.min()
    return load.max(), mins, np.count_nonzero(load == mins)


@njit(cache=True)
def _add_load(load, best, maxs, mins, nmin):
    lb = load[best]
    load[best] = lb + 1
    if lb + 1 > maxs:
        maxs = lb + 1
    if lb == mins:
        nmin -= 1
        if nmin == 0:
            mins += 1
            for q in range(load.shape[0]):
                if load[q] == mins:
                    nmin += 1
    return maxs, mins, nmin


@njit(cache=True)
def _hdrf_chunk(src, dst, pdeg, rep, load, out, lam, eps):
    p = load.shape[0]
    maxs, mins, nmin = _load_range(load)
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        pdeg[u] += 1
        if v != u:
            pdeg[v] += 1
        du = pdeg[u]
        dv = pdeg[v]
        theta_u = du / (du + dv)
        gu = 2.0 - theta_u  # 1 + (1 - theta(u))
        gv = 1.0 + theta_u  # 1 + (1 - theta(v)), theta(v) = 1 - theta(u)
        scale = lam / (eps + (maxs - mins))
        best = 0
        best_s = -1.0
        bu = u * p
        bv = v * p
        for q in range(p):
            s = scale * (maxs - load[q])
            if rep[bu + q]:
                s += gu
            if rep[bv + q]:
                s += gv
            if s > best_s:
                best_s = s
                best = q
        out[i] = best
        maxs, mins, nmin = _add_load(load, best, maxs, mins, nmin)
        rep[bu + best] = 1
        rep[bv + best] = 1


@njit(cache=True)
def _hdrf_chunk_packed(src, dst, state, load, out, lam, eps):
    """The same pass for p <= 32 with one uint64 per node: partial degree << 32 | replica
    bits, so each endpoint costs one random memory access. The words of the edge
    ``_LOOKAHEAD`` positions ahead are read early (a software prefetch: the loads are
    independent of the current edge, so the CPU overlaps their cache misses); their xor is
    returned only so that the compiler keeps them."""
    p = load.shape[0]
    maxs, mins, nmin = _load_range(load)
    one = np.uint64(1) << np.uint64(32)
    low = np.uint64(0xFFFFFFFF)
    sh = np.uint64(32)
    m = src.shape[0]
    touched = np.uint64(0)
    for i in range(m):
        j = i + _LOOKAHEAD
        if j < m:
            touched ^= state[src[j]] ^ state[dst[j]]
        u = src[i]
        v = dst[i]
        su = state[u] + one
        if v != u:
            sv = state[v] + one
        else:
            sv = su
        du = float(su >> sh)
        dv = float(sv >> sh)
        mu = su & low
        mv = sv & low
        theta_u = du / (du + dv)
        gu = 2.0 - theta_u
        gv = 1.0 + theta_u
        scale = lam / (eps + (maxs - mins))
        best = 0
        best_s = -1.0
        for q in range(p):
            s = scale * (maxs - load[q])
            bit = np.uint64(1) << np.uint64(q)
            if mu & bit:
                s += gu
            if mv & bit:
                s += gv
            if s > best_s:
                best_s = s
                best = q
        out[i] = best
        bit = np.uint64(1) << np.uint64(best)
        state[u] = su | bit
        if v != u:
            state[v] = sv | bit
        maxs, mins, nmin = _add_load(load, best, maxs, mins, nmin)
    return touched


@dataclass(kw_only=True)
class HDRFConfig(PartitionConfig):
    """Options of :class:`HDRF` (plus those of :class:`PartitionConfig`).

    Args:
        lam: weight ``lambda`` of the balance term C_BAL (default 1.0, as in the paper).
        epsilon: ``epsilon`` in C_BAL's denominator (default 1.0, as in the paper).
    """

    lam: float = 1.0
    epsilon: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.lam >= 0:
            raise ShoalInputError(f"lam must be >= 0, got {self.lam}")
        if not self.epsilon > 0:
            raise ShoalInputError(f"epsilon must be > 0, got {self.epsilon}")


class HDRF(Partitioner):
    """HDRF streaming vertex-cut partitioner (Petroni et al., CIKM 2015, Section 3).

    One pass over the edge stream, in file order; per edge the score C_HDRF of every part
    (module docstring). Memory: 8 bytes per node for p <= 32 (partial degree and replica bits packed in one
    word), else ``N * p`` bytes of replica flags + O(N); plus one chunk.
    The ``seed`` is unused: the pass is deterministic (ties to the lowest part index).
    """

    name = "hdrf"
    Config = HDRFConfig
    vertex_cut = True

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        cfg = self.config
        p = cfg.num_parts
        _check_inputs(graph, p, train_mask)
        n = graph.num_nodes
        t0 = time.perf_counter()
        packed = p <= 32
        if packed:
            state = np.zeros(n, dtype=np.uint64)
        else:
            pdeg = np.zeros(n, dtype=np.int64)
            rep = np.zeros(n * p, dtype=np.uint8)
        load = np.zeros(p, dtype=np.int64)
        lam, eps = float(cfg.lam), float(cfg.epsilon)
        if packed:

            def fill(s, d, o):
                _hdrf_chunk_packed(s, d, state, load, o, lam, eps)
        else:

            def fill(s, d, o):
                _hdrf_chunk(s, d, pdeg, rep, load, o, lam, eps)

        edge_part = _assign_edges(
            graph, p, cfg.chunk_edges, "hdrf", fill, scratch_dir=cfg.scratch_dir
        )
        return _vertex_cut(self, graph, edge_part, {"hdrf": time.perf_counter() - t0})
