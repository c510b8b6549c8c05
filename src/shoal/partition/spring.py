"""SPRING: streaming clustering, cluster merging and greedy cluster placement (SDT-GNN).

Implements Algorithm 1 of the SDT-GNN paper (SPRING, the partitioner of "SDT-GNN: streaming
distributed training of GNNs"), with the facts recorded in DESIGN.md:

1. *Degree pass* (Alg. 1, first loop): one streaming pass counting every node's degree.
2. *Streaming clustering* (Alg. 1, second loop; the volume-bounded clustering of Hollocou
   et al. also used by 2PS): every node starts in its own cluster with volume = its degree.
   For an edge ``(u, v)`` in different clusters whose volumes are both ``<= tau_vol``, the
   endpoint in the lower-volume cluster moves into the other one (ties: ``u`` moves), carrying
   its degree. ``tau_vol`` defaults to ``0.1 * |E| / p`` as in the authors' code. The same
   pass records every node's *richest neighbour* (its highest-degree neighbour; the first one
   seen on ties).
3. *Cluster merging*: clusters are visited smallest-first (node count; ties by cluster id);
   cluster ``Ci`` is merged into the cluster ``Cj`` currently holding the richest neighbour of
   its representative node while ``|Ci| + |Cj| <= beta * |V| / p`` (``beta = 1.05``). A
   union-find keeps merged clusters. The representative (``representative``):

   - ``"degree"`` (shoal's default): the member of highest degree (ties to the lowest id);
   - ``"richest"`` (the paper, Alg. 1 lines 19-21): the member whose richest neighbour has
     the highest degree (ties to the lowest id; the paper breaks them randomly), and after a
     merge the merged cluster keeps the representative of the two with the richer
     neighbour (the paper's "update the representative node of the merged cluster").

   Not reproduced: the paper re-ranks a merged cluster by its new size; shoal visits the
   clusters in the order of their sizes before merging.
4. *Placement*: clusters largest-first, each to the currently least-loaded part (greedy
   makespan; ties to the lowest part index).

Complexity: two edge passes, O(|E|) numba work, one O(|V| log |V|) sort per step 3 and 4;
memory O(|V|): the clustering pass holds per node its degree, cluster, richest neighbour and
that neighbour's degree (one row of four) plus its cluster's volume, 20 bytes with 32-bit
integers (used while ids, degrees and volumes fit; 40 bytes otherwise); the merge holds
cluster, degree, richest neighbour, size, representative and union-find parent (int32) and a
sort of the non-empty clusters by size.
The result does not depend on the chunk size: edges are processed in file order either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.utils.progress import progress

__all__ = ["REPRESENTATIVES", "Spring", "SpringConfig", "merge_clusters", "place_clusters"]

#: SPRING's representative rules: shoal's default first, then the paper's.
REPRESENTATIVES = ("degree", "richest")


@dataclass(kw_only=True)
class SpringConfig(PartitionConfig):
    """Options of :class:`Spring` (plus the shared ones of :class:`PartitionConfig`).

    Args:
        tau_factor: volume threshold ``tau_vol = tau_factor * |E| / p`` (default 0.1, the
            SDT-GNN code's value).
        beta: merge bound ``|Ci| + |Cj| <= beta * |V| / p`` (default 1.05).
        representative: a cluster's representative in the merge step: ``"degree"`` (its
            highest-degree member, default) or ``"richest"`` (the paper's: the member whose
            richest neighbour has the highest degree); see the module docstring.
    """

    tau_factor: float = 0.1
    beta: float = 1.05
    representative: str = "degree"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tau_factor <= 0:
            raise ShoalInputError(f"tau_factor must be > 0, got {self.tau_factor}")
        if self.beta < 1.0:
            raise ShoalInputError(f"beta must be >= 1.0, got {self.beta}")
        if self.representative not in REPRESENTATIVES:
            raise ShoalInputError(
                f"representative must be one of {', '.join(REPRESENTATIVES)}, got "
                f"{self.representative!r}",
                fix="--option representative=degree (shoal) or representative=richest (paper)",
            )


@numba.njit(cache=True)
def _degree_chunk(edges, deg):
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        deg[u] += 1
        if v != u:
            deg[v] += 1


@numba.njit(cache=True)
def _cluster_chunk(edges, state, vol, tau):
    # state[x] = (degree, cluster, richest neighbour, its degree): one cache line per node,
    # so each endpoint costs one random memory access instead of four
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v:
            continue
        du = state[u, 0]
        dv = state[v, 0]
        # richest-neighbour tracking
        if dv > state[u, 3]:
            state[u, 2] = v
            state[u, 3] = dv
        if du > state[v, 3]:
            state[v, 2] = u
            state[v, 3] = du
        cu = state[u, 1]
        cv = state[v, 1]
        if cu == cv:
            continue
        vu = vol[cu]
        vv = vol[cv]
        if vu <= tau and vv <= tau:
            if vu <= vv:
                vol[cu] = vu - du
                vol[cv] = vv + du
                state[u, 1] = cv
            else:
                vol[cv] = vv - dv
                vol[cu] = vu + dv
                state[v, 1] = cu


@numba.njit(cache=True)
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@numba.njit(cache=True)
def _representatives(cluster, deg, rep):
    for v in range(cluster.shape[0]):
        c = cluster[v]
        r = rep[c]
        if r < 0 or deg[v] > deg[r]:
            rep[c] = v


@numba.njit(cache=True, inline="always")
def _rich_deg(v, rich, deg):
    """Degree of ``v``'s richest neighbour (-1: ``v`` is none or has no neighbour)."""
    if v < 0 or rich[v] < 0:
        return -1
    return deg[rich[v]]


@numba.njit(cache=True)
def _representatives_richest(cluster, deg, rich, rep):
    """The paper's rule (Alg. 1 lines 19-21): the member whose richest neighbour is richest."""
    for v in range(cluster.shape[0]):
        c = cluster[v]
        r = rep[c]
        if r < 0 or _rich_deg(r, rich, deg) < _rich_deg(v, rich, deg):
            rep[c] = v


@numba.njit(cache=True)
def _merge(order, size, rep, rich, cluster, parent, bound, deg, update_rep):
    merges = 0
    for t in range(order.shape[0]):
        i = order[t]
        if size[i] == 0 or parent[i] != i:
            continue
        r = rep[i]
        if r < 0:
            continue
        nb = rich[r]
        if nb < 0:
            continue
        j = _find(parent, cluster[nb])
        if j == i:
            continue
        if size[i] + size[j] <= bound:
            parent[i] = j
            size[j] += size[i]
            size[i] = 0
            merges += 1
            if update_rep and _rich_deg(r, rich, deg) > _rich_deg(rep[j], rich, deg):
                rep[j] = r
    return merges


@numba.njit(cache=True)
def _place(order, size, loads, cpart):
    p = loads.shape[0]
    for t in range(order.shape[0]):
        c = order[t]
        b = 0
        for k in range(1, p):
            if loads[k] < loads[b]:
                b = k
        cpart[c] = b
        loads[b] += size[c]


def _ids(n: int) -> np.dtype:
    """int32 node/cluster ids unless ``n`` needs 64 bits."""
    return np.dtype(np.int32 if n < np.iinfo(np.int32).max else np.int64)


def _order(size: np.ndarray, ascending: bool) -> np.ndarray:
    """Ids of the non-empty clusters ordered by size (stable: ties by id), as ``_ids``."""
    nonempty = np.flatnonzero(size).astype(_ids(size.shape[0]))
    key = size[nonempty]
    idx = np.argsort(key if ascending else -key, kind="stable")
    del key
    out = nonempty[idx]
    return out


def merge_clusters(
    cluster: np.ndarray,
    deg: np.ndarray,
    rich: np.ndarray,
    bound: float,
    representative: str = "degree",
) -> tuple[np.ndarray, int]:
    """SPRING's merge step (step 3 of the module docstring).

    Args:
        cluster: int (N,) cluster id of every node (ids are node ids).
        deg: int (N,) degrees.
        rich: int (N,) richest neighbour of every node (-1: none).
        bound: the largest allowed merged cluster size ``beta * |V| / p``.
        representative: ``"degree"`` or ``"richest"`` (:class:`SpringConfig`).

    Returns:
        ``(final_cluster, merges)``: every node's cluster after merging (a union-find root)
        and the number of merges done.
    """
    n = cluster.shape[0]
    ids = _ids(n)
    size = _cluster_sizes(cluster, n)
    rep = np.full(n, -1, dtype=ids)
    paper = representative == "richest"
    if paper:
        _representatives_richest(cluster, deg, rich, rep)
    else:
        _representatives(cluster, deg, rep)
    order = _order(size, ascending=True)
    parent = np.arange(n, dtype=ids)
    merges = _merge(order, size, rep, rich, cluster, parent, float(bound), deg, paper)
    del rep, size, order
    return _roots(parent, cluster), int(merges)


@numba.njit(cache=True)
def _count(cluster, size):
    for v in range(cluster.shape[0]):
        size[cluster[v]] += 1


def _cluster_sizes(cluster: np.ndarray, n: int) -> np.ndarray:
    size = np.zeros(n, dtype=_ids(n))
    _count(cluster, size)
    return size


@numba.njit(cache=True)
def _roots_kernel(parent, cluster, out):
    for v in range(cluster.shape[0]):
        out[v] = _find(parent, cluster[v])


def _roots(parent: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    out = np.empty_like(cluster)
    _roots_kernel(parent, cluster, out)
    return out


def place_clusters(final: np.ndarray, num_parts: int) -> np.ndarray:
    """SPRING's placement (step 4): clusters largest-first to the least-loaded part."""
    n = final.shape[0]
    size = _cluster_sizes(final, n)
    order = _order(size, ascending=False)
    cpart = np.full(n, -1, dtype=np.int32)
    _place(order, size, np.zeros(num_parts, dtype=np.int64), cpart)
    del order, size
    return cpart[final]


class Spring(Partitioner):
    """SPRING (SDT-GNN Algorithm 1): see the module docstring."""

    name = "spring"
    Config = SpringConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        cfg: SpringConfig = self.config  # type: ignore[assignment]
        n, e, p = graph.num_nodes, graph.num_edges, cfg.num_parts
        stream = graph.edge_stream(cfg.chunk_edges)
        seconds: dict[str, float] = {}

        t0 = time.perf_counter()
        deg = np.zeros(n, dtype=np.int64)
        for chunk in progress(stream, total=len(stream), desc="spring degrees", unit="chunk"):
            _degree_chunk(chunk, deg)
        max_deg = int(deg.max(initial=0))
        tau = cfg.tau_factor * e / p
        # 32-bit state when degrees, cluster volumes (<= tau + one degree) and ids fit
        small = max(max_deg + tau, n) < np.iinfo(np.int32).max // 2
        dt = np.int32 if small else np.int64
        deg = deg.astype(dt)
        seconds["degrees"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        state = np.empty((n, 4), dtype=dt)  # degree, cluster, richest, its degree
        state[:, 0] = deg
        state[:, 1] = np.arange(n, dtype=dt)
        state[:, 2:] = -1
        vol = deg.copy()
        for chunk in progress(stream, total=len(stream), desc="spring clustering", unit="chunk"):
            _cluster_chunk(chunk, state, vol, tau)
        del vol
        cluster, rich = state[:, 1].copy(), state[:, 2].copy()
        del state
        seconds["clustering"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        final, merges = merge_clusters(cluster, deg, rich, cfg.beta * n / p, cfg.representative)
        del cluster, rich
        seconds["merge"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        node_part = place_clusters(final, p)
        seconds["placement"] = time.perf_counter() - t0
        return self.assignment(node_part, seconds, merges=merges)
