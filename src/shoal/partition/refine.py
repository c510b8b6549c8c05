"""Restreaming refinement: K more passes over the graph as a vertex stream.

In the spirit of restreaming LDG/Fennel (Nishimura & Ugander, "Restreaming graph partitioning:
simple versatile algorithms for advanced balancing", KDD 2013): the graph is read again as a
stream of vertices with their neighbour lists (the ``csr_out`` view, plus ``csr_in`` for a
directed graph, built once by the external sort of :mod:`shoal.data.extsort`), and every node
moves to the part holding most of its neighbours, if that part has room and strictly more of
its neighbours than its current part (or, with ``ties``, as many and at least 2 nodes fewer).
No move raises the number of cut edges, so every pass improves the partition monotonically; capacities are those of the balance post-pass
(:func:`shoal.partition.balance.capacity`) for nodes and for training nodes, so a balanced
input stays balanced.

Memory: O(V) (parts, sizes) plus one block of neighbour lists: the CSR indices are read with
positioned reads into a reused buffer, not through a memory map (mapped pages would count in
the resident set).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numba
import numpy as np

from shoal.data.format import CSR, GraphDir
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.partition.balance import capacity
from shoal.utils.io import copy_rows
from shoal.utils.progress import progress

__all__ = ["csr_row_blocks", "part_in_edges", "refine_assignment"]


#: Rows of ``indptr`` read at a time (8 MiB of int64): the offsets are never mapped whole.
INDPTR_ROWS = 1 << 20


def _indptr_windows(indptr: np.ndarray, rows: int = INDPTR_ROWS):
    """Yield ``(row_start, ptr)`` with ``ptr`` = int64 copy of ``indptr[row_start : row_start
    + k + 1]`` for consecutive ranges of ``k <= rows`` rows (mapped pages released)."""
    n = indptr.shape[0] - 1
    r = 0
    while r < n:
        r1 = min(n, r + rows)
        yield r, copy_rows(indptr, r, r1 + 1).astype(np.int64, copy=False)
        r = r1


def csr_row_blocks(
    csr: CSR, block_edges: int = DEFAULT_CHUNK_EDGES
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """Yield ``(row_start, row_stop, indptr_block, indices_block)`` over a CSR view.

    ``indptr_block`` is rebased to start at 0; ``indices_block`` (a reused buffer, valid until
    the next block) holds about ``block_edges`` entries (more when one row alone is longer).
    The indices file is read with positioned reads, never mapped; ``indptr`` is copied
    :data:`INDPTR_ROWS` rows at a time (its mapped pages released), so neither costs memory
    per node.
    """
    idx = csr.indices
    fname = getattr(idx, "filename", None)
    offset = int(getattr(idx, "offset", 0))
    dtype = idx.dtype
    total = int(csr.indptr[-1]) if csr.indptr.shape[0] > 1 else 0
    buf = np.empty(max(1, min(block_edges, total if total else 1)), dtype=dtype)
    f = open(fname, "rb", buffering=0) if fname else None  # noqa: SIM115
    try:
        for base, ip in _indptr_windows(csr.indptr):
            m = ip.shape[0] - 1
            r0 = 0
            while r0 < m:
                target = ip[r0] + block_edges
                r1 = int(np.searchsorted(ip, target, side="right")) - 1
                r1 = min(max(r1, r0 + 1), m)
                e0, e1 = int(ip[r0]), int(ip[r1])
                k = e1 - e0
                if k > buf.shape[0]:
                    buf = np.empty(k, dtype=dtype)
                out = buf[:k]
                if f is not None and k:
                    f.seek(offset + e0 * dtype.itemsize)
                    got = f.readinto(memoryview(out.view(np.uint8)))
                    if got != k * dtype.itemsize:
                        raise OSError(f"short read in {fname}")
                elif k:
                    out[:] = idx[e0:e1]
                yield base + r0, base + r1, ip[r0 : r1 + 1] - e0, out
                r0 = r1
    finally:
        if f is not None:
            f.close()


@numba.njit(cache=True)
def _refine_block(r0, r1, ptr_a, idx_a, ptr_b, idx_b, use_b, state):
    part, is_train, sizes, tsizes, cap_n, cap_t, cnt, ties, esizes, cap_e = state
    p = sizes.shape[0]
    moved = 0
    for v in range(r0, r1):
        r = v - r0
        a0 = ptr_a[r]
        a1 = ptr_a[r + 1]
        if a1 == a0 and (not use_b or ptr_b[r + 1] == ptr_b[r]):
            continue
        for j in range(a0, a1):
            u = idx_a[j]
            if u != v:
                cnt[part[u]] += 1
        if use_b:
            for j in range(ptr_b[r], ptr_b[r + 1]):
                u = idx_b[j]
                if u != v:
                    cnt[part[u]] += 1
        cur = part[v]
        tr = is_train[v]
        d = ptr_b[r + 1] - ptr_b[r] if use_b else a1 - a0  # in-degree
        best = cur
        for k in range(p):
            if sizes[k] < cap_n and esizes[k] + d <= cap_e and (not tr or tsizes[k] < cap_t):
                if cnt[k] > cnt[best] or (
                    ties and cnt[k] == cnt[best] and cnt[k] > 0 and sizes[k] + 1 < sizes[best]
                ):
                    best = k
        if best != cur:
            part[v] = best
            sizes[cur] -= 1
            sizes[best] += 1
            esizes[cur] -= d
            esizes[best] += d
            if tr:
                tsizes[cur] -= 1
                tsizes[best] += 1
            moved += 1
        # reset only what we touched
        for j in range(a0, a1):
            cnt[part[idx_a[j]]] = 0
        if use_b:
            for j in range(ptr_b[r], ptr_b[r + 1]):
                cnt[part[idx_b[j]]] = 0
        cnt[cur] = 0
        cnt[best] = 0
    return moved


def _zip_blocks(graph: GraphDir, block_edges: int):
    """Row blocks of csr_out (and csr_in with the same row ranges for a directed graph)."""
    out = graph.csr("out")
    if not graph.directed:
        for r0, r1, ptr, idx in csr_row_blocks(out, block_edges):
            yield r0, r1, ptr, idx, None, None
        return
    inn = graph.csr("in")
    for r0, r1, ptr, idx in csr_row_blocks(out, block_edges):
        ptr_b = copy_rows(inn.indptr, r0, r1 + 1).astype(np.int64, copy=False)
        e0, e1 = int(ptr_b[0]), int(ptr_b[-1])
        ptr_b -= e0
        idx_b = _read_slice(inn.indices, e0, e1)
        yield r0, r1, ptr, idx, ptr_b, idx_b


@numba.njit(cache=True)
def _add_in_edges(r0, ptr, part, esizes):
    for r in range(ptr.shape[0] - 1):
        esizes[part[r0 + r]] += ptr[r + 1] - ptr[r]


def part_in_edges(graph: GraphDir, part: np.ndarray, num_parts: int) -> np.ndarray:
    """In-edges per part (int64 (p,)): the row lengths of ``csr_in`` (``csr_out`` of an
    undirected graph, whose rows are symmetric) summed by owner, read
    :data:`INDPTR_ROWS` offsets at a time."""
    csr = graph.csr("in" if graph.directed else "out")
    esizes = np.zeros(num_parts, dtype=np.int64)
    for r0, ip in _indptr_windows(csr.indptr):
        _add_in_edges(r0, ip, part, esizes)
    return esizes


def _read_slice(arr: np.ndarray, e0: int, e1: int) -> np.ndarray:
    fname = getattr(arr, "filename", None)
    if fname is None or e1 <= e0:
        return np.array(arr[e0:e1])
    out = np.empty(e1 - e0, dtype=arr.dtype)
    with open(Path(fname), "rb", buffering=0) as f:
        f.seek(int(arr.offset) + e0 * arr.dtype.itemsize)
        f.readinto(memoryview(out.view(np.uint8)))
    return out


def refine_assignment(
    graph: GraphDir,
    node_part: np.ndarray,
    num_parts: int,
    *,
    passes: int = 1,
    balance: float = 1.10,
    train_mask: np.ndarray | None = None,
    block_edges: int = DEFAULT_CHUNK_EDGES,
    ties: bool = True,
    edge_balance: float | None = None,
    show_progress: bool | None = None,
    copy: bool = True,
) -> tuple[np.ndarray, list[int]]:
    """Restream the graph ``passes`` times, moving nodes to their majority part.

    Args:
        graph: the graph; its ``csr_out`` (and ``csr_in`` if directed) views are built by an
            external sort if missing.
        node_part: int32 (N,) start assignment (not modified unless ``copy`` is false).
        num_parts: ``p``.
        passes: number of restreaming passes (default 1); stops early when a pass moves
            nothing.
        balance: bound on max/mean nodes and training nodes per part (default 1.10).
        train_mask: bool (N,) training nodes, or None.
        block_edges: neighbour-list entries read per block (default 2**20).
        ties: also take zero-gain moves to a part with as many of the node's neighbours that
            is lighter by at least 2 nodes (default true): the cut stays, room is freed in full
            parts for later gains, which lowers the cut after GREM
            (docs/measurements.md#partitioning).
        edge_balance: if set, also keep in-edges per part (the in-degree sum of its nodes)
            under ``max(capacity(|E|, p, edge_balance), their max at the start)``: no move
            may push a part over it (default None; the default partitioner sets it).
        show_progress: progress bar per pass (default: when stderr is a terminal).
        copy: refine a copy of ``node_part`` (default true); false moves the nodes in
            ``node_part`` itself when it is an int32 array (4 bytes per node less).

    Returns:
        ``(new_node_part, moves_per_pass)``.
    """
    n = graph.num_nodes
    part = np.array(node_part, dtype=np.int32, copy=copy or None)
    if not part.flags.writeable:
        part = part.copy()
    if passes <= 0 or n == 0 or num_parts == 1 or graph.num_edges == 0:
        return part, []
    is_train = (
        np.zeros(n, dtype=np.bool_) if train_mask is None else np.asarray(train_mask, dtype=bool)
    )
    sizes = np.bincount(part, minlength=num_parts).astype(np.int64)
    tsizes = np.bincount(part[is_train], minlength=num_parts).astype(np.int64)
    cap_n = max(capacity(n, num_parts, balance), int(sizes.max()))
    cap_t = max(capacity(int(is_train.sum()), num_parts, balance), int(tsizes.max(initial=0)))
    if edge_balance is not None:
        esizes = part_in_edges(graph, part, num_parts)
        cap_e = max(capacity(graph.num_edges, num_parts, edge_balance), int(esizes.max()))
    else:
        esizes, cap_e = np.zeros(num_parts, dtype=np.int64), np.iinfo(np.int64).max // 4
    cnt = np.zeros(num_parts, dtype=np.int64)
    empty_ptr = np.zeros(1, dtype=np.int64)
    empty_idx = np.zeros(0, dtype=np.int64)
    state = (part, is_train, sizes, tsizes, cap_n, cap_t, cnt, ties, esizes, cap_e)
    moves: list[int] = []
    for it in range(passes):
        moved = 0
        bar = progress(
            total=n, desc=f"refine pass {it + 1}/{passes}", unit="node", enable=show_progress
        )
        for r0, r1, pa, ia, pb, ib in _zip_blocks(graph, block_edges):
            use_b = pb is not None
            ptr_b, idx_b = (pb, ib) if use_b else (empty_ptr, empty_idx.astype(ia.dtype))
            moved += _refine_block(r0, r1, pa, ia, ptr_b, idx_b, use_b, state)
            bar.update(r1 - r0)
        bar.close()
        moves.append(int(moved))
        if moved == 0:
            break
    return part, moves
