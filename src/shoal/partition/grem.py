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
  parts (METIS gets matching target weights): any ``p``; edges between groups are ignored.
* ``refine=False`` gives the *fixed greedy* variant of the paper's ablation: a node keeps the
  side it first got and scores use the current window only.

Two named deviations from the paper, both off by default here and on in the default
partitioner (:data:`shoal.partition.run.DEFAULT_OPTIONS`):

* ``edge_balance`` (shared option, default None): Alg. 2's ``assign`` bounds each side by
  ``P`` nodes only; with it each side also holds a bounded number of in-edges (a node weighs
  its in-degree; one extra edge pass), the streaming form of DistDGL's multi-constraint METIS:
  a side holding ``k_s`` of a group's ``k`` parts may take ``k_s / k`` of its in-edges times
  ``edge_balance ** (1 / levels)``, compounding to ``edge_balance`` over the levels. A node goes to
  (or moves to) a side only if both counts fit; when neither side fits, a new node goes to
  the side it overloads relatively less (among those with node room). The METIS seed itself
  is single-constraint; its placement respects both capacities. With an uneven split (``k``
  odd) a node compares its neighbours per final part on each side (``c_s / k_s``), else the
  side with more parts draws every well-connected node and the other fills with low-degree
  ones.
* ``max_window_edges`` (default None): a cap on the window, so the window and the METIS seed
  cost a fixed amount whatever |V| and |E| (2**21 edges: 0.07% of ogbn-papers100M's 3.2 B).

Memory (Sec. 4.2: "only the active chunk of edges needs to be in memory"): per node the group
(int16, the final part), the side (int8), the difference of the two history scores of Alg. 1
line 2 (float32: decisions compare the two, :func:`~shoal.partition._grem_kernels.greedy_window`)
and, with ``edge_balance``, the in-degree (int32): 11 bytes; plus one window, sized by ``w``
edges, not N: the edges and their relabelled copy (8 bytes each), its global -> local id hash
table (2-4 slots of 8 bytes per possible node, ``min(N, 2w)``), its CSR (about 10 bytes per
edge) and, for the first window only, METIS on it (about 150-300 bytes per window edge).
Nodes that never share an edge with their group go to the side with the most room.

Checked against an independent implementation written from the paper alone
(``bench/grem_reference.py``, issue 31, on 28 graphs of 11 families; figures:
docs/measurements.md#partitioning).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition import _grem_kernels as K
from shoal.partition._grem_metis import bisect_group
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.utils.progress import progress

__all__ = ["Grem", "GremConfig", "in_degrees", "refine_window"]


@dataclass(kw_only=True)
class GremConfig(PartitionConfig):
    """Options of :class:`Grem` (plus the shared ones, ``edge_balance`` included).

    Args:
        window: edges per window: a fraction of |E| if < 1 (default 0.1), else an edge count.
        refine: re-evaluate previously seen nodes with their averaged history (default true);
            false gives the paper's fixed-greedy ablation.
        metis_seed: bisect the first window with METIS (default true); false starts greedy.
        exact_capacity: capacity exactly ``ceil(|V|/p)`` per part as in the paper (default
            false: ``capacity(|V|, p, balance)``, the same bound as the balance post-pass).
        move_rule: re-assigning a seen node: ``"strict"`` (default: it moves only to a
            strictly better side with room) or ``"paper"`` (Alg. 2's ``assign``; may move on a
            tie; with ``exact_capacity``, the paper's rule).
        seed_history: after the METIS seed, every node of the first window keeps its
            neighbour counts per side in that window as its history, as Armada's Alg. 1
            lines 9-10 do (``nbrs0, nbrs1 = cnt_nbrs(c_nodes, c_edges, parts)``;
            ``nbr_counts[c_nodes] = [nbrs0, nbrs1]``), so a seeded node's first
            re-evaluation (line 16) averages the seed's evidence in. Default true (issue
            31), the paper's algorithm; false starts every node's history at its first greedy
            window (the ablation; the choice is measured in
            docs/measurements.md#partitioning).
        window_per_node: if set, the window holds ``window_per_node * |V|`` edges instead
            (overrides ``window``; default None). This bounds the window by O(V) memory
            whatever the number of edges.
        max_window_edges: if set, no window holds more edges than this (default None: the
            paper's windows, Armada Sec. 4.1: a fraction of |E|, 1% at ogbn-papers100M scale,
            Sec. 6.2); a named deviation (module docstring).
    """

    window: float = 0.1
    refine: bool = True
    metis_seed: bool = True
    exact_capacity: bool = False
    move_rule: str = "strict"
    seed_history: bool = True
    window_per_node: float | None = None
    max_window_edges: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.window > 0:
            raise ShoalInputError(f"window must be > 0 (fraction or edge count), got {self.window}")
        if self.move_rule not in ("strict", "paper"):
            raise ShoalInputError(f"move_rule must be 'strict' or 'paper', got {self.move_rule!r}")
        if self.window_per_node is not None and not self.window_per_node > 0:
            raise ShoalInputError(f"window_per_node must be > 0, got {self.window_per_node}")
        if self.max_window_edges is not None:
            self.max_window_edges = int(self.max_window_edges)
            if self.max_window_edges < 1:
                raise ShoalInputError(f"max_window_edges must be >= 1, got {self.max_window_edges}")

    def window_edges(self, num_edges: int, num_nodes: int = 0) -> int:
        if self.window_per_node is not None:
            w = max(1, math.ceil(self.window_per_node * num_nodes))
        elif self.window < 1:
            w = max(1, math.ceil(self.window * num_edges))
        else:
            w = max(1, int(self.window))
        return w if self.max_window_edges is None else min(w, self.max_window_edges)


def _no_edge_weights(n: int) -> np.ndarray:
    """A read-only (N,) view of one zero: the in-degree when edges are not balanced."""
    return np.broadcast_to(np.zeros(1, dtype=np.int32), (n,))


def _no_edge_caps(p: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((p, 2), dtype=np.int64), np.full((p, 2), np.iinfo(np.int64).max // 4)


def refine_window(
    edges: np.ndarray,
    side: np.ndarray,
    hdiff: np.ndarray,
    cap: tuple[int, int],
    *,
    refine: bool = True,
    move_rule: str = "strict",
) -> int:
    """GREM's refinement (Alg. 2) on one window of one bisection, for tests and experiments:
    ``edges`` (k, 2), ``side`` (N,) int8 (-1 unassigned, 0, 1) and ``hdiff`` (N,), the history
    ``h0 - h1`` (a node has one when it has a side), updated in place; ``cap``: nodes per side.
    Returns how many previously assigned nodes moved."""
    n = side.shape[0]
    grp = np.zeros(n, dtype=np.int32)
    kparts = np.array([2], dtype=np.int32)
    size = np.array([[np.sum(side == 0), np.sum(side == 1)]], dtype=np.int64)
    capa = np.array([list(cap)], dtype=np.int64)
    e = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    st = _State(grp, kparts, side, hdiff, _no_edge_weights(n), size, capa, *_no_edge_caps(1))
    st.paper_assign = move_rule == "paper"
    return _process_window(e, st, refine, refine)


def _table_size(nodes: int) -> int:
    """Slots of the window's hash table: a power of two >= 2 * nodes (load <= 1/2)."""
    return 1 << max(4, int(2 * max(nodes, 1) - 1).bit_length())


class _State:
    """GREM's per-node arrays and per-(group, side) counters of one level (see
    :mod:`shoal.partition._grem_kernels`), plus the buffers every window reuses: the window's
    local ids (a hash table of 2-4 slots per possible node, ``min(N, 2w)``), its relabelled
    edges and CSR, all sized by the window ``w``, not by N."""

    def __init__(self, grp, kparts, side, hdiff, deg, size, cap, esize, ecap, w=1):
        self.grp, self.kparts, self.side, self.hdiff = grp, kparts, side, hdiff
        self.deg, self.size, self.cap, self.esize, self.ecap = deg, size, cap, esize, ecap
        self.per_part = False  # compare neighbours per final part (with edge capacities)
        self.paper_assign = False  # Alg. 2's assign for seen nodes (GremConfig.move_rule)
        self.seed_history = False  # Alg. 1 lines 9-10 (GremConfig.seed_history)
        self._alloc(w)

    def _alloc(self, w: int) -> None:
        k = min(self.side.shape[0], 2 * w)
        self.keys = np.full(_table_size(k), -1, dtype=np.int32)
        self.vals = np.empty(self.keys.shape[0], dtype=np.int32)
        self.nodes = np.empty(k, dtype=np.int32)
        self.ledges = np.empty((w, 2), dtype=np.int32)
        self.indptr = np.empty(k + 1, dtype=np.int32)
        self.indices = np.empty(2 * w, dtype=np.int32)

    def local(self, edges: np.ndarray, idx_dtype=np.int32) -> tuple[int, np.ndarray, np.ndarray]:
        """The window's intra-group CSR over local ids: ``(nloc, indptr, indices)``; the
        local ids are ``self.nodes[:nloc]`` (valid until the next window)."""
        if self.ledges.shape[0] < edges.shape[0]:
            self._alloc(edges.shape[0])
        m, nloc = K.window_local(
            edges, self.grp, self.kparts, self.keys, self.vals, self.nodes, self.ledges
        )
        K.reset_loc(self.nodes, nloc, self.keys)
        if idx_dtype == np.int32:
            indptr, indices = self.indptr[: nloc + 1], self.indices[: 2 * m]
        else:
            indptr = np.empty(nloc + 1, dtype=idx_dtype)
            indices = np.empty(2 * m, dtype=idx_dtype)
        indptr[:] = 0
        K.local_csr(self.ledges, m, nloc, indptr, indices)
        return nloc, indptr, indices


def _process_window(edges, st: _State, refine, use_hist) -> int:
    nloc, indptr, indices = st.local(edges)
    state = (st.grp, st.kparts, st.side, st.hdiff, st.size, st.cap, st.deg, st.esize, st.ecap)
    moved = K.greedy_window(
        st.nodes, nloc, indptr, indices, refine, use_hist, (*state, st.per_part), st.paper_assign
    )
    return int(moved)


def _metis_window(edges, st: _State, seed: int) -> None:
    """Seed (Alg. 1 line 7): bisect the subgraph each group induces on the first window with
    METIS (:func:`~shoal.partition._grem_metis.bisect_group`). The window CSR, each group's simple subgraph and METIS's
    own arrays use 64-bit ids (pymetis's ``idx_t``): about 150-300 bytes per window edge,
    bounded by ``max_window_edges``."""
    nloc, indptr, indices = st.local(edges, np.int64)
    if nloc == 0:
        return
    nodes = st.nodes[:nloc].copy()
    g_of = st.grp[nodes]
    pos = np.full(nloc, -1, dtype=np.int64)
    for g in np.unique(g_of):
        members = np.flatnonzero(g_of == g)
        k = int(st.kparts[g])
        if members.shape[0] < 2:
            continue
        pos[members] = np.arange(members.shape[0])
        xadj = np.empty(members.shape[0] + 1, dtype=np.int64)
        adj = np.empty(int((indptr[members + 1] - indptr[members]).sum()), dtype=np.int64)
        m = K.group_csr(indptr, indices, members, pos, xadj, adj)
        pos[members] = -1
        parts = bisect_group(xadj, adj[:m], (k // 2) / k, seed)
        del xadj, adj
        K.place_seed(
            parts, nodes[members], st.grp, st.deg, st.side, st.size, st.cap, st.esize, st.ecap
        )
    if st.seed_history:
        K.seed_history(
            nodes, nloc, indptr, indices, st.grp, st.kparts, st.side, st.hdiff, st.per_part
        )


def in_degrees(graph: GraphDir, chunk_edges: int) -> np.ndarray:
    """In-degree of every node (stored rows with that destination; both directions of an
    undirected graph are stored, so there it is the degree): one edge pass. int32 unless a
    node could have 2**31 in-edges."""
    dt = np.int32 if graph.num_edges < np.iinfo(np.int32).max else np.int64
    deg = np.zeros(graph.num_nodes, dtype=dt)
    for chunk in graph.edge_stream(chunk_edges):
        K.in_degree_chunk(chunk, deg)
    return deg


class Grem(Partitioner):
    """GREM (Armada Alg. 1-2): see the module docstring."""

    name = "grem"
    Config = GremConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        from shoal.partition.balance import capacity

        cfg: GremConfig = self.config  # type: ignore[assignment]
        n, e, p = graph.num_nodes, graph.num_edges, cfg.num_parts
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        if cfg.edge_balance is not None and p > 1:
            deg = in_degrees(graph, cfg.chunk_edges)
            seconds["degrees"] = time.perf_counter() - t0
        else:
            deg = _no_edge_weights(n)
        # groups are final part ids: 2 bytes per node while the levels run, int32 at the end
        grp = np.zeros(n, dtype=np.int16 if p <= np.iinfo(np.int16).max else np.int32)
        kparts = np.zeros(p, dtype=np.int32)
        kparts[0] = p
        part_cap = math.ceil(n / p) if cfg.exact_capacity else capacity(n, p, cfg.balance)
        gload = None
        if cfg.edge_balance is not None and p > 1:
            gload = np.zeros(p, dtype=np.int64)
            gload[0] = e
        slack = (cfg.edge_balance or 1.0) ** (1.0 / max(1, math.ceil(math.log2(p))))
        w = cfg.window_edges(e, n)
        stream = graph.edge_stream(min(w, max(e, 1)))
        level = 0
        moves: list[int] = []
        while kparts.max(initial=1) >= 2:
            t0 = time.perf_counter()
            active, cap, esize, ecap = K.level_caps(kparts, part_cap, gload, slack)
            st = _State(
                grp,
                kparts,
                np.full(n, -1, dtype=np.int8),
                np.zeros(n, dtype=np.float32),
                deg,
                np.zeros((p, 2), dtype=np.int64),
                cap,
                esize,
                ecap,
                min(w, max(e, 1)),
            )
            st.per_part = gload is not None
            st.paper_assign = cfg.move_rule == "paper"
            st.seed_history = cfg.seed_history
            moved = 0
            bar = progress(total=len(stream), desc=f"grem level {level + 1}", unit="window")
            for t, chunk in enumerate(stream):
                if t == 0 and cfg.metis_seed:
                    _metis_window(chunk, st, cfg.seed)
                else:
                    moved += _process_window(chunk, st, cfg.refine, cfg.refine)
                bar.update(1)
            bar.close()
            side, size, esize = st.side, st.size, st.esize
            del st  # hdiff and the window buffers
            K.fill_unassigned(grp, kparts, side, size, cap, deg, esize, ecap)
            K.split(grp, kparts, side)
            del side
            new_k = kparts.copy()
            for g in active:
                k = int(kparts[g])
                new_k[g] = k // 2
                new_k[g + k // 2] = k - k // 2
                if gload is not None:
                    gload[g], gload[g + k // 2] = esize[g, 0], esize[g, 1]
            kparts = new_k
            moves.append(moved)
            seconds[f"level{level + 1}"] = time.perf_counter() - t0
            level += 1
        del deg
        node_part = grp.astype(np.int32, copy=False)
        return self.assignment(node_part, seconds, window_edges=w, refine_moves=moves)
