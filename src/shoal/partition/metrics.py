"""Partition quality metrics, computed by streaming the edge file.

- ``replication_factor``: after full-neighbourhood expansion (every part holds its core nodes
  and, as halo, every in-neighbour of a core node owned elsewhere), ``sum_i |core_i U halo_i|
  / |V|`` = ``1 + (distinct (u, part(v)) pairs over edges u->v with part(u) != part(v)) / |V|``.
- ``vertex_cut_rf`` (edge partitioners only): replication factor of the raw edge assignment,
  ``sum_i |V(E_i)| / |V|`` where ``V(E_i)`` are the endpoints of the edges in part ``i``; a node
  without edges counts once (it lives in its owner part).
- ``edge_cut``: fraction of stored edges whose endpoints have different owners.
- ``node_balance`` / ``train_balance``: max/mean nodes / training nodes per part.
- ``edge_balance``: max/mean in-edges of core nodes per part (the edges each part stores).
- ``type_balance`` (typed graphs): max/mean nodes per part of each node type.

Distinct (node, part) pairs are counted with a bitmap of ``N x g`` bits for a group of ``g``
parts (all ``p`` in one pass unless ``N·p/8`` exceeds ``bitmap_bytes``; then one pass per
group), so memory is O(V) bits per part, never O(E).
"""

from __future__ import annotations

import numba
import numpy as np

from shoal.data.format import GraphDir
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.utils.io import copy_rows
from shoal.utils.progress import progress

__all__ = ["partition_metrics"]

DEFAULT_BITMAP_BYTES = 256 << 20


@numba.njit(cache=True)
def _cut_pass(edges, part, in_edges):
    cut = 0
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        pv = part[v]
        in_edges[pv] += 1
        if part[u] != pv:
            cut += 1
    return cut


@numba.njit(cache=True)
def _set_bit(bits, idx):
    byte = idx >> 3
    mask = np.uint8(1) << np.uint8(idx & 7)
    if bits[byte] & mask:
        return 0
    bits[byte] |= mask
    return 1


@numba.njit(cache=True)
def _halo_pass(edges, part, k0, g, bits):
    new = 0
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        pv = part[v]
        if pv == part[u] or pv < k0 or pv >= k0 + g:
            continue
        new += _set_bit(bits, np.int64(u) * g + (pv - k0))
    return new


@numba.njit(cache=True)
def _vc_pass(edges, ep, k0, g, bits, touched):
    new = 0
    for i in range(edges.shape[0]):
        k = np.int64(ep[i])
        u = edges[i, 0]
        v = edges[i, 1]
        touched[u] = True
        touched[v] = True
        if k < k0 or k >= k0 + g:
            continue
        new += _set_bit(bits, np.int64(u) * g + (k - k0))
        if v != u:
            new += _set_bit(bits, np.int64(v) * g + (k - k0))
    return new


def _groups(n: int, p: int, bitmap_bytes: int) -> int:
    per_part = max(1, (n + 7) // 8)
    return max(1, min(p, bitmap_bytes // per_part))


def _max_over_mean(counts: np.ndarray, total: int, p: int) -> float:
    if total <= 0:
        return 1.0
    return float(counts.max()) / (total / p)


def _type_balance(graph: GraphDir, part: np.ndarray, p: int) -> tuple[dict, dict]:
    """Per node type of a typed graph: max/mean nodes per part, and the counts (types are
    id ranges: one ``bincount`` of a slice each)."""
    bal, sizes = {}, {}
    for t in graph.schema.node_types:
        c = np.bincount(part[t.offset : t.offset + t.count], minlength=p)
        bal[t.name] = _max_over_mean(c, int(t.count), p)
        sizes[t.name] = c.tolist()
    return bal, sizes


def partition_metrics(
    graph: GraphDir,
    node_part: np.ndarray,
    num_parts: int,
    *,
    edge_part: np.ndarray | None = None,
    train_mask: np.ndarray | None = None,
    chunk_edges: int = DEFAULT_CHUNK_EDGES,
    bitmap_bytes: int = DEFAULT_BITMAP_BYTES,
) -> dict[str, float | int | list[int]]:
    """Quality metrics of a node assignment (see the module docstring).

    Args:
        graph: the partitioned graph.
        node_part: int32 (N,) owner part of every node.
        num_parts: ``p``.
        edge_part: (E,) part of every edge for vertex-cut results (adds ``vertex_cut_rf``).
        train_mask: bool (N,) training nodes (``train_balance`` is 1.0 without it).
        chunk_edges: edges per streamed chunk (default 2**20).
        bitmap_bytes: memory for the distinct-pair bitmap per pass (default 256 MiB).

    Returns:
        dict with ``replication_factor``, ``edge_cut``, ``cut_edges``, ``node_balance``,
        ``edge_balance``, ``train_balance``, ``part_sizes``, ``part_train``,
        ``part_in_edges``, with ``edge_part`` ``vertex_cut_rf``, and for a typed graph
        ``type_balance`` (max/mean nodes per part of each node type) and
        ``part_type_sizes``.
    """
    n, e, p = graph.num_nodes, graph.num_edges, num_parts
    part = np.ascontiguousarray(node_part, dtype=np.int32)
    stream = graph.edge_stream(chunk_edges)
    in_edges = np.zeros(p, dtype=np.int64)
    cut = 0
    for chunk in progress(stream, total=len(stream), desc="metrics: cut", unit="chunk"):
        cut += int(_cut_pass(chunk, part, in_edges))
    g = _groups(n, p, bitmap_bytes)
    halo = 0
    for k0 in range(0, p, g):
        gg = min(g, p - k0)
        bits = np.zeros((n * gg + 7) // 8, dtype=np.uint8)
        for chunk in progress(stream, total=len(stream), desc="metrics: halo", unit="chunk"):
            halo += int(_halo_pass(chunk, part, k0, gg, bits))
        del bits
    sizes = np.bincount(part, minlength=p)
    if train_mask is not None:
        tm = np.asarray(train_mask, dtype=bool)
        tsizes = np.bincount(part[tm], minlength=p)
        t_total = int(tm.sum())
    else:
        tsizes = np.zeros(p, dtype=np.int64)
        t_total = 0
    out: dict[str, float | int | list[int]] = {
        "replication_factor": (n + halo) / n if n else 1.0,
        "edge_cut": cut / e if e else 0.0,
        "cut_edges": cut,
        "node_balance": _max_over_mean(sizes, n, p),
        "edge_balance": _max_over_mean(in_edges, e, p),
        "train_balance": _max_over_mean(tsizes, t_total, p),
        "part_sizes": sizes.tolist(),
        "part_train": tsizes.tolist(),
        "part_in_edges": in_edges.tolist(),
    }
    if graph.schema is not None:  # a typed graph: the balance of each node type
        out["type_balance"], out["part_type_sizes"] = _type_balance(graph, part, p)
    if edge_part is not None:
        touched = np.zeros(n, dtype=np.bool_)
        present = 0
        for k0 in range(0, p, g):
            gg = min(g, p - k0)
            bits = np.zeros((n * gg + 7) // 8, dtype=np.uint8)
            for start, chunk in stream.chunks_with_offset():
                ep = copy_rows(edge_part, start, start + chunk.shape[0])
                present += int(_vc_pass(chunk, ep, k0, gg, bits, touched))
            del bits
        isolated = n - int(touched.sum())
        out["vertex_cut_rf"] = (present + isolated) / n if n else 1.0
    return out
