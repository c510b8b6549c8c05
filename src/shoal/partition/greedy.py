"""Greedy (PowerGraph) streaming vertex-cut partitioning.

Gonzalez, Low, Gu, Bickson, Guestrin, "PowerGraph: Distributed Graph-Parallel Computation on
Natural Graphs", OSDI 2012, Section 5.2 ("Greedy Vertex-Cuts"). With ``A(x)`` the set of parts
already holding an edge of ``x``, each streamed edge ``(u, v)`` goes to

1. a part of ``A(u) & A(v)`` if the intersection is not empty;
2. else, if both sets are non-empty, a part of the set of the endpoint with the most
   unassigned edges left;
3. else, if exactly one endpoint has been seen, a part of its set;
4. else the least-loaded part;

and within a case to the least-loaded candidate (ties to the lowest index). "Unassigned edges"
needs the degrees, so a degree pass comes first (the coordinated greedy of the paper; we run it
on one machine, so there is no oblivious/coordinated distinction).

Memory: ``N * p`` bytes of replica flags, O(V) remaining degrees, one chunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.partition._streaming import (
    _assign_edges,
    _check_inputs,
    _degrees,
    _vertex_cut,
)
from shoal.partition.base import Assignment, PartitionConfig, Partitioner

__all__ = ["Greedy"]


@njit(cache=True)
def _greedy_chunk(src, dst, rem, rep, load, out):
    p = load.shape[0]
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        bu = u * p
        bv = v * p
        hu = False
        hv = False
        inter = False
        for q in range(p):
            a = rep[bu + q] != 0
            b = rep[bv + q] != 0
            hu = hu or a
            hv = hv or b
            if a and b:
                inter = True
        # mode 0: any part; 1: A(u)&A(v); 2: A(u); 3: A(v)
        if inter:
            mode = 1
        elif hu and hv:
            mode = 2 if rem[u] >= rem[v] else 3
        elif hu:
            mode = 2
        elif hv:
            mode = 3
        else:
            mode = 0
        best = -1
        for q in range(p):
            if mode == 1:
                ok = rep[bu + q] != 0 and rep[bv + q] != 0
            elif mode == 2:
                ok = rep[bu + q] != 0
            elif mode == 3:
                ok = rep[bv + q] != 0
            else:
                ok = True
            if ok and (best < 0 or load[q] < load[best]):
                best = q
        out[i] = best
        load[best] += 1
        rep[bu + best] = 1
        rep[bv + best] = 1
        rem[u] -= 1
        if v != u:
            rem[v] -= 1


@dataclass(kw_only=True)
class GreedyConfig(PartitionConfig):
    """Options of :class:`Greedy`: only those of :class:`PartitionConfig` (the pass is
    deterministic; ``seed`` is unused)."""


class Greedy(Partitioner):
    """PowerGraph's greedy vertex-cut (Gonzalez et al., OSDI 2012, Section 5.2): a degree
    pass, then one streaming pass applying the four placement cases."""

    name = "greedy"
    Config = GreedyConfig
    vertex_cut = True

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        cfg = self.config
        p = cfg.num_parts
        _check_inputs(graph, p, train_mask)
        t0 = time.perf_counter()
        rem = _degrees(graph, cfg.chunk_edges)
        t1 = time.perf_counter()
        rep = np.zeros(graph.num_nodes * p, dtype=np.uint8)
        load = np.zeros(p, dtype=np.int64)
        edge_part = _assign_edges(
            graph,
            p,
            cfg.chunk_edges,
            "greedy",
            lambda s, d, o, rem=rem, rep=rep: _greedy_chunk(s, d, rem, rep, load, o),
            scratch_dir=cfg.scratch_dir,
        )
        del rep, rem
        t2 = time.perf_counter()
        return _vertex_cut(self, graph, edge_part, {"degrees": t1 - t0, "greedy": t2 - t1})
