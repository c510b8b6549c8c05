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
    nice -n 10 python bench/grem_reference.py run         # 9 reference graphs, p = 4, 8, 16
    python bench/grem_reference.py run --graphs mesh_wing --parts 4
    python bench/grem_reference.py report                 # rewrite the .md from the .json

Results: ``bench/results/grem_reference.json`` and ``.md`` (rewritten after every run; ``run``
skips the (graph, p, variant) runs already in the JSON unless ``--redo``). Scratch (shoal's
assignment directories): ``bench/work/grem_ref/``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data as bench_data  # noqa: E402  (bench/data.py)
import partition as bench_partition  # noqa: E402  (bench/partition.py)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SCRATCH = REPO / "bench" / "work" / "grem_ref"
#: bench/partition.py prepares (and keeps) its graphs here; the same files are used.
PARTITION_WORK = REPO / "bench" / "work" / "partition"
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
def _greedy_chunk(src, dst, lo, hi, parts, h0, h1, sizes, cap0, cap1, stamp, loc, wid,
                  sorted_order, literal_capacity, refine, ties_stay):  # fmt: skip
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
                    src, dst, lo, hi, parts, h0, h1, sizes, cap0, cap1, stamp, loc, i,
                    opt["node_order"] == "sorted", opt["capacity"] == "literal", opt["refine"],
                    opt["ties"] == "stay",
                )  # fmt: skip
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
        check(f"two 5-cliques + bridge, p=2, windows {frac:.0%}", c == 1 and sizes == [5, 5],
              f"cut {c}/{t} edges, sizes {sizes}")  # fmt: skip
    # 2. two 30-cliques + bridge, 10% windows (the greedy chunks place most nodes)
    e, n = _clique_edges([30, 30], [(0, 30)])
    e = e[rng.permutation(len(e))]
    a = grem_reference(e[:, 0], e[:, 1], n, 2)
    f, c, t = edge_cut(e[:, 0], e[:, 1], a)
    sizes = np.bincount(a, minlength=2).tolist()
    check("two 30-cliques + bridge, p=2, 10% windows", c == 1 and sizes == [30, 30],
          f"cut {c}/{t} edges, sizes {sizes}")  # fmt: skip
    # 3. a ring of 8 cliques of 12 nodes, p = 8 and 4 through the recursion: with one window
    #    (the METIS seed alone) 8 / 4 bridges cut; with 10% windows exact balance
    bridges = [(12 * i + 11, (12 * (i + 1)) % 96) for i in range(8)]
    e, n = _clique_edges([12] * 8, bridges)
    e = e[rng.permutation(len(e))]
    for p, want in ((8, 8), (4, 4)):
        a = grem_reference(e[:, 0], e[:, 1], n, p, window_frac=1.0)
        f, c, t = edge_cut(e[:, 0], e[:, 1], a)
        sizes = np.bincount(a, minlength=p).tolist()
        check(f"ring of 8 12-cliques, p={p}, one window", c == want and max(sizes) == n // p,
              f"cut {c}/{t} edges, sizes {sizes}")  # fmt: skip
        a = grem_reference(e[:, 0], e[:, 1], n, p)
        f, c, t = edge_cut(e[:, 0], e[:, 1], a)
        sizes = np.bincount(a, minlength=p).tolist()
        check(f"ring of 8 12-cliques, p={p}, 10% windows", max(sizes) == n // p,
              f"cut {c}/{t} edges, sizes {sizes}")  # fmt: skip
    # 4. isolated nodes go to the lightest side; capacity P = ceil(n/2) holds
    e, _ = _clique_edges([6, 6], [(0, 6)])
    a = grem_reference(e[:, 0], e[:, 1], 15, 2)
    sizes = np.bincount(a, minlength=2).tolist()
    check("3 isolated nodes, p=2", max(sizes) == 8, f"sizes {sizes}")
    # 5. the assign rule (Alg. 2 lines 10-13)
    r = (_assign(1.0, 2.0, 3, 3, 5, 5), _assign(1.0, 2.0, 3, 5, 5, 5), _assign(2.0, 2.0, 4, 3, 5, 5),
         _assign(3.0, 1.0, 2, 2, 5, 5))  # fmt: skip
    check("assign rule", r == (1, 0, 1, 0), f"{r} (want (1, 0, 1, 0))")
    # 6. greedy refinement moves nodes: 2nd chunk contradicts a deliberately bad history
    parts = np.array([0, 0, 1, 1, 1], np.int64)
    h0 = np.array([0, 0, 0, 0, 5.0])  # node 4: history says side 0 ...
    h1 = np.zeros(5)
    sizes_a = np.array([2, 3], np.int64)
    src = np.array([4, 4, 4], np.int64)  # ... this chunk says 3 neighbours in side 1
    dst = np.array([2, 3, 2], np.int64)
    _greedy_chunk(src, dst, 0, 3, parts, h0, h1, sizes_a, 3, 3, np.full(5, -1, np.int64),
                  np.zeros(5, np.int64), 1, True, False, True, False)  # fmt: skip
    check("history averaging (line 16)", h0[4] == 2.5 and h1[4] == 1.5 and parts[4] == 0,
          f"h=({h0[4]}, {h1[4]}), part {parts[4]}")  # fmt: skip
    # 7. 16 parts on a 2D grid: every part used, balance ~1
    side_n = 40
    idx = np.arange(side_n * side_n).reshape(side_n, side_n)
    g = np.concatenate([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                        np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)])  # fmt: skip
    g = np.concatenate([g, g[:, ::-1]])
    g = g[rng.permutation(len(g))]
    for frac, bound in ((1.0, 0.15), (0.1, 0.75)):  # optimum ~0.08, random 0.94
        a = grem_reference(g[:, 0], g[:, 1], side_n * side_n, 16, window_frac=frac)
        f, c, t = edge_cut(g[:, 0], g[:, 1], a)
        bal = node_balance(a, 16)
        check(f"40x40 grid, p=16, windows {frac:.0%}",
              len(np.unique(a)) == 16 and bal <= 1.0 + 1e-9 and f < bound,
              f"cut {f:.3f}, balance {bal:.3f}")  # fmt: skip
    print(f"{sum(checks)}/{len(checks)} checks passed")
    return 0 if all(checks) else 1


# --------------------------------------------------------------------------- benchmark
def machine() -> dict[str, Any]:
    """bench/data.py's machine record, plus the host, platform and numpy version."""
    return {**bench_data.machine(), "node": platform.node(), "platform": platform.platform(),
            "numpy": np.__version__}  # fmt: skip


def graph_dir(name: str) -> Path:
    """The graph bench/partition.py partitions (undirected, simple, edges in a seeded random
    order); prepared by its own ``prepare_graph`` if it is not there yet."""
    path = PARTITION_WORK / "graphs" / name
    if (path / "meta.json").exists():
        return path
    return bench_partition.prepare_graph(name, PARTITION_WORK)


def load_edges(path: Path) -> tuple[np.ndarray, np.ndarray, int, str]:
    """The rows of ``edges.bin`` in file order (what both partitioners stream)."""
    from shoal.data.format import GraphDir

    g = GraphDir.open(path)
    e = np.asarray(g.edge_stream().memmap())
    meta = json.loads((path / "meta.json").read_text())
    info = (meta.get("checksums") or meta.get("files") or {}).get("edges.bin", "")
    digest = str(info.get("checksum", "") if isinstance(info, dict) else info)
    return e[:, 0].astype(np.int64), e[:, 1].astype(np.int64), int(g.num_nodes), digest


def shoal_bin() -> list[str]:
    exe = Path(sys.executable).with_name("shoal")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "shoal"]


def run_shoal(path: Path, parts: int, src: np.ndarray, dst: np.ndarray) -> dict[str, Any]:
    out = SCRATCH / f"{path.name}.p{parts}.assignment"
    js = SCRATCH / f"{path.name}.p{parts}.json"
    shutil.rmtree(out, ignore_errors=True)
    js.unlink(missing_ok=True)
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    args = ["partition", str(shown), "--algo", "grem", "--parts", str(parts), "--seed", "0"]
    cmd = [*shoal_bin(), *args, "--out", str(out), "--json", str(js)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    rec: dict[str, Any] = {
        "command": "shoal " + " ".join(args) + " --out OUT --json FILE",
        "returncode": proc.returncode,
        "wall_seconds": wall,
    }
    if proc.returncode != 0:
        rec["error"] = proc.stderr[-1500:]
        return rec
    a = np.load(out / "node_part.npy").astype(np.int64)
    m = json.loads(js.read_text())
    f, c, t = edge_cut(src, dst, a)
    rec.update(
        cut=f,
        cut_edges=c,
        balance=node_balance(a, parts),
        parts_used=int(len(np.unique(a))),
        seconds=float(m.get("seconds", float("nan"))),
        seconds_per_phase=m.get("seconds_per_phase"),
        reported_cut=m.get("edge_cut"),
        moved_by_balance=m.get("moved_by_balance"),
    )
    shutil.rmtree(out, ignore_errors=True)
    js.unlink(missing_ok=True)
    return rec


def run_reference(
    src: np.ndarray, dst: np.ndarray, n: int, parts: int, options: dict[str, Any]
) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    c0, t0 = time.process_time(), time.perf_counter()
    a = grem_reference(src, dst, n, parts, window_frac=0.1, seed=0, options=options, stats=stats)
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


def write_report(data: dict[str, Any], path_md: Path, path_json: Path) -> None:
    path_json.parent.mkdir(parents=True, exist_ok=True)
    tmp = path_json.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path_json)
    runs = data["runs"]
    meta = data["meta"]
    ref = {(r["graph"], r["parts"]): r for r in runs if r["variant"] == "ref" and "cut" in r}
    sho = {(r["graph"], r["parts"]): r for r in runs if r["variant"] == "shoal" and "cut" in r}
    graphs = [g for g in REFERENCE_GRAPHS if any(k[0] == g for k in ref)]
    graphs += sorted({k[0] for k in ref} - set(graphs))
    L: list[str] = ["# GREM: shoal `--algo grem` against an independent reference (issue 16)\n"]
    L.append(
        "The reference (`bench/grem_reference.py`) is written from the Armada paper alone "
        "(Sec. 4.1, Algorithms 1-2): edges streamed in file order in chunks of 10% of the rows, "
        "the first chunk bisected by METIS, later chunks assigned greedily with the history "
        "refinement (estimates averaged with the node's previous estimate), capacity "
        "`P = ceil(n/2)` per bisection, recursive bisection to p parts, no post-pass. shoal: "
        "`shoal partition GRAPH --algo grem --parts P --seed 0` with its defaults (10% windows, "
        "no restreaming refinement, its 1.10 balance post-pass). Both read the same "
        "`edges.bin` in the same order (bench/partition.py's prepared graphs: undirected, "
        "simple, both directions stored, rows shuffled with seed 0). Cut = fraction of "
        "undirected edges whose endpoints are in different parts, and balance = max part "
        "size / mean, both computed by this script from the assignments. Ratio = shoal cut / "
        "reference cut (> 1: shoal cuts more). Seconds: reference = wall time of the "
        "function in this process (numba kernels compiled beforehand); shoal = the "
        "`seconds` its CLI reports (partition + balance + metrics), wall of the whole "
        "subprocess in brackets. Shared 2-core machine, run under `nice -n 10`: times are "
        "noisy. *ref seeded*: share of the reference's node placements (summed over all "
        "bisections) made by the METIS seed of a first chunk; *ref moves*: re-assignments "
        "of already placed nodes by the greedy refinement (Alg. 1 lines 15-17), all levels.\n"
    )
    cmds = meta.get("commands") or [meta["command"]]
    L.append("Commands (in this order, each resuming the JSON): " + "; ".join(f"`{c}`" for c in cmds)
             + "  ")  # fmt: skip
    mach = meta["machine"]
    L.append(
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['mem_mib']} MiB, "
        f"{mach['platform']}, Python {mach['python']}  "
    )
    L.append(f"Started {meta['started']}, last update {time.strftime('%Y-%m-%d %H:%M:%S')}.\n")
    L.append("## Summary: mean over the graphs\n")
    L.append("| p | graphs | reference cut | shoal cut | shoal / reference (mean of ratios) "
             "| ratio of means | min ratio | max ratio | shoal no worse (mean ratio <= 1) |")  # fmt: skip
    L.append("|---|---|---|---|---|---|---|---|---|")
    for p in data["meta"].get("parts", [4, 8, 16]):
        both = [g for g in graphs if (g, p) in ref and (g, p) in sho]
        if not both:
            continue
        rc = [ref[(g, p)]["cut"] for g in both]
        sc = [sho[(g, p)]["cut"] for g in both]
        ratios = [s / r for s, r in zip(sc, rc)]
        L.append(
            f"| {p} | {len(both)} | {mean(rc):.4f} | {mean(sc):.4f} | **{mean(ratios):.3f}** | "
            f"{mean(sc) / mean(rc):.3f} | {min(ratios):.3f} | {max(ratios):.3f} | "
            f"{'yes' if mean(ratios) <= 1.0 else 'no'} |"
        )
    for p in data["meta"].get("parts", [4, 8, 16]):
        rows = [g for g in graphs if (g, p) in ref]
        if not rows:
            continue
        L.append(f"\n## p = {p}\n")
        L.append("| graph | reference cut | shoal cut | shoal / ref | ref balance | "
                 "shoal balance | ref s | shoal s (wall) | ref seeded | ref moves |")  # fmt: skip
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        rat, rcs, scs, rbs, sbs, rts, sts = [], [], [], [], [], [], []
        for g in rows:
            r, s = ref[(g, p)], sho.get((g, p))
            ratio = s["cut"] / r["cut"] if s else None
            L.append(
                f"| {g} | {r['cut']:.4f} | {_fmt(s and s['cut'])} | {_fmt(ratio, '.3f')} | "
                f"{r['balance']:.3f} | {_fmt(s and s['balance'], '.3f')} | "
                f"{r['seconds']:.2f} | {_fmt(s and s['seconds'], '.2f')} "
                f"({_fmt(s and s['wall_seconds'], '.1f')}) | "
                f"{r['seeded'] / r['placements']:.0%} | {r['moves']} |"
            )
            if s:
                rat.append(ratio)
                rcs.append(r["cut"])
                scs.append(s["cut"])
                rbs.append(r["balance"])
                sbs.append(s["balance"])
                rts.append(r["seconds"])
                sts.append(s["seconds"])
        if rat:
            L.append(
                f"| **mean** | {mean(rcs):.4f} | {mean(scs):.4f} | **{mean(rat):.3f}** | "
                f"{mean(rbs):.3f} | {mean(sbs):.3f} | {mean(rts):.2f} | {mean(sts):.2f} | | |"
            )
    # alternative readings
    alts = [v for v in VARIANTS if v != "ref"]
    have = [v for v in alts if any(r["variant"] == v and "cut" in r for r in runs)]
    if have:
        L.append("\n## Sensitivity: the reference under the alternative readings\n")
        L.append(
            "Mean cut over the graphs that have the run, next to the main reference on the same "
            "graphs, and shoal / that variant (mean of ratios). See the choices below. "
            "`fixed_greedy` is not a reading but the paper's baseline (Sec. 4.1, Fig. 6): the "
            "same stream with assignments frozen after the first greedy choice (no "
            "refinement).\n"
        )
        L.append("| variant | p | graphs | variant cut | main ref cut | shoal / variant |")
        L.append("|---|---|---|---|---|---|")
        for v in have:
            vv = {(r["graph"], r["parts"]): r for r in runs if r["variant"] == v and "cut" in r}
            for p in data["meta"].get("parts", [4, 8, 16]):
                gs = [g for g in graphs if (g, p) in vv and (g, p) in ref]
                if not gs:
                    continue
                vc = mean(vv[(g, p)]["cut"] for g in gs)
                rc = mean(ref[(g, p)]["cut"] for g in gs)
                gs2 = [g for g in gs if (g, p) in sho]
                sr = mean(sho[(g, p)]["cut"] / vv[(g, p)]["cut"] for g in gs2) if gs2 else None
                L.append(f"| {v} | {p} | {len(gs)} | {vc:.4f} | {rc:.4f} | {_fmt(sr, '.3f')} |")
    L.append("\n## Readings chosen where the paper is ambiguous\n")
    for what, how in CHOICES:
        L.append(f"- **{what}.** {how}")
    L.append(
        "\nSanity check: `python bench/grem_reference.py selftest` (two cliques joined by one "
        "edge give a cut of exactly one edge at p = 2; a ring of cliques, a grid at p = 16, "
        "isolated nodes, the assign rule and the history averaging)."
    )
    shoal_cmds = sorted({r["command"] for r in runs if r["variant"] == "shoal"})
    if shoal_cmds:
        L.append("\nshoal commands: " + "; ".join(f"`{c}`" for c in shoal_cmds[:3]) + " ...")
    fails = [r for r in runs if "cut" not in r]
    if fails:
        L.append("\n## Failures\n")
        for r in fails:
            L.append(f"- {r['graph']} p={r['parts']} {r['variant']}: {r.get('error', '')[-300:]}")
    tmp = path_md.with_suffix(".md.tmp")
    tmp.write_text("\n".join(L) + "\n")
    os.replace(tmp, path_md)


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    path_json = Path(args.out).with_suffix(".json")
    path_md = Path(args.out).with_suffix(".md")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"meta": {}, "runs": []}
    if path_json.exists():
        data = json.loads(path_json.read_text())
    parts_list = args.parts or [4, 8, 16]
    command = "nice -n 10 python bench/grem_reference.py " + " ".join(argv)
    data["meta"]["commands"] = [*data["meta"].get("commands", []), command]
    data["meta"].update(
        command=command,
        machine=machine(),
        parts=sorted(set(data["meta"].get("parts", [])) | set(parts_list)),
    )
    data["meta"].setdefault("started", time.strftime("%Y-%m-%d %H:%M:%S"))
    variants = ["ref", "shoal", *(args.variants or [])]
    done = {(r["graph"], r["parts"], r["variant"]) for r in data["runs"] if "cut" in r}
    done -= {k for k in done if k[2] in (args.redo or [])}
    # compile the numba kernels before anything is timed
    e, n = _clique_edges([6, 6], [(0, 6)])
    grem_reference(e[:, 0], e[:, 1], n, 4)
    t_start = time.perf_counter()
    for gname in args.graphs or REFERENCE_GRAPHS:
        path = graph_dir(gname)
        src, dst, n, digest = load_edges(path)
        for p in parts_list:
            for v in variants:
                if (gname, p, v) in done:
                    continue
                if v == "shoal":
                    rec = run_shoal(path, p, src, dst)
                else:
                    rec = run_reference(src, dst, n, p, VARIANTS[v])
                rec.update(graph=gname, parts=p, variant=v, graph_dir=str(path.relative_to(REPO)),
                           num_nodes=n, rows=int(src.shape[0]))  # fmt: skip
                if digest:
                    rec["edges_checksum"] = digest
                data["runs"] = [
                    r
                    for r in data["runs"]
                    if (r["graph"], r["parts"], r["variant"]) != (gname, p, v)
                ] + [rec]
                log(
                    f"{gname} p={p} {v}: cut={rec.get('cut', float('nan')):.4f} "
                    f"bal={rec.get('balance', float('nan')):.3f} "
                    f"t={rec.get('seconds', float('nan')):.2f}s"
                    + (f" ERROR {rec.get('error', '')[-200:]}" if "cut" not in rec else "")
                )
                write_report(data, path_md, path_json)
    data["meta"]["last_run_seconds"] = time.perf_counter() - t_start
    data["meta"].setdefault("run_seconds", []).append(data["meta"]["last_run_seconds"])
    data["meta"]["machine"]["load_avg_end"] = os.getloadavg()
    write_report(data, path_md, path_json)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("selftest", help="sanity checks on tiny hand-built graphs")
    r = sub.add_parser("run", help="reference vs shoal on the reference graphs")
    r.add_argument("--graphs", nargs="*", help="default: the 9 reference graphs")
    r.add_argument("--parts", nargs="*", type=int, help="default: 4 8 16")
    r.add_argument("--variants", nargs="*", choices=[v for v in VARIANTS if v != "ref"],
                   help="also run the reference under these alternative readings")  # fmt: skip
    r.add_argument("--redo", nargs="*", help="run these variants again (ref, shoal, ...)")
    r.add_argument("--out", default=str(RESULTS / "grem_reference"), help="results prefix")
    rep = sub.add_parser("report", help="rewrite the markdown from the JSON")
    rep.add_argument("--out", default=str(RESULTS / "grem_reference"), help="results prefix")
    args = ap.parse_args(argv)
    if args.cmd == "selftest":
        return selftest()
    if args.cmd == "report":
        prefix = Path(args.out)
        data = json.loads(prefix.with_suffix(".json").read_text())
        write_report(data, prefix.with_suffix(".md"), prefix.with_suffix(".json"))
        return 0
    return cmd_run(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
