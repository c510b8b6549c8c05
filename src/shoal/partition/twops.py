"""2PS-L: two-phase streaming vertex-cut partitioning in linear time.

Mayer, Orujzade, Jacobsen, "Out-of-Core Edge Partitioning at Linear Run-Time", ICDE 2022
(2PS-L). Four streaming passes over the edge file, O(V) state:

1. **Degrees** (one pass).
2. **Streaming clustering** (Phase 1; the streaming clustering of Hollocou et al. 2017 with
   full degrees): every node starts in its own cluster with volume ``d(v)``; for each edge
   ``(u, v)`` whose two clusters both have volume ``<= max_vol``, the endpoint in the
   lower-volume cluster moves to the other cluster (volumes updated by its degree).
   ``max_vol = total volume / p`` (one part's share).
3. **Cluster -> part mapping**: clusters sorted by volume, largest first, each to the part with
   the smallest total volume so far (greedy makespan).
4. **Partitioning** (Phase 2), two passes: *pre-partitioning* puts every edge whose endpoints'
   clusters map to the same part into that part (while it has room); then the *linear scoring*
   pass gives each remaining edge one of only two candidate parts, ``m(c(u))`` and
   ``m(c(v))``, by the HDRF-like score of the paper (Section IV-C)::

       s(p) = g(u, p) + g(v, p) + sc(u, p) + sc(v, p)
       g(x, p)  = 1 + (1 - d(x) / (d(u) + d(v)))       if x already has a replica on p
       sc(x, p) = vol(c(x)) / (vol(c(u)) + vol(c(v)))  if also m(c(x)) = p

   with a hard capacity of ``ceil(alpha * |E| / p)`` edges per part: a full candidate is
   skipped; when both are full the edge goes to ``hash(higher-degree endpoint) mod p``, or to
   the least-loaded part if that one is full too. Ties go to the lower part index.

Scoring two candidates instead of ``p`` makes the pass O(|E|) whatever ``p``; the whole run is
O(|E| + |V| log |V|). Memory: O(V) (degrees, cluster ids and volumes, replica flags ``N * p``
bytes) plus one chunk; the pre-partition result is kept in the temporary edge -> part file and
read back chunk by chunk by the scoring pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition._streaming import (
    _check_inputs,
    _degrees,
    _edge_pass,
    _EdgePartFile,
    _mix,
    _vertex_cut,
)
from shoal.partition.base import Assignment, PartitionConfig, Partitioner

__all__ = ["TwoPSL"]


@njit(cache=True)
def _cluster_chunk(src, dst, deg, cluster, vol, max_vol):
    """Phase 1 (streaming clustering) over one chunk."""
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        if u == v:
            continue
        cu = cluster[u]
        cv = cluster[v]
        if cu == cv:
            continue
        vu = vol[cu]
        vv = vol[cv]
        if vu <= max_vol and vv <= max_vol:
            if vu <= vv:
                vol[cu] -= deg[u]
                vol[cv] += deg[u]
                cluster[u] = cv
            else:
                vol[cv] -= deg[v]
                vol[cu] += deg[v]
                cluster[v] = cu


@njit(cache=True)
def _map_clusters(order, vol, p, cmap):
    """Largest cluster first to the part with the smallest volume (ties: lowest index)."""
    pvol = np.zeros(p, dtype=np.int64)
    for j in range(order.shape[0]):
        c = order[j]
        if vol[c] == 0:
            break
        best = 0
        for q in range(1, p):
            if pvol[q] < pvol[best]:
                best = q
        cmap[c] = best
        pvol[best] += vol[c]


@njit(cache=True)
def _prepartition_chunk(src, dst, cluster, cmap, rep, load, cap, out):
    p = load.shape[0]
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        pu = cmap[cluster[u]]
        if pu == cmap[cluster[v]] and load[pu] < cap:
            out[i] = pu
            load[pu] += 1
            rep[u * p + pu] = 1
            rep[v * p + pu] = 1
        else:
            out[i] = -1


@njit(cache=True)
def _score_chunk(src, dst, deg, cluster, vol, cmap, rep, load, cap, seed, out):
    p = load.shape[0]
    for i in range(src.shape[0]):
        if out[i] >= 0:
            continue
        u = src[i]
        v = dst[i]
        cu = cluster[u]
        cv = cluster[v]
        pu = cmap[cu]
        pv = cmap[cv]
        best = -1
        if load[pu] < cap or load[pv] < cap:
            du = float(deg[u])
            dv = float(deg[v])
            dsum = du + dv
            vsum = float(vol[cu] + vol[cv])
            best_s = -1.0
            c0 = pu if pu <= pv else pv
            c1 = pv if pu <= pv else pu
            for k in range(2):
                q = c0 if k == 0 else c1
                if k == 1 and c1 == c0:
                    break
                if load[q] >= cap:
                    continue
                s = 0.0
                if rep[u * p + q]:
                    s += 2.0 - du / dsum
                    if pu == q and vsum > 0:
                        s += vol[cu] / vsum
                if rep[v * p + q]:
                    s += 2.0 - dv / dsum
                    if pv == q and vsum > 0:
                        s += vol[cv] / vsum
                if s > best_s:
                    best_s = s
                    best = q
        else:
            w = u if deg[u] > deg[v] else v
            best = np.int64(_mix(np.uint64(w) ^ np.uint64(seed)) % np.uint64(p))
            if load[best] >= cap:
                best = 0
                for q in range(1, p):
                    if load[q] < load[best]:
                        best = q
        out[i] = best
        load[best] += 1
        rep[u * p + best] = 1
        rep[v * p + best] = 1


@dataclass(kw_only=True)
class TwoPSLConfig(PartitionConfig):
    """Options of :class:`TwoPSL` (plus those of :class:`PartitionConfig`).

    Args:
        alpha: edge capacity factor: each part holds at most ``ceil(alpha * |E| / p)`` edges
            (default 1.05).
        max_volume_factor: cluster volume bound of the clustering pass as a multiple of
            ``total volume / p`` (default 1.0).
    """

    alpha: float = 1.05
    max_volume_factor: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.alpha >= 1.0:
            raise ShoalInputError(f"alpha must be >= 1.0, got {self.alpha}")
        if not self.max_volume_factor > 0:
            raise ShoalInputError(f"max_volume_factor must be > 0, got {self.max_volume_factor}")
        if self.seed < 0:
            raise ShoalInputError(f"seed must be >= 0, got {self.seed}")


class TwoPSL(Partitioner):
    """2PS-L (Mayer et al., ICDE 2022): streaming clustering, cluster -> part mapping,
    pre-partitioning, then the two-candidate linear scoring pass (module docstring)."""

    name = "2ps-l"
    Config = TwoPSLConfig
    vertex_cut = True

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        cfg = self.config
        p = cfg.num_parts
        _check_inputs(graph, p, train_mask)
        n, m = graph.num_nodes, graph.num_edges
        secs: dict[str, float] = {}
        t = time.perf_counter()
        deg = _degrees(graph, cfg.chunk_edges)
        secs["degrees"] = time.perf_counter() - t

        t = time.perf_counter()
        cluster = np.arange(n, dtype=np.int64)
        vol = deg.copy()
        max_vol = int(np.ceil(cfg.max_volume_factor * vol.sum() / p))
        for _, src, dst in _edge_pass(graph, cfg.chunk_edges, "2ps-l clustering"):
            _cluster_chunk(src, dst, deg, cluster, vol, max_vol)
        secs["clustering"] = time.perf_counter() - t

        t = time.perf_counter()
        order = np.argsort(-vol, kind="stable")
        cmap = np.zeros(n, dtype=np.int64)
        _map_clusters(order, vol, p, cmap)
        del order
        secs["mapping"] = time.perf_counter() - t

        cap = int(np.ceil(cfg.alpha * m / p))
        rep = np.zeros(n * p, dtype=np.uint8)
        load = np.zeros(p, dtype=np.int64)
        chunk = min(cfg.chunk_edges, max(m, 1))
        first = _EdgePartFile(m, p, scratch_dir=cfg.scratch_dir, beside=graph.path)
        second = None
        try:
            t = time.perf_counter()
            out = np.empty(chunk, dtype=first.dtype)
            for _, src, dst in _edge_pass(graph, cfg.chunk_edges, "2ps-l pre-partitioning"):
                o = out[: src.shape[0]]
                _prepartition_chunk(src, dst, cluster, cmap, rep, load, cap, o)
                first.write(o)
            secs["prepartition"] = time.perf_counter() - t

            t = time.perf_counter()
            second = _EdgePartFile(m, p, scratch_dir=cfg.scratch_dir, beside=graph.path)
            for start, src, dst in _edge_pass(graph, cfg.chunk_edges, "2ps-l scoring"):
                o = first.read(start, out[: src.shape[0]])
                _score_chunk(src, dst, deg, cluster, vol, cmap, rep, load, cap, cfg.seed, o)
                second.write(o)
            first.discard()
            edge_part = second.finish()
            secs["scoring"] = time.perf_counter() - t
        except BaseException:
            first.discard()
            if second is not None:
                second.discard()
            raise
        del rep, cluster, cmap, vol, deg
        return _vertex_cut(self, graph, edge_part, secs)
