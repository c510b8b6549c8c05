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
with positioned reads: memory is O(V) (``node_part`` and the row pointers) plus one block of
at most ``chunk_edges`` neighbours (or one node's list, if longer). Nodes stream in id order.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.partition._streaming import (
    _check_parts,
    _train_array,
)
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.utils.progress import progress
from shoal.utils.ranges import range_index

__all__ = ["LDG"]


class _RowReader:
    """Reads ``indices[a:b]`` of a CSR ``.npy`` memory map with positioned reads into a reused
    buffer (touching a memory map's pages would count in RSS)."""

    def __init__(self, indices: np.ndarray, cap: int) -> None:
        self.dtype = indices.dtype
        self.size = int(indices.shape[0])
        self.offset = int(getattr(indices, "offset", 0))
        self.filename = getattr(indices, "filename", None)
        self._arr = indices if self.filename is None else None
        self._fd = os.open(self.filename, os.O_RDONLY) if self.filename else None
        self.buf = np.empty(max(cap, 1), dtype=self.dtype)

    def read(self, a: int, b: int) -> np.ndarray:
        k = b - a
        if k > self.buf.shape[0]:
            self.buf = np.empty(k, dtype=self.dtype)
        out = self.buf[:k]
        if k == 0:
            return out
        if self._fd is None:
            out[:] = self._arr[a:b]
            return out
        view = memoryview(out.view(np.uint8))
        got = os.preadv(self._fd, [view], self.offset + a * self.dtype.itemsize)
        if got != k * self.dtype.itemsize:
            raise RuntimeError(f"short read in {self.filename}")
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _vertex_blocks(
    graph: GraphDir, chunk_edges: int, desc: str
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The vertex stream in blocks of rows: yields ``(a, b, ptr_out, idx_out, ptr_in,
    idx_in)`` for rows ``[a, b)``, pointers relative to the block. For undirected graphs the
    ``in`` part is empty (``csr_out`` already lists every neighbour)."""
    n = graph.num_nodes
    views = [graph.csr("out")]
    if graph.directed:
        views.append(graph.csr("in"))
    ptrs = [np.asarray(v.indptr, dtype=np.int64) for v in views]
    total = ptrs[0].copy() if len(ptrs) == 1 else ptrs[0] + ptrs[1]
    readers = [_RowReader(v.indices, chunk_edges) for v in views]
    empty_ptr = None
    empty_idx = np.empty(0, dtype=np.int64)
    bar = progress(total=int(total[-1]), desc=desc, unit="edge")
    try:
        a = 0
        while a < n:
            # largest b with total[b] - total[a] <= chunk_edges, at least one row
            b = int(np.searchsorted(total, total[a] + chunk_edges, side="right")) - 1
            b = min(max(b, a + 1), n)
            pieces = []
            for ptr, rd in zip(ptrs, readers):
                lo, hi = int(ptr[a]), int(ptr[b])
                pieces.append((ptr[a : b + 1] - lo, rd.read(lo, hi)))
            if len(pieces) == 1:
                if empty_ptr is None or empty_ptr.shape[0] != b - a + 1:
                    empty_ptr = np.zeros(b - a + 1, dtype=np.int64)
                pieces.append((empty_ptr, empty_idx))
            (po, io), (pi, ii) = pieces
            yield a, b, po, io, pi, ii
            bar.update(int(total[b] - total[a]))
            a = b
    finally:
        bar.close()
        for rd in readers:
            rd.close()


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
    _check_parts(graph, p)
    train = _train_array(train_mask, n)
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
