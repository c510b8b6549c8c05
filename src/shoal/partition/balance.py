"""Streaming balance post-pass: bound max/mean of nodes and of training nodes per part.

Many streaming algorithms do not balance exactly (HDRF's owner conversion gives 1.13-1.30 node
balance on the shared graphs; hash and random are only balanced in expectation). This pass
moves the *least-connected* nodes out of overloaded parts:

1. capacities ``cap = max(ceil(N/p), floor(balance * N/p))`` for nodes and the same with the
   number of training nodes ``T`` for training nodes (so a bound is always reachable);
2. one edge pass counts, for every node, its incident edges that stay inside its part;
3. from every overloaded part, the excess training nodes (if its training count is over) and
   then the excess nodes (non-training nodes first) with the fewest internal edges are chosen;
4. a second edge pass counts each chosen node's neighbours per part (a ``(movers, p)`` array);
5. movers, least-connected first, go to the part with room holding most of their neighbours
   (ties: the smaller part).

Memory: O(V) (the parts, a copy, the internal counts and then the movers' index: 4 bytes per
node each) plus ``movers x p`` counters; edges are read one chunk at a time. The procedure is
repeated (at most 4 rounds) in the rare case a training node found no part with room for both
its node and training count.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from shoal.data.format import GraphDir
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.utils.progress import progress

__all__ = ["balance_assignment", "capacity", "within_balance"]


def capacity(total: int, num_parts: int, balance: float) -> int:
    """Largest allowed part size: ``max(ceil(total/p), floor(balance * total / p))``."""
    if total <= 0:
        return 0
    return max(math.ceil(total / num_parts), math.floor(balance * total / num_parts + 1e-9))


def within_balance(
    node_part: np.ndarray, num_parts: int, balance: float, train_mask: np.ndarray | None = None
) -> bool:
    """Whether node and training-node counts per part are within :func:`capacity`."""
    sizes = np.bincount(node_part, minlength=num_parts)
    if sizes.max(initial=0) > capacity(node_part.shape[0], num_parts, balance):
        return False
    if train_mask is not None:
        t = np.bincount(node_part[train_mask], minlength=num_parts)
        if t.max(initial=0) > capacity(int(train_mask.sum()), num_parts, balance):
            return False
    return True


@numba.njit(cache=True)
def _internal_counts(edges, part, internal):
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u != v and part[u] == part[v]:
            internal[u] += 1
            internal[v] += 1


@numba.njit(cache=True)
def _mover_counts(edges, part, mover_idx, cnt):
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v:
            continue
        mu = mover_idx[u]
        if mu >= 0:
            cnt[mu, part[v]] += 1
        mv = mover_idx[v]
        if mv >= 0:
            cnt[mv, part[u]] += 1


@numba.njit(cache=True)
def _place(movers, is_train, part, cnt, sizes, tsizes, cap_n, cap_t):
    p = sizes.shape[0]
    moved = 0
    for m in range(movers.shape[0]):
        v = movers[m]
        src = part[v]
        tr = is_train[v]
        best = -1
        for k in range(p):
            if k == src or sizes[k] >= cap_n or (tr and tsizes[k] >= cap_t):
                continue
            if (
                best < 0
                or cnt[m, k] > cnt[m, best]
                or (cnt[m, k] == cnt[m, best] and sizes[k] < sizes[best])
            ):
                best = k
        if best < 0 and tr:
            # no part has room for both counts: take training room, nodes fixed next round
            for k in range(p):
                if k == src or tsizes[k] >= cap_t:
                    continue
                if best < 0 or sizes[k] < sizes[best]:
                    best = k
        if best < 0:
            continue
        part[v] = best
        sizes[src] -= 1
        sizes[best] += 1
        if tr:
            tsizes[src] -= 1
            tsizes[best] += 1
        moved += 1
    return moved


def _choose_movers(
    part: np.ndarray,
    is_train: np.ndarray,
    internal: np.ndarray,
    sizes: np.ndarray,
    tsizes: np.ndarray,
    cap_n: int,
    cap_t: int,
) -> np.ndarray:
    """Node ids to move, least-connected first."""
    chosen = []
    over = np.flatnonzero((sizes > cap_n) | (tsizes > cap_t))
    for k in over:
        members = np.flatnonzero(part == k)
        tr = is_train[members]
        e_t = max(0, int(tsizes[k]) - cap_t)
        e_n = max(0, int(sizes[k]) - cap_n)
        train_m = members[tr]
        other_m = members[~tr]
        train_m = train_m[np.argsort(internal[train_m], kind="stable")]
        other_m = other_m[np.argsort(internal[other_m], kind="stable")]
        take_t = train_m[:e_t]
        rest = max(0, e_n - e_t)
        take_o = other_m[:rest]
        extra = train_m[e_t : e_t + max(0, rest - take_o.shape[0])]
        chosen.extend([take_t, take_o, extra])
    if not chosen:
        return np.empty(0, dtype=np.int64)
    movers = np.concatenate(chosen).astype(np.int64)
    return movers[np.argsort(internal[movers], kind="stable")]


def balance_assignment(
    graph: GraphDir,
    node_part: np.ndarray,
    num_parts: int,
    *,
    balance: float = 1.10,
    train_mask: np.ndarray | None = None,
    chunk_edges: int = DEFAULT_CHUNK_EDGES,
    copy: bool = True,
) -> tuple[np.ndarray, int]:
    """Move least-connected nodes out of overloaded parts (see the module docstring).

    Args:
        graph: the graph (read by edge passes only).
        node_part: int32 (N,) owner parts; not modified unless ``copy`` is false.
        num_parts: ``p``.
        balance: bound on max/mean nodes and training nodes per part (default 1.10).
        train_mask: bool (N,) training nodes, or None.
        chunk_edges: edges per streamed chunk (default 2**20).
        copy: work on a copy of ``node_part`` (default true); false moves the nodes in
            ``node_part`` itself (an int32 array), saving 4 bytes per node.

    Returns:
        ``(new_node_part, moved)``; ``new_node_part`` is ``node_part`` itself when nothing
        had to move or ``copy`` is false.
    """
    n = graph.num_nodes
    part = np.asarray(node_part, dtype=np.int32)
    is_train = (
        np.zeros(n, dtype=np.bool_) if train_mask is None else np.asarray(train_mask, dtype=bool)
    )
    cap_n = capacity(n, num_parts, balance)
    cap_t = capacity(int(is_train.sum()), num_parts, balance)
    moved_total = 0
    copied = not copy and part.flags.writeable
    for _ in range(4):
        sizes = np.bincount(part, minlength=num_parts).astype(np.int64)
        tsizes = np.bincount(part[is_train], minlength=num_parts).astype(np.int64)
        if sizes.max(initial=0) <= cap_n and tsizes.max(initial=0) <= cap_t:
            break
        if not copied:
            part = part.copy()
            copied = True
        # counts of one node's edges: int32 unless a node could have 2**31 of them
        internal = np.zeros(n, dtype=np.int32 if 2 * graph.num_edges < 2**31 else np.int64)
        stream = graph.edge_stream(chunk_edges)
        for chunk in progress(stream, total=len(stream), desc="balance pass 1", unit="chunk"):
            _internal_counts(chunk, part, internal)
        movers = _choose_movers(part, is_train, internal, sizes, tsizes, cap_n, cap_t)
        del internal
        if movers.size == 0:
            break
        mover_idx = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)
        mover_idx[movers] = np.arange(movers.size)
        cnt = np.zeros((movers.size, num_parts), dtype=np.int32)
        for chunk in progress(stream, total=len(stream), desc="balance pass 2", unit="chunk"):
            _mover_counts(chunk, part, mover_idx, cnt)
        del mover_idx
        moved = _place(movers, is_train, part, cnt, sizes, tsizes, cap_n, cap_t)
        moved_total += int(moved)
        if moved == 0:
            break
    return part, moved_total
