"""DBH: degree-based hashing vertex-cut partitioning.

Xie, Yan, Li, Zhang, "Distributed Power-law Graph Computing: Theoretical and Empirical
Analysis", NIPS 2014, Algorithm 1 (DBH): with ``d`` the node degrees (one streaming pass
first),

    for each edge (u, v):  e -> hash(u) mod p  if d(u) < d(v)  else  hash(v) mod p

i.e. every edge goes to the hash bucket of its lower-degree endpoint, so low-degree nodes keep
all their edges in one part and high-degree nodes are the ones cut. Ties ``d(u) == d(v)`` go to
the endpoint with the lower id, so an undirected edge stored in both directions lands in one
part. ``hash`` is the splitmix64 finaliser of ``node id xor seed``.

Memory: O(V) degrees plus one chunk; two passes (degrees, assignment).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition._streaming import (
    _assign_edges,
    _check_inputs,
    _degrees,
    _mix,
    _vertex_cut,
)
from shoal.partition.base import Assignment, PartitionConfig, Partitioner

__all__ = ["DBH"]


@njit(cache=True)
def _dbh_chunk(src, dst, deg, seed, p, out):
    pp = np.uint64(p)
    s = np.uint64(seed)
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        du = deg[u]
        dv = deg[v]
        if du < dv or (du == dv and u <= v):
            w = u
        else:
            w = v
        out[i] = _mix(np.uint64(w) ^ s) % pp


@dataclass(kw_only=True)
class DBHConfig(PartitionConfig):
    """Options of :class:`DBH`: only those of :class:`PartitionConfig`; ``seed`` (default 0)
    salts the node hash."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.seed < 0:
            raise ShoalInputError(f"seed must be >= 0, got {self.seed}")


class DBH(Partitioner):
    """Degree-based hashing (Xie et al., NIPS 2014, Algorithm 1): a degree pass, then each
    edge goes to the hash part of its lower-degree endpoint."""

    name = "dbh"
    Config = DBHConfig
    vertex_cut = True

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        cfg = self.config
        p = cfg.num_parts
        _check_inputs(graph, p, train_mask)
        t0 = time.perf_counter()
        deg = _degrees(graph, cfg.chunk_edges)
        t1 = time.perf_counter()
        seed = int(cfg.seed) & 0xFFFFFFFFFFFFFFFF
        edge_part = _assign_edges(
            graph,
            p,
            cfg.chunk_edges,
            "dbh",
            lambda s, d, o, deg=deg: _dbh_chunk(s, d, deg, seed, p, o),
            scratch_dir=cfg.scratch_dir,
        )
        del deg
        t2 = time.perf_counter()
        return _vertex_cut(self, graph, edge_part, {"degrees": t1 - t0, "dbh": t2 - t1})
