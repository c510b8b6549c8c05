"""Independent reference implementation of GREM (Armada, Waleffe et al.) and a comparison with
``shoal partition --algo grem`` (issue 16).

The reference is written from the paper only (``/work/shared/papers/armada.txt``, Section 4.1,
Algorithm 1 "GREM Bipartite Graph Partitioning" and Algorithm 2 "GREM Helper Functions"); no
code of shoal's own GREM was read or reused. Line numbers below are the paper's.

Algorithm as implemented (2-way step, :func:`grem_bisect`)
------------------------------------------------------------
* Input: the edge rows of the graph directory in file order (the paper's "edge list stored on
  disk in a random order", Sec. 4.1; the benchmark graphs are shuffled once when prepared) and
  the capacities ``P`` of the two sides (Alg. 1 "Require").
* Alg. 1 lines 1-2: ``parts = -1``, ``sizes = 0``, two neighbour estimates per node
  (``nbr_counts``, float64 here because of the averaging).
* Line 3-5: the rows are cut into ``ceil(|E| / c_size)`` chunks ("windows") of
  ``c_size = ceil(window_frac * |E|)`` rows, ``window_frac = 0.1`` by default (the paper's
  10% setting, Sec. 6.2); ``c_nodes`` = the unique nodes of the chunk.
* Lines 6-10 (first chunk): METIS (pymetis, ``METIS_PartGraphRecursive``, ``seed`` = the
  ``seed`` argument) bisects the chunk's graph (its rows symmetrised and de-duplicated,
  unweighted); ``sizes`` are counted; the chunk's neighbour counts under that assignment
  (Alg. 2 ``cnt_nbrs``) are stored as the nodes' history (lines 9-10).
* Lines 11-19 (later chunks): every node of the chunk, one after the other, counts its
  neighbours per side among the chunk's rows under the *current* assignment (Alg. 2 lines
  1-9: unassigned neighbours are skipped; a neighbour present in two rows counts twice). A node
  seen before averages that count with its stored estimate, ``(history + new) / 2`` (line 16,
  so older chunks weigh 1/2, 1/4, ...), is re-assigned by ``assign`` (line 17, Alg. 2 lines
  10-13: the side with strictly more estimated neighbours if it is not full, otherwise
  ``argmin(sizes)``) and the estimate is stored (line 19).
* Nodes that never appear in any chunk (no edge inside the (sub)graph) are left at ``-1`` by
  Algorithm 1; the paper is silent, so they go, one at a time in id order, to the lightest side.

p parts (:func:`grem_reference`)
--------------------------------
Sec. 4.1: "first partitioning the graph into two parts, and then recursively re-partitioning
each part into two new parts as needed". Each part is re-partitioned as a graph of its own:
its nodes and the rows with both endpoints in it (rows crossing parts are already cut), in file
order, with windows of ``window_frac`` of *its* rows, a fresh history and a fresh METIS seed.
Capacity (Sec. 4.1 "each of size ceil(V/p)"): a bisection of an ``n``-node part that is to end
in ``k`` parts gives its sides ``P = ceil(n * k_side / k)`` with ``k_side = ceil(k/2)`` and
``floor(k/2)``; for p a power of two (4, 8, 16) this is ``P = ceil(n / 2)`` at every level, so
the final parts hold ``ceil(|V| / p)`` nodes up to rounding. (For other p, METIS gets the
matching ``tpwgts`` and ``argmin(sizes)`` compares ``sizes / P``.)

Readings where the paper is ambiguous (see :data:`CHOICES`, also written to the markdown)
------------------------------------------------------------------------------------------
The main reference uses the first option of each; ``options=`` switches them (the ``run``
sub-command also records a few alternatives, ``--variants``):

* ``capacity``: ``exclude_self`` - in ``assign`` (Alg. 2 lines 11-12) ``sizes`` exclude the
  node being placed ("room for this node"; a node may stay where it is) | ``literal`` - sizes
  still count it in its old side, so a node in a side holding exactly P is evicted.
* ties (Alg. 2 line 13): literal, equal estimates -> ``argmin(sizes)`` (side 0 on equal
  sizes), also for placed nodes | ``ties=stay`` keeps a placed node on a tie.
* ``node_order`` (Alg. 1 line 12): ``sorted`` ascending id (what np.unique / torch.unique
  give) | ``first_seen``; updates are sequential (Gauss-Seidel) within a chunk.
* ``seed_history`` (Alg. 1 lines 9-10): ``True``, the first chunk's counts are kept | False.
* an edge = a row of ``edges.bin``; undirected graphs store both directions, so |E| counts
  rows and ``cnt_nbrs`` counts a neighbour twice when both its rows share a chunk; METIS sees
  the chunk symmetrised, de-duplicated, unweighted.
* chunk = ``ceil(0.1 * rows)`` of the (sub)graph being bisected (10 chunks per bisection).
* recursion: each part is a fresh GREM run on its induced rows (file order), ``P = ceil(n/2)``.
* nodes never streamed: lightest side (the paper is silent).
* seed: ``pymetis.part_graph(2, recursive=True)``, METIS's default bisection imbalance.

Controls that are not readings: ``refine=False`` (the fixed greedy of Fig. 6) and
``final_balance=1.10`` (per-level slack ``1.10 ** (1 / log2 p)``, shoal's balance bound).
Note on the exact capacity (``exclude_self``): once both sides hold P nodes no node can change
side (a move needs room on the other side), so on dense graphs, where the METIS-seeded first chunk already holds
most nodes, the result is close to METIS on a 10% edge sample.

Commands::

    python bench/grem_reference.py selftest               # tiny hand-built graphs
    python bench/grem_reference.py run --seeds 0 1 2      # every family, both orders
    python bench/grem_reference.py run --set nine --orders random  # the nine graphs only
    python bench/grem_reference.py run --graphs mesh_wing wiki_vote@sorted --parts 4
    python bench/grem_reference.py report                 # re-render the .md from the .json
    python bench/grem_reference.py --smoke                # all three on a tiny R-MAT graph

Graphs: bench/partition.py's family benchmark (``FAMILIES``, issue 31): the nine reference
graphs and held-out graphs of every family, each in two stream orders (shuffled, and
``NAME@sorted`` as ``shoal data import --dedup`` writes it); prepared by its
``prepare_graph`` under ``bench/work/partition/graphs``. shoal runs in this process through
:func:`shoal.partition.run.run_partition`, exactly what ``shoal partition --algo grem`` runs
(:data:`SHOAL_VARIANTS`: the defaults and the ``seed_history`` ablation).

Results: ``bench/results/grem_reference.json`` and ``.md`` (rewritten after every graph;
``run`` skips the (graph, p, variant, seed) runs already in the JSON unless ``--redo``, and
lists every command that added runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np
from numba import njit

import common
import partition as bench_partition  # bench/partition.py: its graphs and families

#: The graphs of bench/partition.py's reference table (issue 3 / 16).
REFERENCE_GRAPHS = bench_partition.REFERENCE_GRAPHS

#: Default reading of each ambiguity (first value) and the alternatives ``options=`` accepts.
DEFAULT_OPTIONS: dict[str, Any] = {
    "capacity": "exclude_self",  # or "literal"
    "node_order": "sorted",  # or "first_seen"
    "seed_history": True,  # or False
    "refine": True,  # False: the fixed-assignment streaming greedy the paper compares against
    "ties": "argmin",  # or "stay": an assigned node with equal estimates keeps its side
    "final_balance": 1.0,  # > 1: not the paper; capacity slack (see VARIANTS)
}

CHOICES = [
    (
        "Capacity test and the node itself (Alg. 2 `assign`, lines 11-12: `sizes[k] < P`)",
        "`capacity=exclude_self`: `sizes` are taken *without* the node being placed, i.e. "
        "`sizes[k] < P` means 'side k has room for this node'; a node may always stay where it "
        "is. Read literally (`capacity=literal`), `sizes` still count the node in its old side, "
        "so a node in a side holding exactly P nodes that prefers that side is evicted to "
        "`argmin(sizes)`. The paper's prose ('unless the partition is full') reads as the first. "
        "With `exclude_self`, once both sides hold P nodes no node can change side, so where the "
        "METIS-seeded first chunk already holds most nodes (column *ref seeded*) the greedy "
        "chunks can move few of them.",
    ),
    (
        "Ties (Alg. 2 line 13)",
        "Literal: equal estimates (including 0 = 0 for a node with no assigned neighbour in the "
        "chunk) go to `argmin(sizes)`, also for an already assigned node (it may move); "
        "`argmin` of equal sizes is side 0 (numpy's first-index rule).",
    ),
    (
        "Order of the nodes within a chunk (Alg. 1 line 12, `for n in c_nodes`)",
        "`node_order=sorted`: ascending node id, as `unique_nodes_in_edges` (np.unique / "
        "torch.unique) returns them; `first_seen` (order of first appearance in the chunk) is "
        "the alternative. Updates are sequential: each node sees the assignments made before "
        "it in the same chunk ('most recent partition assignments', Sec. 4.1).",
    ),
    (
        "History of the seeded first chunk (Alg. 1 lines 9-10)",
        "`seed_history=true`: kept, as the pseudo-code does (nbr_counts of the first chunk's "
        "nodes = their neighbour counts under METIS's assignment); `false` starts every node's "
        "history at the first greedy chunk that sees it.",
    ),
    (
        "What an edge is",
        "Every row of `edges.bin` is one streamed edge. The shared graphs are undirected and "
        "store both directions as two rows (docs/format.md), so |E| counts rows, a chunk is "
        "10% of the rows, and a neighbour whose two rows fall into the same chunk is counted "
        "twice by `cnt_nbrs` (Alg. 2 counts rows). METIS sees the chunk's rows symmetrised and "
        "de-duplicated, unweighted.",
    ),
    (
        "Chunk size",
        "`c_size = ceil(0.1 * rows)` of the (sub)graph being bisected, so every bisection "
        "streams 10 chunks (the last may be shorter).",
    ),
    (
        "Recursive bisection (Sec. 4.1, p > 2)",
        "Each part is bisected as a graph of its own: its nodes, the rows with both endpoints "
        "in it (file order), its own 10% chunks, a fresh history and a fresh METIS seed of "
        "its first chunk. Capacity of each side `P = ceil(n_part / 2)` (powers of two).",
    ),
    (
        "Nodes never streamed (no edge inside their (sub)graph; Algorithm 1 leaves them at -1)",
        "Not in the paper: after the last chunk they go one at a time (id order) to the "
        "lightest side.",
    ),
    (
        "Ties of already placed nodes (Alg. 2 line 13 again)",
        "`ties=argmin` (literal): a placed node whose averaged estimates are equal goes to the "
        "lighter side; `ties=stay` keeps it where it is (variant `ref_ties_stay`).",
    ),
    (
        "Capacity slack (not a reading: a control)",
        "`ref_slack110` gives every bisection `P = ceil(s * n / 2)` with `s = 1.10 ** (1 / "
        "log2 p)`, so the final parts may reach the same max/mean bound (1.10) that shoal's "
        "balance post-pass allows; the paper's rule is s = 1 (exact ceil(|V|/p)).",
    ),
    (
        "Seed partitioner",
        "METIS (`pymetis.part_graph(2, ..., recursive=True)`, METIS's default imbalance for "
        "bisection, options.seed = 0). The paper says 'e.g., METIS' (line 7).",
    ),
]

#: Reference variants the ``run`` sub-command can record: label -> options.
VARIANTS: dict[str, dict[str, Any]] = {
    "ref": {},
    "ref_literal_capacity": {"capacity": "literal"},
    "ref_first_seen": {"node_order": "first_seen"},
    "ref_no_seed_history": {"seed_history": False},
    "ref_ties_stay": {"ties": "stay"},
    "fixed_greedy": {"refine": False},
    "ref_slack110": {"final_balance": 1.10},
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- kernels
@njit(cache=True)
def _seed_counts(src, dst, lo, hi, parts, h0, h1):
    """Alg. 1 lines 9-10 via Alg. 2 ``cnt_nbrs`` on the first chunk: each row adds its
    other endpoint's side to each endpoint's history (all first-chunk nodes are assigned)."""
    for r in range(lo, hi):
        u = src[r]
        v = dst[r]
        h0[u] = 0.0
        h1[u] = 0.0
        h0[v] = 0.0
        h1[v] = 0.0
    for r in range(lo, hi):
        u = src[r]
        v = dst[r]
        if parts[v] == 0:
            h0[u] += 1.0
        elif parts[v] == 1:
            h1[u] += 1.0
        if parts[u] == 0:
            h0[v] += 1.0
        elif parts[u] == 1:
            h1[v] += 1.0


@njit(cache=True)
def _assign(n0, n1, s0, s1, cap0, cap1):
    """Alg. 2 lines 10-13. ``argmin(sizes)`` compares sizes relative to the capacities (equal
    capacities: plain sizes); equal -> side 0 (first index)."""
    if n0 < n1 and s1 < cap1:
        return 1
    if n1 < n0 and s0 < cap0:
        return 0
    if s1 * cap0 < s0 * cap1:
        return 1
    return 0


@njit(cache=True)
def _greedy_chunk(
    src,
    dst,
    lo,
    hi,
    parts,
    h0,
    h1,
    sizes,
    cap0,
    cap1,
    stamp,
    loc,
    wid,
    sorted_order,
    literal_capacity,
    refine,
    ties_stay,
):
    """Alg. 1 lines 11-19 for the chunk ``rows[lo:hi]``; returns the number of moves."""
    m = hi - lo
    nodes = np.empty(2 * m, np.int64)
    cnt = 0
    # c_nodes (line 5), in order of first appearance
    for r in range(lo, hi):
        u = src[r]
        if stamp[u] != wid:
            stamp[u] = wid
            loc[u] = cnt
            nodes[cnt] = u
            cnt += 1
        v = dst[r]
        if stamp[v] != wid:
            stamp[v] = wid
            loc[v] = cnt
            nodes[cnt] = v
            cnt += 1
    # the chunk's incidence lists (both endpoints of every row), so that cnt_nbrs is O(deg)
    deg = np.zeros(cnt + 1, np.int64)
    for r in range(lo, hi):
        deg[loc[src[r]] + 1] += 1
        deg[loc[dst[r]] + 1] += 1
    for i in range(cnt):
        deg[i + 1] += deg[i]
    fill = deg[:cnt].copy()
    adj = np.empty(2 * m, np.int64)
    for r in range(lo, hi):
        a = loc[src[r]]
        adj[fill[a]] = dst[r]
        fill[a] += 1
        b = loc[dst[r]]
        adj[fill[b]] = src[r]
        fill[b] += 1
    order = nodes[:cnt].copy()
    if sorted_order:
        order = np.sort(order)
    moves = 0
    for n in order:  # line 12
        if not refine and parts[n] != -1:
            continue  # fixed greedy (Sec. 4.1, end of line 19's paragraph): no re-evaluation
        i = loc[n]
        c0 = 0.0
        c1 = 0.0
        for j in range(deg[i], deg[i + 1]):  # line 14, Alg. 2 lines 1-9
            q = parts[adj[j]]
            if q == 0:
                c0 += 1.0
            elif q == 1:
                c1 += 1.0
        old = parts[n]  # line 13
        if old != -1:  # lines 15-16
            c0 = (h0[n] + c0) / 2.0
            c1 = (h1[n] + c1) / 2.0
            if not literal_capacity:
                sizes[old] -= 1
        if ties_stay and old != -1 and c0 == c1:
            new = old
        else:
            new = _assign(c0, c1, sizes[0], sizes[1], cap0, cap1)  # line 17
        if old != -1 and literal_capacity:
            sizes[old] -= 1
        sizes[new] += 1  # line 18, Alg. 2 fix_sizes
        if old != -1 and old != new:
            moves += 1
        parts[n] = new
        h0[n] = c0  # line 19
        h1[n] = c1
    return moves


@njit(cache=True)
def _place_unseen(parts, sizes, cap0, cap1):
    """Nodes Algorithm 1 never saw (still -1): the lightest side, one at a time."""
    k = 0
    for n in range(parts.shape[0]):
        if parts[n] == -1:
            side = 1 if sizes[1] * cap0 < sizes[0] * cap1 else 0
            parts[n] = side
            sizes[side] += 1
            k += 1
    return k


# --------------------------------------------------------------------------- GREM
def _metis_bisect(
    src: np.ndarray, dst: np.ndarray, tpw: tuple[float, float] | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Alg. 1 line 7: METIS on the chunk's graph; returns (c_nodes, their sides)."""
    import pymetis

    nodes, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    nw = nodes.shape[0]
    m = src.shape[0]
    a, b = inv[:m].astype(np.int64), inv[m:].astype(np.int64)
    key = np.unique(np.concatenate([a * nw + b, b * nw + a]))
    rows, cols = key // nw, key % nw
    xadj = np.zeros(nw + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=nw), out=xadj[1:])
    opts = pymetis.Options(seed=seed)
    kw: dict[str, Any] = {"recursive": True, "options": opts}
    if tpw is not None:
        kw["tpwgts"] = list(tpw)
    adj = pymetis.CSRAdjacency(xadj, cols.astype(np.int64))
    _, memb = pymetis.part_graph(2, adj, **kw)
    return nodes, np.asarray(memb, dtype=np.int64)


def grem_bisect(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    caps: tuple[int, int],
    window_frac: float = 0.1,
    seed: int = 0,
    options: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
) -> np.ndarray:
    """Algorithm 1 (2 parts) over the rows ``(src[i], dst[i])`` in the given order; node ids in
    ``[0, num_nodes)``; ``caps`` = ``P`` of side 0 and side 1. Returns sides (0/1) per node."""
    opt = {**DEFAULT_OPTIONS, **(options or {})}
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    parts = np.full(num_nodes, -1, np.int64)  # line 1
    sizes = np.zeros(2, np.int64)
    h0 = np.zeros(num_nodes, np.float64)  # line 2
    h1 = np.zeros(num_nodes, np.float64)
    m = src.shape[0]
    cap0, cap1 = int(caps[0]), int(caps[1])
    tpw = None if cap0 == cap1 else (cap0 / (cap0 + cap1), cap1 / (cap0 + cap1))
    moves = seeded = 0
    if m:
        c_size = max(1, math.ceil(window_frac * m))
        nchunks = math.ceil(m / c_size)  # line 3
        stamp = np.full(num_nodes, -1, np.int64)
        loc = np.zeros(num_nodes, np.int64)
        for i in range(nchunks):
            lo, hi = i * c_size, min(m, (i + 1) * c_size)  # line 4
            if i == 0:  # lines 6-10
                nodes, memb = _metis_bisect(src[lo:hi], dst[lo:hi], tpw, seed)
                parts[nodes] = memb
                seeded = int(nodes.shape[0])
                sizes[:] = np.bincount(memb, minlength=2)
                if opt["seed_history"]:
                    _seed_counts(src, dst, lo, hi, parts, h0, h1)
            else:  # lines 11-19
                moves += _greedy_chunk(
                    src,
                    dst,
                    lo,
                    hi,
                    parts,
                    h0,
                    h1,
                    sizes,
                    cap0,
                    cap1,
                    stamp,
                    loc,
                    i,
                    opt["node_order"] == "sorted",
                    opt["capacity"] == "literal",
                    opt["refine"],
                    opt["ties"] == "stay",
                )
    unseen = _place_unseen(parts, sizes, cap0, cap1)
    if stats is not None:
        stats["moves"] = stats.get("moves", 0) + int(moves)
        stats["unseen"] = stats.get("unseen", 0) + int(unseen)
        stats["seeded"] = stats.get("seeded", 0) + seeded
        stats["placements"] = stats.get("placements", 0) + int(num_nodes)
    return parts


def grem_reference(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    parts: int,
    window_frac: float = 0.1,
    seed: int = 0,
    options: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
) -> np.ndarray:
    """GREM for ``parts`` parts by recursive bisection (Sec. 4.1): the whole graph is bisected
    by :func:`grem_bisect`, then each part (its nodes and the rows inside it, file order) is
    bisected again, until every part is one of the ``parts`` final parts. Returns the part of
    every node (int64)."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    out = np.zeros(num_nodes, np.int64)
    opt = {**DEFAULT_OPTIONS, **(options or {})}
    # per-level capacity slack (1.0 = the paper's P = ceil(n/2)): final_balance ** (1/levels)
    slack = float(opt["final_balance"]) ** (1.0 / max(1, math.ceil(math.log2(parts))))
    # work items: (global node ids of the part, number of final parts it becomes, first label)
    stack: list[tuple[np.ndarray, int, int]] = [(np.arange(num_nodes), parts, 0)]
    item = np.zeros(num_nodes, np.int64)  # which work item a node belongs to (current level)
    while stack:
        nodes, k, base = stack.pop()
        if k == 1:
            out[nodes] = base
            continue
        item[:] = -1
        item[nodes] = 0
        keep = (item[src] == 0) & (item[dst] == 0)  # rows inside the part, in file order
        loc = np.full(num_nodes, -1, np.int64)
        loc[nodes] = np.arange(nodes.shape[0])
        n = nodes.shape[0]
        k0, k1 = (k + 1) // 2, k // 2
        caps = (math.ceil(slack * n * k0 / k - 1e-9), math.ceil(slack * n * k1 / k - 1e-9))
        side = grem_bisect(
            loc[src[keep]], loc[dst[keep]], n, caps, window_frac, seed, options, stats
        )
        stack.append((nodes[side == 1], k1, base + k0))
        stack.append((nodes[side == 0], k0, base))
    return out


# --------------------------------------------------------------------------- metrics
def edge_cut(src: np.ndarray, dst: np.ndarray, assignment: np.ndarray) -> tuple[float, int, int]:
    """Fraction of *undirected* edges ({u, v}, u != v, counted once however many rows hold it)
    whose endpoints are in different parts; returns (fraction, cut edges, edges)."""
    a = np.minimum(src, dst).astype(np.int64)
    b = np.maximum(src, dst).astype(np.int64)
    ok = a != b
    n = int(max(int(a.max(initial=0)), int(b.max(initial=0)))) + 1
    key = np.unique(a[ok] * n + b[ok])
    u, v = key // n, key % n
    cut = int(np.count_nonzero(assignment[u] != assignment[v]))
    total = int(key.shape[0])
    return (cut / total if total else 0.0), cut, total


def node_balance(assignment: np.ndarray, parts: int) -> float:
    """max part size / mean part size (|V| / p)."""
    sizes = np.bincount(assignment, minlength=parts)
    return float(sizes.max() / (assignment.shape[0] / parts))


# --------------------------------------------------------------------------- selftest
def _clique_edges(sizes: list[int], bridges: list[tuple[int, int]]) -> tuple[np.ndarray, int]:
    rows, off = [], 0
    for s in sizes:
        for i in range(s):
            for j in range(i + 1, s):
                rows.append((off + i, off + j))
        off += s
    rows += bridges
    e = np.array(rows, np.int64)
    return np.concatenate([e, e[:, ::-1]]), off  # both directions, like the graph files


def selftest() -> int:
    rng = np.random.default_rng(0)
    checks = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")

    # 1. two 5-cliques joined by one edge, p = 2: one cut edge, 5 + 5 nodes (42 rows: 10%
    #    windows of 5 rows are too small to see a clique, so 100% and 50% windows here)
    for frac in (1.0, 0.5):
        e, n = _clique_edges([5, 5], [(4, 5)])
        e = e[rng.permutation(len(e))]
        a = grem_reference(e[:, 0], e[:, 1], n, 2, window_frac=frac)
        f, c, t = edge_cut(e[:, 0], e[:, 1], a)
        sizes = np.bincount(a, minlength=2).tolist()
        check(
            f"two 5-cliques + bridge, p=2, windows {frac:.0%}",
            c == 1 and sizes == [5, 5],
            f"cut {c}/{t} edges, sizes {sizes}",
        )
    # 2. two 30-cliques + bridge, 10% windows (the greedy chunks place most nodes)
    e, n = _clique_edges([30, 30], [(0, 30)])
    e = e[rng.permutation(len(e))]
    a = grem_reference(e[:, 0], e[:, 1], n, 2)
    f, c, t = edge_cut(e[:, 0], e[:, 1], a)
    sizes = np.bincount(a, minlength=2).tolist()
    check(
        "two 30-cliques + bridge, p=2, 10% windows",
        c == 1 and sizes == [30, 30],
        f"cut {c}/{t} edges, sizes {sizes}",
    )
    # 3. a ring of 8 cliques of 12 nodes, p = 8 and 4 through the recursion: with one window
    #    (the METIS seed alone) 8 / 4 bridges cut; with 10% windows exact balance
    bridges = [(12 * i + 11, (12 * (i + 1)) % 96) for i in range(8)]
    e, n = _clique_edges([12] * 8, bridges)
    e = e[rng.permutation(len(e))]
    for p, want in ((8, 8), (4, 4)):
        a = grem_reference(e[:, 0], e[:, 1], n, p, window_frac=1.0)
        f, c, t = edge_cut(e[:, 0], e[:, 1], a)
        sizes = np.bincount(a, minlength=p).tolist()
        check(
            f"ring of 8 12-cliques, p={p}, one window",
            c == want and max(sizes) == n // p,
            f"cut {c}/{t} edges, sizes {sizes}",
        )
        a = grem_reference(e[:, 0], e[:, 1], n, p)
        f, c, t = edge_cut(e[:, 0], e[:, 1], a)
        sizes = np.bincount(a, minlength=p).tolist()
        check(
            f"ring of 8 12-cliques, p={p}, 10% windows",
            max(sizes) == n // p,
            f"cut {c}/{t} edges, sizes {sizes}",
        )
    # 4. isolated nodes go to the lightest side; capacity P = ceil(n/2) holds
    e, _ = _clique_edges([6, 6], [(0, 6)])
    a = grem_reference(e[:, 0], e[:, 1], 15, 2)
    sizes = np.bincount(a, minlength=2).tolist()
    check("3 isolated nodes, p=2", max(sizes) == 8, f"sizes {sizes}")
    # 5. the assign rule (Alg. 2 lines 10-13)
    r = (
        _assign(1.0, 2.0, 3, 3, 5, 5),
        _assign(1.0, 2.0, 3, 5, 5, 5),
        _assign(2.0, 2.0, 4, 3, 5, 5),
        _assign(3.0, 1.0, 2, 2, 5, 5),
    )
    check("assign rule", r == (1, 0, 1, 0), f"{r} (want (1, 0, 1, 0))")
    # 6. greedy refinement moves nodes: 2nd chunk contradicts a deliberately bad history
    parts = np.array([0, 0, 1, 1, 1], np.int64)
    h0 = np.array([0, 0, 0, 0, 5.0])  # node 4: history says side 0 ...
    h1 = np.zeros(5)
    sizes_a = np.array([2, 3], np.int64)
    src = np.array([4, 4, 4], np.int64)  # ... this chunk says 3 neighbours in side 1
    dst = np.array([2, 3, 2], np.int64)
    _greedy_chunk(
        src,
        dst,
        0,
        3,
        parts,
        h0,
        h1,
        sizes_a,
        3,
        3,
        np.full(5, -1, np.int64),
        np.zeros(5, np.int64),
        1,
        True,
        False,
        True,
        False,
    )
    check(
        "history averaging (line 16)",
        h0[4] == 2.5 and h1[4] == 1.5 and parts[4] == 0,
        f"h=({h0[4]}, {h1[4]}), part {parts[4]}",
    )
    # 7. 16 parts on a 2D grid: every part used, balance ~1
    side_n = 40
    idx = np.arange(side_n * side_n).reshape(side_n, side_n)
    g = np.concatenate(
        [
            np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
            np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1),
        ]
    )
    g = np.concatenate([g, g[:, ::-1]])
    g = g[rng.permutation(len(g))]
    for frac, bound in ((1.0, 0.15), (0.1, 0.75)):  # optimum ~0.08, random 0.94
        a = grem_reference(g[:, 0], g[:, 1], side_n * side_n, 16, window_frac=frac)
        f, c, t = edge_cut(g[:, 0], g[:, 1], a)
        bal = node_balance(a, 16)
        check(
            f"40x40 grid, p=16, windows {frac:.0%}",
            len(np.unique(a)) == 16 and bal <= 1.0 + 1e-9 and f < bound,
            f"cut {f:.3f}, balance {bal:.3f}",
        )
    print(f"{sum(checks)}/{len(checks)} checks passed")
    return 0 if all(checks) else 1


# --------------------------------------------------------------------------- benchmark
def machine() -> dict[str, Any]:
    """common.py's machine record, plus the numpy version."""
    return {**common.machine(), "numpy": np.__version__}


def load_edges(path: Path) -> tuple[np.ndarray, np.ndarray, int, str]:
    """The rows of ``edges.bin`` in file order (what both partitioners stream)."""
    from shoal.data.format import GraphDir

    g = GraphDir.open(path)
    e = np.asarray(g.edge_stream().memmap())
    meta = json.loads((path / "meta.json").read_text())
    info = (meta.get("checksums") or meta.get("files") or {}).get("edges.bin", "")
    digest = str(info.get("checksum", "") if isinstance(info, dict) else info)
    return e[:, 0].astype(np.int64), e[:, 1].astype(np.int64), int(g.num_nodes), digest


#: shoal configurations compared with the reference: label -> ``--option`` values of
#: ``shoal partition --algo grem`` (``shoal``: the defaults).
SHOAL_VARIANTS: dict[str, dict[str, Any]] = {
    "shoal": {},
    "shoal_no_seed_history": {"seed_history": False},
    "shoal_seed_history": {"seed_history": True},
}


def shoal_command(parts: int, seed: int, options: dict[str, Any]) -> str:
    opts = "".join(f" --option {k}={str(v).lower()}" for k, v in options.items())
    return f"shoal partition GRAPH --algo grem --parts {parts} --seed {seed}{opts}"


def run_shoal(
    path: Path, parts: int, seed: int, options: dict[str, Any], src: np.ndarray, dst: np.ndarray
) -> dict[str, Any]:
    """shoal's GREM as ``shoal partition GRAPH --algo grem --parts P --seed S [--option
    K=V]`` runs it (:func:`shoal.partition.run.run_partition` with the CLI's configuration:
    GREM, then the 1.10 balance post-pass, no restreaming refinement), in this process, without
    the metrics pass (the cut is computed here, as for the reference)."""
    from shoal.partition.run import run_partition

    t0 = time.perf_counter()
    res = run_partition(
        path, "grem", num_parts=parts, seed=seed, metrics=False, show_progress=False, **options
    )
    wall = time.perf_counter() - t0
    a = res.assignment.node_part.astype(np.int64)
    f, c, t = edge_cut(src, dst, a)
    return {
        "command": shoal_command(parts, seed, options),
        "options": options,
        "cut": f,
        "cut_edges": c,
        "balance": node_balance(a, parts),
        "parts_used": int(len(np.unique(a))),
        "seconds": wall,
        "seconds_per_phase": res.metrics.get("seconds_per_phase"),
        "moved_by_balance": res.metrics.get("moved_by_balance"),
    }


def run_reference(
    src: np.ndarray, dst: np.ndarray, n: int, parts: int, seed: int, options: dict[str, Any]
) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    c0, t0 = time.process_time(), time.perf_counter()
    a = grem_reference(src, dst, n, parts, window_frac=0.1, seed=seed, options=options, stats=stats)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    f, c, t = edge_cut(src, dst, a)
    return {
        "options": {**DEFAULT_OPTIONS, **options},
        "cut": f,
        "cut_edges": c,
        "undirected_edges": t,
        "balance": node_balance(a, parts),
        "parts_used": int(len(np.unique(a))),
        "seconds": wall,
        "cpu_seconds": cpu,
        **stats,
    }


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "—" if x is None else format(x, spec)


# --------------------------------------------------------------------------- report
def _order(graph: str) -> str:
    return "sorted" if graph.endswith(bench_partition.SORTED_SUFFIX) else "random"


class _Runs:
    """The runs of the JSON indexed by (graph, p, variant): cut, balance, seconds, ... as
    means over the seeds that every variant of that (graph, p) has."""

    def __init__(self, runs: list[dict[str, Any]]) -> None:
        self.by: dict[tuple[str, int, str], dict[int, dict[str, Any]]] = {}
        for r in runs:
            if "cut" in r:
                key = (r["graph"], r["parts"], r["variant"])
                self.by.setdefault(key, {})[int(r.get("seed", 0))] = r

    def graphs(self) -> list[str]:
        return sorted({k[0] for k in self.by})

    def seeds(self, graph: str, p: int, variants: list[str]) -> list[int]:
        sets = [set(self.by.get((graph, p, v), {})) for v in variants]
        return sorted(set.intersection(*sets)) if sets else []

    def mean(self, graph: str, p: int, variant: str, key: str, seeds: list[int]) -> float | None:
        recs = self.by.get((graph, p, variant), {})
        vals = [recs[s][key] for s in seeds if s in recs and key in recs[s]]
        return float(mean(vals)) if vals and len(vals) == len(seeds) else None

    def ratio(self, graph: str, p: int, variant: str) -> tuple[float, list[int]] | None:
        """Variant cut / reference cut, both means over the seeds they share."""
        seeds = self.seeds(graph, p, ["ref", variant])
        if not seeds:
            return None
        r = self.mean(graph, p, "ref", "cut", seeds)
        s = self.mean(graph, p, variant, "cut", seeds)
        return (s / r if r else float("nan")), seeds


def _graph_order(names: list[str]) -> list[str]:
    """Family order of bench/partition.py, the random stream order before the sorted one."""
    fam = bench_partition.FAMILY_GRAPHS
    key = {g: i for i, g in enumerate(fam)}

    def k(name: str) -> tuple[int, int, str]:
        base = bench_partition.base_name(name)
        return (key.get(base, len(fam)), _order(name) == "sorted", name)

    return sorted(names, key=k)


def _choice_section(
    L: list[str], R: _Runs, graphs: list[str], parts: list[int], variants: list[str]
) -> None:
    L.append("## The target: shoal cut within 1.10x of the reference, every graph and p\n")
    L.append(
        "Per (graph, p): shoal's cut / the reference's cut, each the mean over the seeds. "
        "*within 1.10x*: how many (graph, p) cells hold it; *mean*, *max*: over the cells; "
        "*single runs*: the same per (graph, p, seed), i.e. one run of each against one run "
        "of the reference with the same seed; *seed 0*: only the runs with `--seed 0`. "
        "Held-out: graphs not in bench/partition.py's nine reference graphs.\n"
    )
    L.append(
        "| shoal variant | graphs | order | cells | within 1.10x | mean ratio | max ratio | "
        "single runs within 1.10x | seed 0: within 1.10x, max | cells > 1.10 |"
    )
    L.append("|---" * 10 + "|")
    nine = set(REFERENCE_GRAPHS)
    picks = (
        ("the nine", lambda b: b in nine),
        ("held-out", lambda b: b not in nine),
        ("all", lambda b: True),
    )
    for v in variants:
        for label, pick in picks:
            for order in ("random", "sorted", "both"):
                cells, runs, zero = [], [], []
                for g in graphs:
                    if not pick(bench_partition.base_name(g)):
                        continue
                    if order != "both" and _order(g) != order:
                        continue
                    for p in parts:
                        rr = R.ratio(g, p, v)
                        if rr is None:
                            continue
                        cells.append((g, p, rr[0]))
                        for seed in rr[1]:
                            r = R.mean(g, p, "ref", "cut", [seed])
                            x = R.mean(g, p, v, "cut", [seed])
                            runs.append(x / r if r else float("nan"))
                            if seed == 0:
                                zero.append(runs[-1])
                if not cells:
                    continue
                ok = sum(c[2] <= 1.10 for c in cells)
                bad = ", ".join(f"{g} p={p} ({r:.3f})" for g, p, r in cells if r > 1.10)
                z = (
                    f"{sum(x <= 1.10 for x in zero)} / {len(zero)}, {max(zero):.3f}"
                    if zero
                    else "—"
                )
                L.append(
                    f"| {v} | {label} | {order} | {len(cells)} | {ok} | "
                    f"{mean(c[2] for c in cells):.3f} | {max(c[2] for c in cells):.3f} | "
                    f"{sum(x <= 1.10 for x in runs)} / {len(runs)} | {z} | {bad or '—'} |"
                )


def _family_section(
    L: list[str], R: _Runs, graphs: list[str], parts: list[int], variants: list[str]
) -> None:
    L.append("\n## Per family\n")
    L.append(
        "Means over the family's graphs (each graph: mean over the seeds) of the reference's "
        "cut, shoal's cut and shoal / reference (mean of the per-graph ratios, and the largest "
        "of them).\n"
    )
    head = " | ".join(f"{v} cut | {v} / ref (max)" for v in variants)
    L.append(f"| family | order | p | graphs | ref cut | {head} |")
    L.append("|---" * (4 + 1 + 2 * len(variants)) + "|")
    present = {bench_partition.base_name(g) for g in graphs}
    nine = [g for g in REFERENCE_GRAPHS if g in present]
    held = [g for g in bench_partition.FAMILY_GRAPHS if g in present and g not in nine]
    groups = [(f, [g for g in gs if g in present]) for f, gs in bench_partition.FAMILIES.items()]
    groups = [x for x in groups if x[1]]
    groups += [("**the nine**", nine), ("**held-out**", held), ("**all**", nine + held)]
    for fam, members in groups:
        for order in ("random", "sorted"):
            names = [
                g + ("" if order == "random" else bench_partition.SORTED_SUFFIX) for g in members
            ]
            names = [g for g in names if g in graphs]
            for p in parts:
                refs, cols = [], {v: ([], []) for v in variants}
                for g in names:
                    seeds = R.seeds(g, p, ["ref", *variants])
                    if not seeds:
                        continue
                    rc = R.mean(g, p, "ref", "cut", seeds)
                    refs.append(rc)
                    for v in variants:
                        sc = R.mean(g, p, v, "cut", seeds)
                        cols[v][0].append(sc)
                        cols[v][1].append(sc / rc if rc else float("nan"))
                if not refs:
                    continue
                cells = " | ".join(
                    f"{mean(cols[v][0]):.4f} | {mean(cols[v][1]):.3f} ({max(cols[v][1]):.3f})"
                    for v in variants
                )
                L.append(f"| {fam} | {order} | {p} | {len(refs)} | {mean(refs):.4f} | {cells} |")


def _graph_section(
    L: list[str], R: _Runs, graphs: list[str], parts: list[int], variants: list[str]
) -> None:
    L.append("\n## Every graph\n")
    L.append(
        "Means over the seeds. Balance = max part size / mean. Seconds: wall time of one run "
        "(reference: the function; shoal: `run_partition`, partition + balance post-pass), "
        "mean over the seeds, on a shared machine. *ref seeded*: share of the reference's "
        "node placements (all bisections) made by the METIS seed of a first chunk; *ref "
        "moves*: re-assignments of placed nodes by its greedy refinement (Alg. 1 lines 15-17), "
        "all levels.\n"
    )
    head = " | ".join(f"{v} cut | {v} / ref" for v in variants)
    L.append(
        f"| graph | family | order | p | seeds | ref cut | {head} | ref bal | "
        f"{variants[0]} bal | ref s | {variants[0]} s | ref seeded | ref moves |"
    )
    L.append("|---" * (8 + 2 * len(variants) + 4) + "|")
    for g in graphs:
        for p in parts:
            seeds = R.seeds(g, p, ["ref", *variants])
            if not seeds:
                continue
            rc = R.mean(g, p, "ref", "cut", seeds)
            cells = []
            for v in variants:
                sc = R.mean(g, p, v, "cut", seeds)
                cells.append(f"{sc:.4f} | {sc / rc if rc else float('nan'):.3f}")
            v0 = variants[0]
            seeded = R.mean(g, p, "ref", "seeded", seeds)
            placed = R.mean(g, p, "ref", "placements", seeds)
            L.append(
                f"| {bench_partition.base_name(g)} | {bench_partition.family_of(g)} | "
                f"{_order(g)} | {p} | {len(seeds)} | {rc:.4f} | {' | '.join(cells)} | "
                f"{R.mean(g, p, 'ref', 'balance', seeds):.3f} | "
                f"{R.mean(g, p, v0, 'balance', seeds):.3f} | "
                f"{R.mean(g, p, 'ref', 'seconds', seeds):.2f} | "
                f"{R.mean(g, p, v0, 'seconds', seeds):.2f} | "
                f"{(seeded or 0) / (placed or 1):.0%} | {R.mean(g, p, 'ref', 'moves', seeds):.0f} |"
            )


def _sensitivity_section(L: list[str], R: _Runs, graphs: list[str], parts: list[int]) -> None:
    alts = [v for v in VARIANTS if v != "ref"]
    have = [v for v in alts if any(k[2] == v for k in R.by)]
    if not have:
        return
    L.append("\n## Sensitivity: the reference under the alternative readings\n")
    L.append(
        "Mean cut over the graphs that have the run (seeds the variant shares with the main "
        "reference), next to the main reference on the same graphs, and shoal (default) / that "
        "variant (mean of ratios). See the choices below. `fixed_greedy` is not a reading but "
        "the paper's baseline (Sec. 4.1, Fig. 6): the same stream with assignments frozen "
        "after the first greedy choice (no refinement).\n"
    )
    L.append("| variant | order | p | graphs | variant cut | main ref cut | shoal / variant |")
    L.append("|---|---|---|---|---|---|---|")
    for v in have:
        for order in ("random", "sorted"):
            for p in parts:
                vc, rc, sr = [], [], []
                for g in graphs:
                    if _order(g) != order:
                        continue
                    seeds = R.seeds(g, p, ["ref", v])
                    if not seeds:
                        continue
                    vc.append(R.mean(g, p, v, "cut", seeds))
                    rc.append(R.mean(g, p, "ref", "cut", seeds))
                    s = R.mean(g, p, "shoal", "cut", seeds)
                    if s is not None and vc[-1]:
                        sr.append(s / vc[-1])
                if vc:
                    L.append(
                        f"| {v} | {order} | {p} | {len(vc)} | {mean(vc):.4f} | {mean(rc):.4f} | "
                        f"{_fmt(mean(sr) if sr else None, '.3f')} |"
                    )


def render(data: dict[str, Any]) -> str:
    meta = data["meta"]
    R = _Runs(data["runs"])
    graphs = _graph_order(R.graphs())
    parts = meta.get("parts", [4, 8, 16])
    variants = [v for v in SHOAL_VARIANTS if any(k[2] == v for k in R.by)]
    load = (meta["machine"].get("load_avg_end") or [None])[0]
    L = common.header(
        "GREM: shoal `--algo grem` against an independent reference (issues 16, 31)",
        meta,
        "The reference (`bench/grem_reference.py`) is written from the Armada paper alone "
        "(Sec. 4.1, Algorithms 1-2): edges streamed in file order in chunks of 10% of the "
        "rows, the first chunk bisected by METIS with its neighbour counts kept as history "
        "(Alg. 1 lines 9-10), later chunks assigned greedily with the history refinement "
        "(estimates averaged with the node's previous estimate), capacity `P = ceil(n/2)` per "
        "bisection, recursive bisection to p parts, no post-pass. shoal: what `shoal "
        "partition GRAPH --algo grem --parts P --seed S` runs (`run_partition`: GREM with its "
        "defaults, 10% windows, seed history kept (`seed_history=true`, the default since "
        "issue 31), then its 1.10 balance post-pass, no restreaming refinement), "
        "called in this process; `shoal_no_seed_history` / `shoal_seed_history` add `--option "
        "seed_history=false` / `true`. Both read the same `edges.bin` in the same order "
        "(bench/partition.py's prepared graphs: undirected, simple, both directions stored; "
        "*random* order: rows shuffled with seed 0; *sorted*: `NAME@sorted`, the rows as "
        "`shoal data import --dedup` writes them, by source). Seeds: METIS's seed of both "
        "(and shoal's `--seed`); each cut is the mean over the seeds of the table. Cut = "
        "fraction of undirected edges whose endpoints are in different parts, and balance = "
        "max part size / mean, both computed by this script from the assignments. Ratio = "
        "shoal cut / reference cut (> 1: shoal cuts more). Graph families: bench/partition.py "
        "`FAMILIES`.",
        f"Started {meta['started']}"
        + (f", last run {meta['updated']}" if meta.get("updated") else "")
        + f"; 1-minute load average at the end of the last run: {_fmt(load, '.1f')} (the "
        "seconds columns depend on the machine's load, the cuts do not).",
    )
    if variants:
        _choice_section(L, R, graphs, parts, variants)
        _family_section(L, R, graphs, parts, variants)
        _graph_section(L, R, graphs, parts, variants)
    _sensitivity_section(L, R, graphs, parts)
    L.append("\n## Readings chosen where the paper is ambiguous\n")
    for what, how in CHOICES:
        L.append(f"- **{what}.** {how}")
    L.append(
        "\nSanity check: `python bench/grem_reference.py selftest` (two cliques joined by one "
        "edge give a cut of exactly one edge at p = 2; a ring of cliques, a grid at p = 16, "
        "isolated nodes, the assign rule and the history averaging)."
    )
    fails = [r for r in data["runs"] if "cut" not in r]
    if fails:
        L.append("\n## Failures\n")
        for r in fails:
            L.append(f"- {r['graph']} p={r['parts']} {r['variant']}: {r.get('error', '')[-300:]}")
    return "\n".join(L) + "\n"


def graph_list(graph_set: str, orders: list[str]) -> list[str]:
    """The benchmark graph names of ``--set`` in the stream ``orders``."""
    base = REFERENCE_GRAPHS if graph_set == "nine" else bench_partition.FAMILY_GRAPHS
    suffix = {"random": "", "sorted": bench_partition.SORTED_SUFFIX}
    return [g + suffix[order] for order in orders for g in base]


def cmd_run(args: argparse.Namespace, prefix: Path) -> None:
    data = {"meta": {}, "runs": []}
    if not args.smoke:
        data = common.load_json(prefix.with_suffix(".json"), data)
    meta = data["meta"]
    parts_list = args.parts or [4, 8, 16]
    command = common.command_line("grem_reference.py")
    meta["commands"] = [*meta.get("commands", []), command]
    meta.update(
        command=command, machine=machine(), parts=sorted({*meta.get("parts", []), *parts_list})
    )
    meta.setdefault("started", time.strftime("%Y-%m-%d %H:%M:%S"))
    variants = ["ref", *(args.shoal or ["shoal", "shoal_no_seed_history"]), *(args.variants or [])]
    seeds = args.seeds or [0]
    done = {
        (r["graph"], r["parts"], r["variant"], int(r.get("seed", 0)))
        for r in data["runs"]
        if "cut" in r and r["variant"] not in (args.redo or [])
    }
    # compile the numba kernels before anything is timed
    e, n = _clique_edges([6, 6], [(0, 6)])
    grem_reference(e[:, 0], e[:, 1], n, 4)
    t_start = time.perf_counter()
    for gname in args.graphs or graph_list(args.set, args.orders):
        path = bench_partition.prepare_graph(gname)
        src, dst, n, digest = load_edges(path)
        for p in parts_list:
            for v in variants:
                # the alternative readings of the reference: the first seed only
                for seed in seeds if v in ("ref", *SHOAL_VARIANTS) else seeds[:1]:
                    key = (gname, p, v, seed)
                    if key in done:
                        continue
                    if v in SHOAL_VARIANTS:
                        rec = run_shoal(path, p, seed, SHOAL_VARIANTS[v], src, dst)
                    else:
                        rec = run_reference(src, dst, n, p, seed, VARIANTS[v])
                    rec.update(
                        graph=gname,
                        parts=p,
                        variant=v,
                        seed=seed,
                        family=bench_partition.family_of(gname),
                        order=_order(gname),
                        graph_dir=common.rel(path),
                        num_nodes=n,
                        rows=int(src.shape[0]),
                    )
                    if digest:
                        rec["edges_checksum"] = digest
                    data["runs"] = [
                        r
                        for r in data["runs"]
                        if (r["graph"], r["parts"], r["variant"], int(r.get("seed", 0))) != key
                    ] + [rec]
                    log(f"{gname} p={p} {v} seed={seed}: cut={rec.get('cut', float('nan')):.4f}")
            meta["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
            common.write_results(prefix, data, render)
    meta["last_run_seconds"] = time.perf_counter() - t_start
    meta.setdefault("run_seconds", []).append(meta["last_run_seconds"])
    meta["machine"]["load_avg_end"] = os.getloadavg()
    common.write_results(prefix, data, render)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.bench_args(ap, out="bench/results/grem_reference")
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("selftest", help="sanity checks on tiny hand-built graphs")
    r = sub.add_parser("run", help="reference vs shoal on the benchmark graphs")
    r.add_argument(
        "--set",
        choices=["families", "nine"],
        default="families",
        help="graph set: every family of bench/partition.py (default) or the nine reference graphs",
    )
    r.add_argument(
        "--orders",
        nargs="*",
        choices=["random", "sorted"],
        default=["random", "sorted"],
        help="stream orders (default: both)",
    )
    r.add_argument("--graphs", nargs="*", help="explicit graph names (NAME or NAME@sorted)")
    r.add_argument("--parts", nargs="*", type=int, help="default: 4 8 16")
    r.add_argument("--seeds", nargs="*", type=int, help="METIS / shoal seeds (default: 0)")
    r.add_argument(
        "--shoal",
        nargs="*",
        choices=list(SHOAL_VARIANTS),
        help="shoal configurations (default: shoal shoal_no_seed_history)",
    )
    r.add_argument(
        "--variants",
        nargs="*",
        choices=[v for v in VARIANTS if v != "ref"],
        help="also run the reference under these alternative readings (first seed only)",
    )
    r.add_argument("--redo", nargs="*", help="run these variants again (ref, shoal, ...)")
    sub.add_parser("report", help="re-render the .md from the .json")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/grem_reference")
    if args.smoke:  # the three sub-commands; run on a tiny R-MAT graph, p = 4, one seed
        args.graphs, args.parts, args.seeds, args.redo = ["rmat_smoke"], [4], [0], None
        args.shoal, args.variants = None, ["fixed_greedy"]
    elif args.cmd is None:
        ap.error("a sub-command is needed: selftest, run or report")
    if (args.smoke or args.cmd == "selftest") and selftest():
        return 1
    if args.smoke or args.cmd == "run":
        cmd_run(args, prefix)
    if args.smoke or args.cmd == "report":
        data = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
