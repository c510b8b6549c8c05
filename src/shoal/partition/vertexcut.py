"""Owner parts for vertex-cut (edge) partitioners.

An edge partitioner assigns every *edge* to a part; a node then appears in every part holding
one of its edges. To turn such a result into a node partition (so it can become
full-neighbourhood parts: core nodes plus all their in-neighbours as halo, as SDT-GNN does for
edge partitioners), each node gets an *owner*: the part holding most of its incident edges
(both directions counted), ties to the lowest part index. Nodes without any edge go to the
least-loaded part (in node-id order), which keeps the result balanced.

The count structure is a ``(N, p)`` uint32 array (O(V·p), p is small); the edge file and the
edge->part array are read one chunk at a time.
"""

from __future__ import annotations

import numba
import numpy as np

from shoal.data.format import GraphDir
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.utils.io import copy_rows

__all__ = ["owners_from_edge_parts"]


@numba.njit(cache=True)
def _count_edge_parts(edges, ep, counts):
    p = counts.shape[1]
    for i in range(edges.shape[0]):
        k = ep[i]
        if k < 0 or k >= p:
            return i
        u = edges[i, 0]
        v = edges[i, 1]
        counts[u, k] += 1
        if v != u:
            counts[v, k] += 1
    return -1


@numba.njit(cache=True)
def _owners(counts, out):
    n, p = counts.shape
    sizes = np.zeros(p, dtype=np.int64)
    for v in range(n):
        best = -1
        best_c = 0
        for k in range(p):
            if counts[v, k] > best_c:
                best_c = counts[v, k]
                best = k
        out[v] = best
        if best >= 0:
            sizes[best] += 1
    # nodes without edges: least-loaded part, lowest index on ties
    for v in range(n):
        if out[v] < 0:
            b = 0
            for k in range(1, p):
                if sizes[k] < sizes[b]:
                    b = k
            out[v] = b
            sizes[b] += 1


def owners_from_edge_parts(
    graph: GraphDir,
    edge_part: np.ndarray,
    num_parts: int,
    chunk_edges: int = DEFAULT_CHUNK_EDGES,
) -> np.ndarray:
    """Owner part of every node from an edge->part assignment.

    Args:
        graph: the graph whose edge file ``edge_part`` is aligned with.
        edge_part: (E,) part of every edge, in edge-file order (array or memory map).
        num_parts: ``p``.
        chunk_edges: edges read per chunk (default 2**20).

    Returns:
        int32 (N,) array: the part holding most of the node's incident edges (self-loops
        counted once), ties to the lowest index; nodes without edges go to the least-loaded
        part.
    """
    n = graph.num_nodes
    if edge_part.shape[0] != graph.num_edges:
        raise ValueError(f"edge_part has {edge_part.shape[0]} entries, graph has {graph.num_edges}")
    counts = np.zeros((n, max(num_parts, 1)), dtype=np.uint32)
    for start, chunk in graph.edge_stream(chunk_edges).chunks_with_offset():
        ep = copy_rows(edge_part, start, start + chunk.shape[0])
        bad = _count_edge_parts(chunk, ep, counts)
        if bad >= 0:
            raise ValueError(
                f"edge {start + bad}: part {int(ep[bad])} is out of range [0, {num_parts})"
            )
    out = np.empty(n, dtype=np.int32)
    _owners(counts, out)
    return out
