"""LDG: Linear Deterministic Greedy streaming node partitioning.

Stanton, Kliot, "Streaming Graph Partitioning for Large Distributed Graphs", KDD 2012,
Section 3 (heuristic 7, "Linear Deterministic Greedy"): nodes arrive one at a time with their
neighbour lists; node ``v`` goes to

    argmax_i  |P_i & N(v)| * (1 - |P_i| / C)

where ``P_i`` is the set of nodes already in part ``i`` and ``C`` the part capacity; ties go to
the part with fewer nodes (then the lowest index). We use
``C = max(floor(balance * |V| / p), ceil(|V| / p))`` as a hard capacity (the paper's
``C = |V| / p`` with the configured slack) and, when a train mask is given, the same bound over
training nodes as a second hard capacity. On a typed graph each node type gets the same bound
over its own nodes (DistDGL's ``balance_ntypes`` for METIS): a part full of one type takes no
more of it.

The vertex stream is the graph's ``csr_out`` view (and ``csr_in`` too for directed graphs, so
that ``N(v)`` is every neighbour), built once by the external sort and read block by block
with positioned reads: memory is O(V) (``node_part``) plus one block of about ``chunk_edges``
out-neighbours and the same rows' in-neighbours (or one node's list, if longer). Nodes stream
in id order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.partition._streaming import (
    _check_inputs,
)
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.partition.refine import _zip_blocks
from shoal.utils.progress import progress
from shoal.utils.ranges import range_index

__all__ = ["LDG"]


def _vertex_blocks(
    graph: GraphDir, chunk_edges: int, desc: str
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The vertex stream in blocks of rows (those of the refinement passes,
    :func:`shoal.partition.refine.csr_row_blocks`): yields ``(a, b, ptr_out, idx_out, ptr_in,
    idx_in)`` for rows ``[a, b)``, pointers relative to the block. For undirected graphs the
    ``in`` part is empty (``csr_out`` already lists every neighbour)."""
    views = ("out", "in") if graph.directed else ("out",)
    bar = progress(total=sum(int(graph.csr(k).indptr[-1]) for k in views), desc=desc, unit="edge")
    empty_idx = np.empty(0, dtype=np.int64)
    try:
        for a, b, po, io, pi, ii in _zip_blocks(graph, chunk_edges):
            if pi is None:
                pi, ii = np.zeros(b - a + 1, dtype=np.int64), empty_idx
            yield a, b, po, io, pi, ii
            bar.update(int(po[-1] + pi[-1]))
    finally:
        bar.close()


@njit(cache=True)
def _count_parts(r, v, po, io, pi, ii, node_part, cnt):
    """``cnt[q]``: how many of row ``r`` (node ``v``)'s placed neighbours part ``q`` holds."""
    for q in range(cnt.shape[0]):
        cnt[q] = 0.0
    for j in range(po[r], po[r + 1]):
        w = io[j]
        if w != v and node_part[w] >= 0:
            cnt[node_part[w]] += 1.0
    for j in range(pi[r], pi[r + 1]):
        w = ii[j]
        if w != v and node_part[w] >= 0:
            cnt[node_part[w]] += 1.0


@njit(cache=True)
def _place(v, nt, best, is_train, node_part, sizes, tsizes, tysizes):
    if best < 0:  # every part at capacity (cannot happen with cap >= n / p): least loaded
        best = 0
        for q in range(1, sizes.shape[0]):
            if sizes[q] < sizes[best]:
                best = q
    node_part[v] = best
    sizes[best] += 1
    tysizes[best, nt] += 1
    if is_train:
        tsizes[best] += 1


@njit(cache=True)
def _ldg_block(a, po, io, pi, ii, node_part, sizes, tsizes, train, use_train, cap, tcap, ty, cnt):
    p = sizes.shape[0]
    toff, tysizes, tycap = ty
    for r in range(po.shape[0] - 1):
        v = a + r
        nt = range_index(toff, v)
        _count_parts(r, v, po, io, pi, ii, node_part, cnt)
        is_train = use_train and train[v]
        best = -1
        best_s = -1.0
        for q in range(p):
            if sizes[q] >= cap:
                continue
            if is_train and tsizes[q] >= tcap:
                continue
            if tysizes[q, nt] >= tycap[nt]:
                continue
            s = cnt[q] * (1.0 - sizes[q] / cap)
            if s > best_s or (s == best_s and sizes[q] < sizes[best]):
                best_s = s
                best = q
        _place(v, nt, best, is_train, node_part, sizes, tsizes, tysizes)


def _type_capacities(graph: GraphDir, p: int, balance: float) -> tuple:
    """``(offsets, per-part counts, capacities)`` of the node types: a typed graph's types
    (each capped as the nodes are, DistDGL's ``balance_ntypes``), else one type without a
    cap (the untyped assignment, unchanged)."""
    s = graph.schema
    if s is None:
        off = np.array([0, graph.num_nodes], np.int64)
        return off, np.zeros((p, 1), np.int64), np.array([np.inf])
    counts = [int(t.count) for t in s.node_types]
    caps = [float(max(math.floor(balance * c / p), -(-c // p))) for c in counts]
    return s.offsets, np.zeros((p, len(counts)), np.int64), np.array(caps)


def _capacities(n: int, p: int, balance: float, train: np.ndarray | None) -> tuple[float, float]:
    """Hard capacities: ``max(floor(balance * n / p), ceil(n / p))`` nodes per part, and the
    same bound over training nodes."""
    cap = max(math.floor(balance * n / p), -(-n // p))
    tcap = 0
    if train is not None:
        t = int(train.sum())
        tcap = max(math.floor(balance * t / p), -(-t // p))
    return float(cap), float(tcap)


def _run_vertex_stream(
    partitioner: Partitioner, graph: GraphDir, train_mask, kernel, extra=()
) -> tuple[np.ndarray, dict[str, float]]:
    """Check the inputs, build the CSR views and run ``kernel(..., *extra)`` over the vertex
    stream: ``(node_part, seconds of the csr and of the pass)``."""
    cfg = partitioner.config
    n, p = graph.num_nodes, cfg.num_parts
    train = _check_inputs(graph, p, train_mask)
    t = time.perf_counter()
    graph.csr("out")
    if graph.directed:
        graph.csr("in")
    t_csr = time.perf_counter() - t
    node_part = np.full(n, -1, dtype=np.int32)
    sizes = np.zeros(p, dtype=np.int64)
    tsizes = np.zeros(p, dtype=np.int64)
    use_train = train is not None
    tr = train if use_train else np.zeros(1, dtype=bool)
    cap, tcap = _capacities(n, p, cfg.balance, train)
    ty = _type_capacities(graph, p, cfg.balance)
    cnt = np.zeros(p, dtype=np.float64)
    t = time.perf_counter()
    for a, _b, po, io, pi, ii in _vertex_blocks(graph, cfg.chunk_edges, partitioner.name):
        kernel(
            a, po, io, pi, ii, node_part, sizes, tsizes, tr, use_train, cap, tcap, ty, cnt, *extra
        )
    return node_part, {"csr": t_csr, partitioner.name: time.perf_counter() - t}


@dataclass(kw_only=True)
class LDGConfig(PartitionConfig):
    """Options of :class:`LDG`: only those of :class:`PartitionConfig` (``balance``, default
    1.10, sets the hard capacity; the stream is deterministic, ``seed`` is unused)."""


class LDG(Partitioner):
    """Linear Deterministic Greedy (Stanton & Kliot, KDD 2012, Section 3) over the vertex
    stream of the CSR views (module docstring)."""

    name = "ldg"
    Config = LDGConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        node_part, seconds = _run_vertex_stream(self, graph, train_mask, _ldg_block)
        return self.assignment(node_part, seconds)
