"""GREM: streaming recursive bisection over edge windows with history refinement (Armada).

Implements Algorithms 1-2 of the Armada paper (GREM, "greedy refinement of edge-streamed
METIS-seeded bisections"), with the facts recorded in DESIGN.md:

* **Bisection over edge windows (Alg. 1).** The edge file is read in windows of ``window``
  edges (a fraction of |E|, default 10%, or an edge count). The first window is held in memory
  and bisected by METIS (pymetis) on the subgraph it induces (Alg. 1, line "seed"); every later
  window is processed by the greedy refinement of Alg. 2.
* **Greedy refinement (Alg. 2).** The nodes of a window are visited in order of first
  appearance; a node's score for side ``s`` is its number of window neighbours currently on
  ``s``. A node seen in an earlier window is re-evaluated with the score averaged with its
  history, ``h <- (h + c) / 2`` (the weight of older windows halves at every window), and
  moves when the other side scores higher and has room. A new node goes to the side with the
  higher score if it has room, else to the other side (ties: the side with more room).
* **Capacity** ``ceil(|V| / p)`` per final part (times the ``balance`` slack of the config,
  default 1.10, so the greedy choice has room to follow the neighbours; set
  ``exact_capacity=True`` for the paper's exact bound); a side holding ``k`` of the final parts
  has ``k`` times that capacity.
* **p > 2 by recursive bisection.** One pass over the edges per level; every group of nodes
  sharing a range of ``k >= 2`` final parts is split into ``floor(k/2)`` and ``ceil(k/2)``
  parts (METIS gets the matching target weights), so any ``p`` works, not only powers of two.
  Edges between groups are ignored at deeper levels. Levels: ``ceil(log2 p)``.
* ``refine=False`` gives the *fixed greedy* variant of the paper's ablation: a node keeps the
  side it first got and scores use the current window only.

Memory: O(V) per-node state (group, side, two history floats) plus one window of edges (the
algorithm's own design: 10% windows trade memory for quality, 1% windows need ten times less).
Nodes that never share an edge with their group go to the side with the most room.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numba
import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.utils.progress import progress

__all__ = ["Grem", "GremConfig", "refine_window"]


@dataclass(kw_only=True)
class GremConfig(PartitionConfig):
    """Options of :class:`Grem` (plus the shared ones).

    Args:
        window: edges per window: a fraction of |E| if < 1 (default 0.1), else an edge count.
        refine: re-evaluate previously seen nodes with their averaged history (default true);
            false gives the paper's fixed-greedy ablation.
        metis_seed: bisect the first window with METIS (default true); false starts greedy.
        exact_capacity: capacity exactly ``ceil(|V|/p)`` per part as in the paper (default
            false: ``capacity(|V|, p, balance)``, the same bound as the balance post-pass).
        window_per_node: if set, the window holds ``window_per_node * |V|`` edges instead
            (overrides ``window``; default None). This bounds the window by O(V) memory
            whatever the number of edges.
    """

    window: float = 0.1
    refine: bool = True
    metis_seed: bool = True
    exact_capacity: bool = False
    window_per_node: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.window > 0:
            raise ShoalInputError(f"window must be > 0 (fraction or edge count), got {self.window}")
        if self.window_per_node is not None and not self.window_per_node > 0:
            raise ShoalInputError(f"window_per_node must be > 0, got {self.window_per_node}")

    def window_edges(self, num_edges: int, num_nodes: int = 0) -> int:
        if self.window_per_node is not None:
            return max(1, math.ceil(self.window_per_node * num_nodes))
        if self.window < 1:
            return max(1, math.ceil(self.window * num_edges))
        return max(1, int(self.window))


# ---------------------------------------------------------------------------- numba kernels
@numba.njit(cache=True)
def _window_local(edges, grp, kparts, loc, nodes):
    """Relabel the window's intra-group edges (groups with k >= 2); returns (m, nloc)."""
    nloc = 0
    m = 0
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v:
            continue
        g = grp[u]
        if g != grp[v] or kparts[g] < 2:
            continue
        if loc[u] < 0:
            loc[u] = nloc
            nodes[nloc] = u
            nloc += 1
        if loc[v] < 0:
            loc[v] = nloc
            nodes[nloc] = v
            nloc += 1
        m += 1
    return m, nloc


@numba.njit(cache=True)
def _local_csr(edges, grp, kparts, loc, nloc, indptr, indices):
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v or grp[u] != grp[v] or kparts[grp[u]] < 2:
            continue
        indptr[loc[u] + 1] += 1
        indptr[loc[v] + 1] += 1
    for i in range(nloc):
        indptr[i + 1] += indptr[i]
    fill = indptr[:nloc].copy()
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v or grp[u] != grp[v] or kparts[grp[u]] < 2:
            continue
        a = loc[u]
        b = loc[v]
        indices[fill[a]] = b
        fill[a] += 1
        indices[fill[b]] = a
        fill[b] += 1


@numba.njit(cache=True)
def _greedy_window(
    nodes, nloc, indptr, indices, grp, side, hist, seen, size, cap, refine, use_hist
):
    """Alg. 2 on one window (local CSR over ``nodes[:nloc]``); returns moves of old nodes."""
    moved = 0
    for a in range(nloc):
        v = nodes[a]
        g = grp[v]
        c0 = 0.0
        c1 = 0.0
        for j in range(indptr[a], indptr[a + 1]):
            s = side[nodes[indices[j]]]
            if s == 0:
                c0 += 1.0
            elif s == 1:
                c1 += 1.0
        cur = side[v]
        if seen[v] and use_hist:
            s0 = 0.5 * (hist[v, 0] + c0)
            s1 = 0.5 * (hist[v, 1] + c1)
        else:
            s0 = c0
            s1 = c1
        hist[v, 0] = s0
        hist[v, 1] = s1
        seen[v] = True
        room0 = cap[g, 0] - size[g, 0]
        room1 = cap[g, 1] - size[g, 1]
        if cur < 0:
            if s0 > s1 or (s0 == s1 and room0 * cap[g, 1] >= room1 * cap[g, 0]):
                want = 0
            else:
                want = 1
            if (want == 0 and room0 <= 0) or (want == 1 and room1 <= 0):
                want = 1 - want
            side[v] = want
            size[g, want] += 1
        elif refine:
            other = 1 - cur
            s_cur = s0 if cur == 0 else s1
            s_oth = s1 if cur == 0 else s0
            room_o = room1 if cur == 0 else room0
            if s_oth > s_cur and room_o > 0:
                side[v] = other
                size[g, cur] -= 1
                size[g, other] += 1
                moved += 1
    return moved


@numba.njit(cache=True)
def _reset_loc(nodes, nloc, loc):
    for a in range(nloc):
        loc[nodes[a]] = -1


@numba.njit(cache=True)
def _fill_unassigned(grp, kparts, side, size, cap):
    for v in range(grp.shape[0]):
        g = grp[v]
        if kparts[g] < 2 or side[v] >= 0:
            continue
        r0 = cap[g, 0] - size[g, 0]
        r1 = cap[g, 1] - size[g, 1]
        s = 0 if r0 * cap[g, 1] >= r1 * cap[g, 0] else 1
        side[v] = s
        size[g, s] += 1


@numba.njit(cache=True)
def _split(grp, kparts, side):
    for v in range(grp.shape[0]):
        g = grp[v]
        k = kparts[g]
        if k >= 2 and side[v] == 1:
            grp[v] = g + k // 2


def refine_window(
    edges: np.ndarray,
    side: np.ndarray,
    hist: np.ndarray,
    seen: np.ndarray,
    cap: tuple[int, int],
    *,
    refine: bool = True,
) -> int:
    """Run GREM's greedy refinement (Alg. 2) on one window of a single bisection.

    Exposed for tests and experiments: ``edges`` (k, 2) is the window, ``side`` (N,) int8
    (-1 unassigned, 0, 1), ``hist`` (N, 2) float64 history scores and ``seen`` (N,) bool are
    updated in place; ``cap`` is the capacity of each side. Returns how many previously
    assigned nodes moved.
    """
    n = side.shape[0]
    grp = np.zeros(n, dtype=np.int32)
    kparts = np.array([2], dtype=np.int32)
    size = np.array([[np.sum(side == 0), np.sum(side == 1)]], dtype=np.int64)
    capa = np.array([list(cap)], dtype=np.int64)
    e = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    return _process_window(e, grp, kparts, side, hist, seen, size, capa, refine, refine)


def _window_buffers(n: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Buffers reused by every window: local node ids, local CSR indptr and indices."""
    k = min(n, 2 * w)
    return (
        np.empty(k, dtype=np.int64),
        np.empty(k + 1, dtype=np.int64),
        np.empty(2 * w, dtype=np.int64),
    )


def _process_window(
    edges, grp, kparts, side, hist, seen, size, cap, refine, use_hist, loc=None, bufs=None
):
    n = side.shape[0]
    if loc is None:
        loc = np.full(n, -1, dtype=np.int64)
    if bufs is None:
        bufs = _window_buffers(n, edges.shape[0])
    nodes, indptr_buf, indices_buf = bufs
    m, nloc = _window_local(edges, grp, kparts, loc, nodes)
    indptr = indptr_buf[: nloc + 1]
    indptr[:] = 0
    indices = indices_buf[: 2 * m]
    _local_csr(edges, grp, kparts, loc, nloc, indptr, indices)
    moved = _greedy_window(
        nodes, nloc, indptr, indices, grp, side, hist, seen, size, cap, refine, use_hist
    )
    _reset_loc(nodes, nloc, loc)
    return int(moved)


def _metis_window(edges, grp, kparts, side, seen, size, cap, loc, seed):
    """Seed: bisect the subgraph each group induces on the first window with METIS."""
    import pymetis
    import scipy.sparse as sp

    n = side.shape[0]
    nodes = np.empty(min(n, 2 * edges.shape[0]), dtype=np.int64)
    m, nloc = _window_local(edges, grp, kparts, loc, nodes)
    indptr = np.zeros(nloc + 1, dtype=np.int64)
    indices = np.empty(2 * m, dtype=np.int64)
    _local_csr(edges, grp, kparts, loc, nloc, indptr, indices)
    _reset_loc(nodes, nloc, loc)
    nodes = nodes[:nloc]
    if nloc == 0:
        return
    a = sp.csr_matrix(
        (np.ones(indices.shape[0], dtype=np.int8), indices, indptr), shape=(nloc, nloc)
    )
    a.sum_duplicates()
    g_of = grp[nodes]
    for g in np.unique(g_of):
        members = np.flatnonzero(g_of == g)
        k = int(kparts[g])
        if members.shape[0] < 2:
            continue
        sub = a[members][:, members].tocsr()
        sub.sort_indices()
        f0 = (k // 2) / k
        opts = pymetis.Options(seed=int(seed))
        _, parts = pymetis.part_graph(
            2,
            pymetis.CSRAdjacency(sub.indptr.astype(np.int64), sub.indices.astype(np.int64)),
            tpwgts=[f0, 1.0 - f0],
            options=opts,
        )
        parts = np.asarray(parts, dtype=np.int8)
        for s_idx, v in zip(parts, nodes[members], strict=True):
            s = int(s_idx)
            if size[g, s] >= cap[g, s]:
                s = 1 - s
            side[v] = s
            size[g, s] += 1
            seen[v] = True


class Grem(Partitioner):
    """GREM (Armada Alg. 1-2): see the module docstring."""

    name = "grem"
    Config = GremConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        from shoal.partition.balance import capacity

        cfg: GremConfig = self.config  # type: ignore[assignment]
        n, e, p = graph.num_nodes, graph.num_edges, cfg.num_parts
        grp = np.zeros(n, dtype=np.int32)
        kparts = np.zeros(p, dtype=np.int32)
        kparts[0] = p
        part_cap = math.ceil(n / p) if cfg.exact_capacity else capacity(n, p, cfg.balance)
        w = cfg.window_edges(e, n)
        stream = graph.edge_stream(min(w, max(e, 1)))
        loc = np.full(n, -1, dtype=np.int64)
        seconds: dict[str, float] = {}
        level = 0
        moves: list[int] = []
        while kparts.max(initial=1) >= 2:
            t0 = time.perf_counter()
            active = np.flatnonzero(kparts >= 2)
            cap = np.zeros((p, 2), dtype=np.int64)
            cap[active, 0] = (kparts[active] // 2) * part_cap
            cap[active, 1] = (kparts[active] - kparts[active] // 2) * part_cap
            size = np.zeros((p, 2), dtype=np.int64)
            side = np.full(n, -1, dtype=np.int8)
            hist = np.zeros((n, 2), dtype=np.float32 if n > (1 << 24) else np.float64)
            seen = np.zeros(n, dtype=np.bool_)
            moved = 0
            bufs = _window_buffers(n, min(w, max(e, 1)))
            bar = progress(total=len(stream), desc=f"grem level {level + 1}", unit="window")
            for t, chunk in enumerate(stream):
                if t == 0 and cfg.metis_seed:
                    _metis_window(chunk, grp, kparts, side, seen, size, cap, loc, cfg.seed)
                else:
                    moved += _process_window(
                        chunk, grp, kparts, side, hist, seen, size, cap,
                        cfg.refine, cfg.refine, loc, bufs,
                    )  # fmt: skip
                bar.update(1)
            bar.close()
            del hist, seen, bufs
            _fill_unassigned(grp, kparts, side, size, cap)
            _split(grp, kparts, side)
            new_k = kparts.copy()
            for g in active:
                k = int(kparts[g])
                new_k[g] = k // 2
                new_k[g + k // 2] = k - k // 2
            kparts = new_k
            moves.append(moved)
            seconds[f"level{level + 1}"] = time.perf_counter() - t0
            level += 1
        params = cfg.to_dict()
        params["window_edges"] = w
        params["refine_moves"] = moves
        return Assignment(
            node_part=grp, num_parts=p, algorithm=self.name, params=params, seconds=seconds
        )
