"""Remote dependencies of full-graph training, and how each is handled (NeutronStar).

Q. Wang et al., "NeutronStar: Distributed GNN Training with Hybrid Dependency Management"
(SIGMOD 2022), Sections 2.2-3. Rank ``i`` owns ``V_i`` (its parts' core nodes, the paper's
masters) and their in-edges ``E_i``; layer ``l`` needs the layer ``l-1`` representations of its
remote in-neighbours ``D_i^l`` (the halo ``H``, the same set for every layer), each either
**communicated** (DepComm, Algorithm 3: fetched from its owner every epoch, its gradient sent
back) or **cached** (DepCache, Algorithm 2: computed again here from its subtree of remote
in-neighbours down to the input features, which are replicated once). A level is a layer's
input (level 0: the features); :class:`DepSets` lists each level's replicated and fetched nodes.

:func:`split_dependencies` is Algorithm 4: per layer, the cost of caching ``u`` is Eq. 1,
``t_r^l(u) = sum_{k=1}^{l-1} (|V^k(u)| T_v + |E^k(u)| T_e) d^(k)`` over the nodes and edges of
``u``'s subtree not local and not replicated already, that of communicating it Eq. 2,
``t_c^l(u) = T_c d^(l-1)``; dependencies are cached cheapest first while ``t_r < t_c``, and the
split stops (the rest communicated) when the replicated data would exceed the memory limit
``S`` (lines 14-15). With ``l = 1`` the subtree is empty (``t_r = 0``): the features of the halo
are replicated once, as the paper's rule implies, unless ``S`` forbids it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from shoal.utils.arrays import setdiff_sorted, unique_sorted

__all__ = [
    "Costs",
    "DepSets",
    "RemoteCSR",
    "build_sets",
    "fetch_closure",
    "fetch_in_edges",
    "split_dependencies",
]


@dataclass
class RemoteCSR:
    """In-neighbour lists (global ids) of some remote nodes: ``ids`` sorted, CSR over them."""

    ids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def empty(cls) -> RemoteCSR:
        e = np.empty(0, np.int64)
        return cls(e, np.zeros(1, np.int64), e)

    def neighbours(self, nodes: np.ndarray) -> np.ndarray:
        """The in-neighbours of ``nodes`` (all must be known), concatenated."""
        pos = np.searchsorted(self.ids, nodes)
        if len(nodes) and (
            pos.max(initial=0) >= len(self.ids) or not np.array_equal(self.ids[pos], nodes)
        ):
            raise KeyError("in-neighbours of a node that was not fetched")
        starts, ends = self.indptr[pos], self.indptr[pos + 1]
        if not len(nodes):
            return np.empty(0, np.int64)
        return np.concatenate(
            [self.indices[s:e] for s, e in zip(starts, ends, strict=True)]
            or [np.empty(0, np.int64)]
        )

    def degree(self, node: int) -> int:
        p = int(np.searchsorted(self.ids, node))
        return int(self.indptr[p + 1] - self.indptr[p])

    def merge(self, other: RemoteCSR) -> RemoteCSR:
        """Both sets of lists (``other``'s nodes must be new)."""
        if not len(other.ids):
            return self
        ids = np.concatenate([self.ids, other.ids])
        order = np.argsort(ids, kind="stable")
        lists = [self.indices[self.indptr[i] : self.indptr[i + 1]] for i in range(len(self.ids))]
        lists += [
            other.indices[other.indptr[i] : other.indptr[i + 1]] for i in range(len(other.ids))
        ]
        lists = [lists[i] for i in order]
        indptr = np.zeros(len(ids) + 1, np.int64)
        indptr[1:] = np.cumsum([len(x) for x in lists])
        idx = np.concatenate(lists) if lists else np.empty(0, np.int64)
        return RemoteCSR(ids[order], indptr, idx.astype(np.int64))


@dataclass
class Costs:
    """Per-dimension costs probed on this machine (seconds): ``t_v`` a vertex's NN operation,
    ``t_e`` an edge's aggregation, ``t_c`` a row's exchange (forward and gradient back)."""

    t_v: float
    t_e: float
    t_c: float


@dataclass
class DepSets:
    """Per level ``k = 0..L``: ``rep[k]`` the remote nodes computed (level 0: whose features are
    replicated: every cached dependency and, recursively, its remote in-neighbours one level
    down), ``rep[k+1]`` a prefix of ``rep[k]`` (a node computed at level ``k+1`` is needed at
    level ``k`` too: a layer's targets come first among its sources); ``com[k]`` the remote
    nodes fetched at level ``k`` (``k < L``), sorted. ``cached[l]``/``communicated[l]`` (``l =
    1..L``, index ``l - 1``): the split of the halo for layer ``l`` (``R_i^l``, ``C_i^l``)."""

    rep: list[np.ndarray]
    com: list[np.ndarray]
    cached: list[np.ndarray] = field(default_factory=list)
    communicated: list[np.ndarray] = field(default_factory=list)


def _subtree(u: int, top: int, local, structure: RemoteCSR, have: list[set]) -> list[set]:
    """The remote nodes to compute for ``h_u^(top)``: per level ``k = 0..top`` those not local
    and not in ``have[k]``; expansion stops at local or already computed nodes."""
    out: list[set] = [set() for _ in range(top + 1)]
    frontier = {u} - have[top]
    for k in range(top, -1, -1):
        out[k] = frontier
        if k == 0 or not frontier:
            continue
        nxt = set(frontier)  # the target's own row one level down
        for w in frontier:
            nxt.update(int(x) for x in structure.neighbours(np.array([w], np.int64)))
        frontier = {w for w in nxt if not local(w)} - have[k - 1]
    return out


def _size(levels: list[set], structure: RemoteCSR, dims: list[int]) -> int:
    """Bytes of replicated data: float32 rows per level (kept for backward: twice above 0)
    and 12 bytes per aggregated edge."""
    b = 0
    for k, nodes in enumerate(levels):
        b += len(nodes) * dims[k] * 4 * (2 if k else 1)
        if k:
            b += 12 * sum(structure.degree(w) + 1 for w in nodes)
    return b


def _cost(levels: list[set], structure: RemoteCSR, dims: list[int], costs: Costs) -> float:
    """Eq. 1 on the nodes of ``levels`` (levels 1 and above: level 0 is not computed)."""
    t = 0.0
    for k in range(1, len(levels)):
        edges = sum(structure.degree(w) for w in levels[k])
        t += (len(levels[k]) * costs.t_v + edges * costs.t_e) * dims[k]
    return t


def split_dependencies(
    halo: np.ndarray,
    structure: RemoteCSR,
    dims: list[int],
    costs: Costs,
    *,
    is_local,
    memory_limit: float,
    mode: str = "hybrid",
) -> tuple[list[np.ndarray], list[set], float]:
    """Algorithm 4: the cached set ``R^l`` of every layer ``l = 1..L`` (``len(dims) - 1``
    layers; ``dims[k]`` the width of level ``k``). ``mode``: "hybrid" (the greedy), "cache"
    (every dependency, memory permitting) or "comm" (none). ``structure`` must hold the
    in-neighbours of the remote nodes of every subtree (:func:`fetch_closure` depth
    ``L - 1``). Returns the cached sets, the replicated nodes per level (``V_rep``) and the
    bytes they take."""
    layers = len(dims) - 1
    have: list[set] = [set() for _ in range(layers + 1)]
    cached: list[list[int]] = [[] for _ in range(layers)]
    size = 0
    if mode == "comm":
        return [np.empty(0, np.int64) for _ in range(layers)], have, 0.0
    for layer in range(1, layers + 1):
        t_c = costs.t_c * dims[layer - 1]
        queue = []
        for u in halo.tolist():
            sub = _subtree(u, layer - 1, is_local, structure, have)
            heapq.heappush(queue, (_cost(sub, structure, dims, costs), u))
        while queue:
            _, u = heapq.heappop(queue)
            sub = _subtree(u, layer - 1, is_local, structure, have)  # line 10: re-measure
            if mode == "hybrid" and not _cost(sub, structure, dims, costs) < t_c:
                continue
            add = _size(sub, structure, dims)
            if size + add > memory_limit:  # lines 14-15
                return _finish(cached), have, float(size)
            size += add
            cached[layer - 1].append(u)
            for k, nodes in enumerate(sub):
                have[k].update(nodes)
    return _finish(cached), have, float(size)


def _finish(cached: list[list[int]]) -> list[np.ndarray]:
    return [np.array(sorted(c), dtype=np.int64) for c in cached]


def build_sets(halo: np.ndarray, cached: list[np.ndarray], have: list[set]) -> DepSets:
    """The level sets of a split: ``rep[k]`` = ``have[k]`` ordered so that ``rep[k+1]`` is a
    prefix of ``rep[k]``; ``com[k]`` = the halo nodes not computed at level ``k`` (layer
    ``k + 1`` needs every halo row at level ``k``)."""
    layers = len(cached)
    rep: list[np.ndarray] = [np.empty(0, np.int64) for _ in range(layers + 1)]
    for k in range(layers - 1, -1, -1):
        above = rep[k + 1]
        rest = np.array(sorted(have[k] - set(above.tolist())), dtype=np.int64)
        rep[k] = np.concatenate([above, rest]).astype(np.int64)
    com = [setdiff_sorted(halo, rep[k]).astype(np.int64) for k in range(layers)]
    communicated = [setdiff_sorted(halo, c).astype(np.int64) for c in cached]
    return DepSets(rep=rep, com=com, cached=cached, communicated=communicated)


def fetch_in_edges(
    ids: np.ndarray, owner_rank: np.ndarray, serve, world: int, stats=None
) -> RemoteCSR:
    """The in-neighbour lists of remote ``ids`` (sorted, unique; ``owner_rank`` of each),
    asked from their owners. ``serve(ids) -> (counts, flat global ids)`` answers for this
    rank's own nodes. A collective."""
    from shoal.distributed.comm import exchange

    order = np.argsort(owner_rank, kind="stable")
    counts = np.bincount(owner_rank, minlength=world).astype(np.int64)
    asked, asked_counts = exchange(ids[order].astype(np.int64), counts, stats)
    asked = asked.numpy()
    deg, flat = serve(asked)
    per_deg = np.array(
        [
            int(deg[o : o + c].sum())
            for o, c in zip(np.r_[0, np.cumsum(asked_counts)[:-1]], asked_counts, strict=True)
        ],
        dtype=np.int64,
    )
    got_deg, _ = exchange(np.asarray(deg, np.int64), asked_counts, stats)
    got_flat, _ = exchange(np.asarray(flat, np.int64), per_deg, stats)
    deg_sorted = got_deg.numpy()  # in the order sent: ids[order]
    indptr_sent = np.zeros(len(ids) + 1, np.int64)
    indptr_sent[1:] = np.cumsum(deg_sorted)
    flat_sent = got_flat.numpy()
    # back to the order of ``ids``
    inv = np.empty(len(ids), np.int64)
    inv[order] = np.arange(len(ids))
    lists = [flat_sent[indptr_sent[inv[i]] : indptr_sent[inv[i] + 1]] for i in range(len(ids))]
    indptr = np.zeros(len(ids) + 1, np.int64)
    indptr[1:] = np.cumsum([len(x) for x in lists])
    idx = np.concatenate(lists) if lists else np.empty(0, np.int64)
    return RemoteCSR(np.asarray(ids, np.int64), indptr, idx.astype(np.int64))


def fetch_closure(
    halo: np.ndarray, depth: int, *, owner_rank, local_mask, serve, world: int, stats=None
) -> RemoteCSR:
    """In-neighbour lists of the remote nodes within ``depth - 1`` hops below the halo
    (depth 0: none): what :func:`split_dependencies` needs for an ``L``-layer model with
    ``depth = L - 1``. ``depth`` rounds of :func:`fetch_in_edges`; every rank must call it
    with the same ``depth``."""
    known = RemoteCSR.empty()
    frontier = unique_sorted(np.asarray(halo, np.int64))
    for _ in range(depth):
        csr = fetch_in_edges(frontier, owner_rank(frontier), serve, world, stats)
        known = known.merge(csr)
        nxt = unique_sorted(csr.indices)
        frontier = setdiff_sorted(nxt[~local_mask(nxt)], known.ids)
    return known
