"""Exact layer-wise inference under a memory budget: source ranges read once, in order.

The per-batch layer loop (:mod:`shoal.training.inference`) reads, for each batch of targets,
the rows of all their in-neighbours: on a graph whose rows do not fit in memory, that is one
random read per edge. When every layer of the model is a sum of per-source messages
(:class:`shoal.nn.SumLayer`: GraphSAGE-mean, GCN, GIN, SGC), a layer is instead computed as in
MariusGNN's partition-buffer scheme (Waleffe et al., EuroSys 2023, Sec. 4) and X-Stream's
edge-centric scatter: targets are taken in *blocks* whose accumulators and in-edges fit the
budget; for a block, the sources its edges need are deduplicated and sorted, read range by
range with planned sequential reads (:class:`~shoal.rows.direct.RowReader`), turned into
messages and added into the targets' accumulators; then each target's own row is read and
the layer finished. Every source row is read once per block, in file order, so the cost is
``blocks x one sweep`` of the layer's input instead of one random read per edge.

Layer outputs go to arrays in a scratch directory written with positioned writes (never
mapped into the process), and are read back the same planned way by the next layer.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from shoal.nn.base import SumLayer
from shoal.rows import _kernels as K
from shoal.rows.decode import decode_rows, source_scales
from shoal.rows.direct import RowFile
from shoal.rows.featstore import DiskFeatures
from shoal.rows.gather import gather_rows
from shoal.rows.opener import open_rows
from shoal.training import _kernels as BK
from shoal.training.batches import Timer
from shoal.utils.arrays import union_sorted
from shoal.utils.featdtype import of_stored, scales_of
from shoal.utils.mapped import file_of, read_span
from shoal.utils.memory import huge_empty, huge_zeros
from shoal.utils.progress import progress

__all__ = [
    "EDGE_BYTES",
    "SPAN_BYTES",
    "LayerRows",
    "RowWriter",
    "blocked_layer",
    "blocked_layers",
    "needed_nodes",
    "pull_sum",
    "output_width",
    "width_of",
    "sum_layers",
]

log = logging.getLogger(__name__)

#: bytes of working memory per in-edge of a block: its source (offset in its range) and
#: target, bucketed, as int32 (the block's in-edges read from a structure on disk add their
#: entry's bytes: :func:`edge_bytes`).
EDGE_BYTES = 8
#: neighbour-list bytes read at once from a file-backed structure (default 64 MiB).
SPAN_BYTES = 64 << 20
#: the bytes of one source range read and turned into messages at once (default 16 MiB):
#: smaller ranges read below the disk's sequential rate, 16 MiB reaches it
#: (docs/measurements.md#reading-rows-from-disk); larger ranges only take memory from the
#: blocks, and every block costs a pass over the layer's input.
CHUNK_BYTES = 16 << 20
#: a range's memory in units of its bytes: two reused buffers (one filled while the other's
#: messages are added) and the messages and degrees of the range being added.
RANGE_COPIES = 4
#: the bytes of targets finished at once (default 4 MiB of rows).
SLICE_BYTES = 4 << 20
#: a finishing slice's memory in units of its bytes: two reused buffers of the targets' own
#: rows, their accumulators, and the layer's intermediate products and output.
SLICE_COPIES = 8
#: layer outputs are flushed to disk and dropped from the page cache every this many bytes.
FLUSH_BYTES = 64 << 20
#: a layer's output stays in memory (the next layer pulls from it) when it and the layer's
#: input kept there take at most this share of the working memory (default 0.5)
KEEP_SHARE = 0.5
#: the most bytes of a chunked pull's two read buffers (default 1 GiB: 128-column float32
#: rows of 1M ids each, 28 chunks per pass over the quarter of papers100M; every chunk costs
#: a visit of every target of the block, a cache miss each, so chunks are made as large as
#: the memory the block leaves allows)
PULL_CHUNK_BYTES = 1 << 30
#: the bytes of held rows a pull from memory sums at once when they are larger (default 512
#: MiB): every target's sorted list is consumed span by span of source ids, as the chunked
#: pull does, so the rows read at random lie within a few hundred huge pages (35 against
#: 71 ns an edge over 7 GB of float16 rows at the quarter of papers100M; spans of 1M-4M ids
#: alike, docs/measurements.md); 16 bytes of cursors per target
PULL_SPAN_BYTES = 512 << 20
#: the share of the working memory the last layer's targets' in-edges may take, kept from
#: the needed-nodes pass that read them (default 1/16): the last layer then reads no list
#: from the CSR file again (targets scattered over the file cost a pass over it: the
#: quarter of papers100M's 84k evaluated nodes, 3.2 GB, for 10 MB of lists)
LISTS_SHARE = 1 / 16


@dataclass
class Lists:
    """The in-edges of the sorted ``nodes`` in memory: a compact CSR ``(ptr, src)`` over
    their positions, as :func:`_in_edges` returns."""

    nodes: np.ndarray
    ptr: np.ndarray
    src: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.nodes.nbytes + self.ptr.nbytes + self.src.nbytes

    def of(self, nodes: np.ndarray) -> tuple | None:
        """The in-edges of the sorted ``nodes`` (positions as :func:`_in_edges`), None
        unless every one of them is held (the arrays themselves when they are all)."""
        if len(nodes) == len(self.nodes) and np.array_equal(nodes, self.nodes):
            return self.ptr, self.src
        pos = np.searchsorted(self.nodes, nodes)
        if np.any(pos >= len(self.nodes)) or not np.array_equal(self.nodes[pos], nodes):
            return None
        ptr = np.zeros(len(nodes) + 1, np.int64)
        np.cumsum(self.ptr[pos + 1] - self.ptr[pos], out=ptr[1:])
        src = huge_empty((int(ptr[-1]),), self.src.dtype)
        BK._copy_lists(self.ptr, self.src, pos, ptr, src)
        return ptr, src


def sum_layers(model: torch.nn.Module) -> list[SumLayer] | None:
    """The model's layers as :class:`SumLayer` objects, or None when one is not a sum."""
    fn = getattr(model, "sum_layer", None)
    num = int(getattr(model, "num_layers", 0) or 0)
    if fn is None or not num:
        return None
    layers = [fn(i) for i in range(num)]
    return None if any(sl is None for sl in layers) else layers


def _first(src):
    return src[0] if isinstance(src, list) else src


class LayerRows:
    """Float32 rows of a layer's input for sorted unique ids: a :class:`DiskFeatures` (cache +
    planned reads), a file-backed array (planned reads), an in-memory array, or a list of
    arrays stacked row-wise (a part's core rows, then its halo rows)."""

    def __init__(self, src, *, normalize: bool = False, threads: int = 8, row_ids=None) -> None:
        self.normalize = normalize
        #: the sorted ids whose rows ``src`` holds in order (a compact layer output); None:
        #: row ``i`` is id ``i``
        self.row_ids = None if row_ids is None else np.asarray(row_ids)
        if not isinstance(src, DiskFeatures | np.ndarray):  # a list stacked row-wise
            src = [a for a in src if a.shape[0] > 0] or list(src)[:1]
        self.reader = None if isinstance(src, DiskFeatures) else open_rows(src, threads=threads)
        #: int8 rows' scales (compact rows are decoded into float32: shoal.rows.decode)
        self.scales = None
        if self.reader is not None:
            self.scales = source_scales(self.reader)
        elif not isinstance(src, DiskFeatures) and np.dtype(_first(src).dtype) == np.int8:
            members = src if isinstance(src, list) else [src]
            self.scales = np.concatenate([np.asarray(scales_of(a), np.float32) for a in members])
        if isinstance(src, list) and self.reader is None:
            src = np.concatenate(src)
        first = src[0] if isinstance(src, list) else src
        self.dim = int(first.dim if isinstance(first, DiskFeatures) else first.shape[1])
        self.dtype = np.dtype(np.float32) if isinstance(first, DiskFeatures) else first.dtype
        #: the dtype rows are stored in (a store's too)
        self.stored = np.dtype(first.dtype)
        self.src = src

    def read(self, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """float32 rows of ``ids`` (sorted, unique), into ``out`` (a reused buffer of at
        least ``len(ids)`` rows) when given; returns them."""
        n = len(ids)
        out = np.empty((n, self.dim), np.float32) if out is None else out[:n]
        if self.row_ids is not None:  # ids -> their rows' positions (sorted, as the ids)
            ids = np.searchsorted(self.row_ids, ids).astype(np.int64, copy=False)
        if isinstance(self.src, DiskFeatures):  # normalises when the store does
            if self.src.cached_rows == 0 and self.src.reader is not None:
                return self.src.read_rows(ids, out)  # nothing cached: straight into out
            return self.src.window([ids]).gather(ids, out)
        if self.reader is not None and self.dtype == np.float32:
            self.reader.read(ids, out)
        elif self.reader is not None:  # read as stored, decoded into out
            raw = np.empty((n, self.dim), dtype=self.dtype)
            self.reader.read(ids, raw)
            scales = None if self.scales is None else self.scales[ids]
            decode_rows(raw, np.arange(n, dtype=np.int64), out, scales=scales)
        else:
            gather_rows(self.src, ids, out, scales=self.scales)
        if self.normalize:
            K._row_normalize(out, n)
        return out

    def stored16(self) -> int:
        """1 when rows can be read as stored float16 rows (:meth:`read_stored`), 2 as stored
        bfloat16 rows (their top 16 bits), 0 otherwise (another dtype, normalised rows, or a
        :class:`DiskFeatures` source that caches rows: it decodes as it gathers)."""
        if self.normalize:
            return 0
        src = self.src
        if isinstance(src, DiskFeatures) and (
            src.normalize or src.reader is None or src.cached_rows or self.row_ids is not None
        ):
            return 0
        if self.stored == np.float16:
            return 1
        return 2 if self.stored == np.uint16 else 0

    def read_stored(
        self, ids: np.ndarray, out: np.ndarray, dest: np.ndarray | None = None
    ) -> np.ndarray:
        """Rows of ``ids`` (sorted, unique) as stored, without decoding, into ``out`` (a reused
        buffer of :attr:`stored` items and at least ``len(ids)`` rows), or row ``ids[i]``
        into ``out[dest[i]]`` with ``dest`` (increasing); returns the rows written to (all
        of ``out`` with ``dest``). Only when :meth:`stored16` is not 0."""
        n = len(ids)
        if dest is None:
            out = out[:n]
        if self.row_ids is not None:
            ids = np.searchsorted(self.row_ids, ids).astype(np.int64, copy=False)
        if not n:
            return out
        ids = np.asarray(ids, np.int64)
        if isinstance(self.src, DiskFeatures):
            self.src.read_stored(ids, out, dest)
        elif self.reader is not None:
            self.reader.read(ids, out, dest)
        elif dest is None:
            np.take(self.src, ids, axis=0, out=out)
        else:
            out[dest] = self.src[ids]
        return out

    def in_memory(self) -> tuple[np.ndarray, np.ndarray | None] | None:
        """``(stored rows, scales)`` when every row is in memory as stored, row ``u`` for id
        ``u`` (an in-memory array, or a :class:`DiskFeatures` caching every row, in id
        order; with :attr:`row_ids`, row ``i`` for id ``row_ids[i]``), int8 rows times
        ``scales[u]``; None when rows come from a file or are normalised."""
        src = self.src
        if self.normalize:
            return None
        if isinstance(src, DiskFeatures):
            if src.normalize:
                return None
            if src.reader is None:
                return src.features, src.scales
            if src.cache_loaded and src.cached_rows == src.num_rows:  # row u is cache[u]
                return src.cache, src.scales
            return None
        if self.reader is not None or not isinstance(src, np.ndarray):
            return None
        return src, self.scales

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


def _pages(at: int, nbytes: int) -> int:
    """Bytes of the 4 KiB pages a write of ``nbytes`` at offset ``at`` touches."""
    return ((at + nbytes + 4095) // 4096 - at // 4096) * 4096 if nbytes else 0


class RowWriter:
    """Positioned writes of rows into a file-backed ``.npy`` array (or plain assignment).
    Every :data:`FLUSH_BYTES` of pages dirtied are flushed and dropped from the page cache:
    dirty pages count against a memory cgroup's limit, and cgroup v1 does not throttle
    writers, so a fast writer under a cap would be OOM-killed instead of slowed down. Pages,
    not bytes: the rows of a few nodes scattered over the file (a validation set's
    neighbourhood) dirty a whole page each, many times their own bytes
    (docs/measurements.md#the-memory-plan)."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.file = RowFile.of(arr)
        self.fd = os.open(self.file.path, os.O_WRONLY) if self.file is not None else -1
        self.pending = 0

    def _written(self, nbytes: int) -> None:
        self.pending += nbytes
        if self.pending >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.fd >= 0 and self.pending:
            os.fdatasync(self.fd)
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
            self.pending = 0

    def write(self, ids: np.ndarray, h: np.ndarray) -> None:
        """``arr[ids] = h`` (``ids`` sorted)."""
        if self.fd < 0:
            if len(ids) and int(ids[-1]) - int(ids[0]) + 1 == len(ids):  # consecutive
                self.arr[int(ids[0]) : int(ids[-1]) + 1] = h
            else:
                self.arr[ids] = h
            return
        f = self.file
        h = np.ascontiguousarray(h, dtype=self.arr.dtype)
        if f.stride != f.row_bytes:
            for i, v in enumerate(ids):
                at = f.offset + int(v) * f.stride
                os.pwrite(self.fd, memoryview(h[i]).cast("B"), at)
                self._written(_pages(at, f.row_bytes))
        else:  # one write per run of consecutive ids
            cuts = np.flatnonzero(np.diff(ids) != 1) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(ids)], strict=True):
                if b > a:
                    at = f.offset + int(ids[a]) * f.stride
                    os.pwrite(self.fd, memoryview(h[a:b]).cast("B"), at)
                    # counted in the pages it dirties: a few scattered rows dirty a page each
                    self._written(_pages(at, (b - a) * f.row_bytes))

    def close(self) -> None:
        if self.fd >= 0:
            self.flush()
            os.close(self.fd)
            self.fd = -1


def edge_bytes(indices: np.ndarray) -> int:
    """Working bytes per in-edge of a block over ``indices``: :data:`EDGE_BYTES`, plus one
    entry when ``indices`` is file-backed (the block's in-edges are read into memory)."""
    return EDGE_BYTES + (indices.dtype.itemsize if file_of(indices) is not None else 0)


def target_bytes(sl: SumLayer, indices: np.ndarray, in_width: int = 0) -> int:
    """Working bytes per target of a block beside its in-edges: its float32 accumulator, its
    own input row of ``in_width`` columns (kept from the sweep of the sources) and, when
    ``indices`` is file-backed, its entry in the block's in-edge index."""
    return 4 * (sl.width + in_width) + (8 if file_of(indices) is not None else 0)


def _blocks(
    indptr: np.ndarray, targets: np.ndarray, per_target: int, budget: int, per_edge: int
) -> list:
    """Split ``targets`` into consecutive blocks whose cost (in-edges x ``per_edge`` + the
    per-target bytes) stays within ``budget`` (at least one target per block)."""
    d = np.asarray(indptr[targets + 1], np.int64) - np.asarray(indptr[targets], np.int64)
    d *= per_edge
    d += per_target
    cost = np.cumsum(d, out=d)
    bounds = [0]
    while bounds[-1] < len(targets):
        a = bounds[-1]
        base = cost[a - 1] if a else 0
        b = int(np.searchsorted(cost, base + budget, side="right"))
        bounds.append(max(b, a + 1))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _spans(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray) -> Iterator[tuple]:
    """``(a, b, lo, span)`` per consecutive range ``[a, b)`` of the sorted ``nodes`` whose
    neighbour lists lie within :data:`SPAN_BYTES` of ``indices`` (at least one node each):
    their entries from ``lo`` on, read by :func:`~shoal.utils.mapped.read_span`."""
    lo = np.asarray(indptr[nodes], np.int64)
    hi = np.asarray(indptr[nodes + 1], np.int64)
    max_entries, a = max(SPAN_BYTES // indices.itemsize, 1), 0
    while a < len(nodes):
        b = max(int(np.searchsorted(hi, lo[a] + max_entries, side="right")), a + 1)
        yield a, b, int(lo[a]), read_span(indices, int(lo[a]), int(hi[b - 1]))
        a = b


def _in_edges(
    indptr: np.ndarray,
    indices: np.ndarray,
    nodes: np.ndarray,
    always: bool = False,
    lists: Lists | None = None,
):
    """``(ptr, sources)``: the in-edges of the sorted ``nodes`` as a compact CSR over their
    positions, read from a file-backed ``indices`` span by span (:data:`SPAN_BYTES` at a
    time, :func:`~shoal.utils.mapped.read_span`: no page of the map is touched) unless
    ``lists`` holds them; None when ``indices`` is in memory (use it as is), unless
    ``always`` (then copied)."""
    on_disk = file_of(indices) is not None
    if not on_disk and not always:
        return None
    if on_disk and lists is not None:
        held = lists.of(nodes)
        if held is not None:
            return held
    deg = np.asarray(indptr[nodes + 1], np.int64) - np.asarray(indptr[nodes], np.int64)
    ptr = np.zeros(len(nodes) + 1, np.int64)
    np.cumsum(deg, out=ptr[1:])
    src = huge_empty((int(ptr[-1]),), indices.dtype)
    if not on_disk:
        BK._copy_lists(indptr, indices, np.asarray(nodes, np.int64), ptr, src)
        return ptr, src
    for a, b, lo, span in _spans(indptr, indices, nodes):
        starts = np.asarray(indptr[nodes[a:b]], np.int64) - lo  # each list's start in span
        at = np.arange(b - a, dtype=np.int64)
        BK._copy_lists(starts, span, at, ptr[a : b + 1] - ptr[a], src[ptr[a] : ptr[b]])
    return ptr, src


def _read_pre(rows: LayerRows, ids: np.ndarray, pre, out: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(rows.read(ids, out))
    return pre(x) if pre is not None else x


def _read_ahead(pool: ThreadPoolExecutor, rows: LayerRows, pre, items: Iterator[tuple], bufs: list):
    """``(item, the rows of item[0])`` for each ``item`` of ``items`` (a tuple whose first
    entry is sorted ids), read by ``pool`` (one thread) up to ``len(bufs) - 1`` items ahead
    of the caller: reading overlaps compute, and only that thread reads. Items take turns in
    the reused buffers ``bufs`` (no page of a fresh array faulted in per read): the buffer of
    an item is refilled only after the caller has moved past it."""
    pending: deque = deque()
    for k, item in enumerate(items):
        pending.append((item, pool.submit(_read_pre, rows, item[0], pre, bufs[k % len(bufs)])))
        if len(pending) == len(bufs):
            item0, fut = pending.popleft()
            yield item0, fut.result()
    while pending:
        item0, fut = pending.popleft()
        yield item0, fut.result()


def _layer_block(sl: SumLayer, rows: LayerRows, pre, graph, block, reads: _Reads, lists=None):
    """One block of targets: sweep the source ranges its in-edges need (each range's needed
    rows read in one planned pass, the next range's while this one's messages are added;
    the targets' own rows read in the same pass and kept, so the file is swept once per
    block, not once for the sources and again for the targets), then finish the targets in
    slices: yields ``(offset in block, output rows)`` per slice."""
    indptr, indices, deg_t = graph
    range_rows, pool = reads.range_rows, reads.pool
    n_ranges = -(-len(deg_t) // range_rows)
    ptr = np.zeros(n_ranges + 1, np.int64)
    edges, at = (indptr, indices), block
    compact = _in_edges(indptr, indices, block, lists=lists)
    if compact is not None:  # the block's in-edges read from the file into memory
        edges, at = compact, np.arange(len(block), dtype=np.int64)
    m = BK._count_by_range(edges[0], at, edges[1], range_rows, ptr)
    src, dst = np.empty(m, np.int32), np.empty(m, np.int32)
    BK._bucket_by_range(edges[0], edges[1], at, range_rows, ptr, src, dst)
    del compact, edges
    acc = huge_zeros((len(block), sl.width), np.float32)
    own = None  # the targets' own input rows (pre applied), kept as the sweep passes them
    mark = np.full(range_rows, -1, np.int64)
    # the targets of each range: block[tcut[r]:tcut[r + 1]] (block is sorted)
    tcut = np.searchsorted(block, np.arange(n_ranges + 1, dtype=np.int64) * range_rows)
    todo = union_sorted(np.flatnonzero(np.diff(ptr)), np.flatnonzero(np.diff(tcut)))

    def ranges(src: np.ndarray) -> Iterator[tuple]:
        for r in todo:
            s_src = src[ptr[r] : ptr[r + 1]]
            mine = (block[tcut[r] : tcut[r + 1]] - r * range_rows).astype(s_src.dtype)
            both = np.concatenate([s_src, mine])
            ids = np.empty(min(range_rows, len(both)), np.int64)
            pos = np.empty_like(both, np.int64)
            k = BK._range_ids(both, 0, mark, ids, pos)
            yield ids[:k] + r * range_rows, int(r), pos[: len(s_src)], pos[len(s_src) :]

    for (ids, r, pos, at_own), h in _read_ahead(pool, rows, pre, ranges(src), reads.range_bufs):
        if len(pos):
            msg = sl.message(h, deg_t[torch.from_numpy(ids)].unsqueeze(1)).contiguous().numpy()
            BK._scatter_add(acc, msg, dst[ptr[r] : ptr[r + 1]], pos)
        if len(at_own):
            if own is None:
                own = np.empty((len(block), h.shape[1]), np.float32)
            own[tcut[r] : tcut[r + 1]] = h[torch.from_numpy(at_own)].numpy()
    del src, dst
    k = reads.slice_rows
    for a in range(0, len(block), k):
        d = deg_t[torch.from_numpy(block[a : a + k])].unsqueeze(1)
        yield a, sl.finish(torch.from_numpy(acc[a : a + k]), torch.from_numpy(own[a : a + k]), d)


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the array itself when it is read-only already)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def pull_sum(
    indptr: np.ndarray,
    indices: np.ndarray,
    targets: np.ndarray,
    held: tuple,
    weights: np.ndarray | None,
    acc: np.ndarray,
) -> None:
    """``acc[i] += sum_u weights[u] * row(u)[:acc.shape[1]]`` over the in-edges ``u -> t`` of
    ``t = targets[i]`` (CSR ``indptr``/``indices``, in memory), the rows ``held`` in memory
    as stored (:meth:`LayerRows.in_memory`: row ``u`` is source ``u``) and decoded on the fly;
    ``weights`` float32 by source id (None: 1). Targets in parallel, each summing into its
    own row, the rows of the next edges prefetched; rows of more than twice
    :data:`PULL_SPAN_BYTES` (not int8) summed span by span of source ids when every list is
    sorted."""
    x, scales = held
    if acc.dtype != np.float32 or acc.ndim != 2 or acc.shape[0] < len(targets):
        raise ValueError(f"acc must be float32 with >= {len(targets)} rows")
    if acc.shape[1] > x.shape[1]:
        raise ValueError(f"rows of {x.shape[1]} columns cannot fill {acc.shape[1]}")
    if not x.flags.c_contiguous:
        raise ValueError("the held rows must be C-contiguous")
    targets = np.ascontiguousarray(targets, np.int64)
    w = np.empty((0, 1), np.float32)
    if weights is not None:
        w = np.ascontiguousarray(weights, np.float32).reshape(-1, 1)
    # read-only views: numba then knows the accumulators alias none of them, and the
    # kernel keeps its loads out of the loops (a writable list array made it 3x slower)
    indptr, indices, targets, x, w = (_read_only(a) for a in (indptr, indices, targets, x, w))
    kind = of_stored(x.dtype)
    if kind.scaled and scales is None:
        raise ValueError("int8 rows need their scales")
    sc = np.empty(0, np.float32) if scales is None else np.asarray(scales, np.float32)
    if kind.itemsize == 2:
        x = x.view(np.uint16)  # float16 and bfloat16 decoded from their bits
    span = max(1, PULL_SPAN_BYTES // max(x.shape[1] * x.dtype.itemsize, 1))
    if kind.code <= 2 and x.shape[0] > 2 * span:
        cur = np.asarray(indptr[targets], np.int64)
        end = _read_only(np.asarray(indptr[targets + 1], np.int64))
        if BK._lists_sorted(cur, end, indices):  # span by span, each list's cursor moving on
            pull = BK.pull_chunk_kernel(kind.code)
            none = _read_only(np.empty(0, np.int64))
            for lo in range(0, x.shape[0], span):
                hi = min(lo + span, x.shape[0])
                pull(cur, end, indices, lo, hi, none, _read_only(x[lo:hi]), w, acc)
            if not np.array_equal(cur, end):
                raise ValueError("in-neighbour ids beyond the held rows")
            return
    pull = BK.pull_kernel(kind.code, weights is not None)
    pull(indptr, indices, targets, x, w, _read_only(sc), acc)


def _pull_block(
    sl: SumLayer, rows: LayerRows, held: tuple, graph, block, reads: _Reads, w, acc=None, lists=None
):
    """One block of targets whose sources are all in memory (:func:`pull_sum`): each target
    sums its in-neighbours' stored rows, then the targets are finished in slices; yields
    ``(offset in block, output rows)`` per slice, as :func:`_layer_block`. ``acc``: the
    zeroed accumulators to use (default: new ones); ``lists``: in-edges already in memory
    (:class:`Lists`)."""
    indptr, indices, deg_t = graph
    edges, at = (indptr, indices), block
    compact = _in_edges(indptr, indices, block, always=rows.row_ids is not None, lists=lists)
    if compact is not None:  # the block's in-edges read from the file into memory
        edges, at = compact, np.arange(len(block), dtype=np.int64)
    if rows.row_ids is not None:  # ids -> their rows in a compact layer output
        edges = (edges[0], np.searchsorted(rows.row_ids, edges[1]))
    if acc is None:
        acc = huge_zeros((len(block), sl.width), np.float32)
    pull_sum(edges[0], edges[1], at, held, w, acc)
    del compact, edges
    k = reads.slice_rows
    for a in range(0, len(block), k):
        ids = block[a : a + k]
        own = torch.from_numpy(rows.read(ids, reads.slice_bufs[0]))
        d = deg_t[torch.from_numpy(ids)].unsqueeze(1)
        yield a, sl.finish(torch.from_numpy(acc[a : a + k]), own, d)


def _own_kind(rows: LayerRows) -> tuple[np.dtype, Callable, Callable]:
    """How a chunked block keeps its targets' own rows: ``(dtype, encode, decode)``, in the
    16 bits they are stored in when that is exact (float16, bfloat16 rows not normalised),
    else as the float32 rows read."""
    if not rows.normalize and rows.stored == np.float16:
        return np.dtype(np.float16), lambda h: h.astype(np.float16), lambda o: o.astype(np.float32)
    if not rows.normalize and rows.stored == np.uint16:  # bfloat16: the top 16 bits
        return (
            np.dtype(np.uint16),
            lambda h: (h.view(np.uint32) >> 16).astype(np.uint16),
            lambda o: (o.astype(np.uint32) << 16).view(np.float32),
        )
    return np.dtype(np.float32), lambda h: h, lambda o: o


class _Chunks:
    """The reused memory of chunked pulls: two read buffers of ``rows`` ids' rows (one
    filled while the other is summed), a chunk's marks and its ids' slots. ``code``: the
    rows are read as float32 (0) or as stored float16 (1) or bfloat16 (2) bits
    (:meth:`LayerRows.stored16`), half the bytes."""

    def __init__(self, rows: int, dim: int, code: int = 0) -> None:
        self.rows = rows
        self.code = code
        dtype = np.int16 if code else np.float32
        self.bufs = [huge_empty((rows, dim), dtype) for _ in range(2)]
        self.mark = np.zeros(rows, np.bool_)
        self.slot = np.zeros(rows, np.int64)

    @staticmethod
    def bytes_per_row(dim: int, code: int = 0) -> int:
        return 2 * (2 if code else 4) * dim + 1 + 8


class _StoredRows:
    """:class:`LayerRows` read as stored 16-bit rows (int16 bits: torch has no uint16
    arithmetic; the kernels view them as uint16) into dense chunks, for
    :func:`_read_ahead`: row ``u`` of a chunk of ``span`` ids (chunks start at multiples of
    ``span``) goes to row ``u % span`` of the buffer, so the pull finds it without a lookup
    (a dependent cache miss an edge: 144 against 55 ns an edge at the quarter of
    papers100M, docs/measurements.md); the rows no target needs are not read."""

    def __init__(self, rows: LayerRows, span: int) -> None:
        self.rows = rows
        self.span = span

    def read(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        dense = out.view(self.rows.stored)
        return self.rows.read_stored(ids, dense, ids % self.span).view(np.int16)


def _chunk_code(rows: LayerRows) -> int:
    """How a chunked pull reads its chunks (:class:`_Chunks`): as stored 16-bit rows when
    they can be (:meth:`LayerRows.stored16`), else as float32."""
    return rows.stored16()


def _chunk_edges(indptr, indices, block, lists=None):
    """``(cur, end, entries)`` of the block's in-edges for chunked pulls, each list sorted:
    cursors into the CSR when it is in memory and sorted, else into a copy (read from the
    file or taken from ``lists``, sorted where it was not)."""
    compact = _in_edges(indptr, indices, block, lists=lists)
    if compact is None:
        cur = np.asarray(indptr[block], np.int64)
        end = np.asarray(indptr[block + 1], np.int64)
        if BK._lists_sorted(cur, end, indices):
            return cur, end, indices
        compact = _in_edges(indptr, indices, block, always=True)
    ptr, src = compact
    if not BK._lists_sorted(ptr[:-1], ptr[1:], src):
        BK._sort_lists(ptr, src)
    return ptr[:-1].copy(), ptr[1:], src


#: bytes per target of a chunked pull's cursors: the summing and the marking cursors and
#: the in-edge offsets (int64: int32 cursors measured twice as slow, but while the parallel
#: and serial pulls shared a numba cache entry: not measured since,
#: docs/measurements.md#pulling-rows-held-in-memory)
CURSOR_BYTES = 24


def _chunked_block(
    sl: SumLayer, rows: LayerRows, graph, block, reads: _Reads, chunks, w, spill=None, lists=None
):
    """One block of targets whose sources are read from disk: the source ids are taken in
    chunks of ``chunks.rows``, in order (one pass over the layer's input per block); each
    chunk's needed rows (its sources' and the block's own) are read in one planned pass,
    the next chunk's while this one's are summed, and every target pulls the entries of its
    sorted in-neighbour list that fall in the chunk (a cursor per target: no edge bucketed,
    no message materialised); the own rows are kept as stored, in memory or, with
    ``spill`` (``spill(rows, cols, dtype)``: a file-backed scratch array), written to a
    scratch file in block order as the chunks pass them and read back in order to finish
    (:func:`_plan_layer` spills them when that saves a pass over the input); ``lists``: the
    in-edges already in memory (:class:`Lists`). Then the
    targets are finished in slices: yields ``(offset in block, output rows)`` as
    :func:`_layer_block`."""
    indptr, indices, deg_t = graph
    n = len(deg_t)
    t = Timer()
    with t.phase("in-edges"):
        cur, end, entries = _chunk_edges(indptr, indices, block, lists)
    ahead = cur.copy()  # the marking cursors, one chunk ahead of the summing ones
    acc = huge_zeros((len(block), sl.width), np.float32)
    own_dtype, encode, decode = _own_kind(rows)
    if spill is None:
        own = np.empty((len(block), rows.dim), own_dtype)
        writer = None
    else:
        own = spill(len(block), rows.dim, own_dtype)
        writer = RowWriter(own)
    mark, slot, size = chunks.mark, chunks.slot, chunks.rows
    ww = np.empty((0, 1), np.float32) if w is None else w.reshape(-1, 1)
    pull = BK.pull_chunk_kernel(chunks.code)
    if chunks.code:  # dense chunks of rows as stored: the own rows are kept as read
        source, encode = _StoredRows(rows, size), lambda h: h.view(own_dtype)
        at_slot = np.empty(0, np.int64)
    else:
        source, at_slot = rows, slot

    def marked() -> Iterator[tuple]:
        for lo in range(0, n, size):
            hi = min(lo + size, n)
            with t.phase("marking"):
                BK._mark_chunk(ahead, end, entries, lo, hi, mark)
                ta, tb = np.searchsorted(block, [lo, hi])
                mark[block[ta:tb] - lo] = True
                ids = np.flatnonzero(mark[: hi - lo])
                mark[ids] = False
            if len(ids):
                yield ids + lo, lo, hi, int(ta), int(tb)

    ro_end, ro_entries, ro_slot, ww = (_read_only(a) for a in (end, entries, at_slot, ww))
    chunked = _read_ahead(reads.pool, source, None, marked(), chunks.bufs)
    while True:
        with t.phase("read wait"):
            got = next(chunked, None)
        if got is None:
            break
        (ids, lo, hi, ta, tb), h = got
        x = h.numpy()
        if chunks.code:
            x = x.view(np.uint16)
        with t.phase("pull"):
            if not chunks.code:  # packed rows: each id's row
                slot[ids - lo] = np.arange(len(ids))
            pull(cur, ro_end, ro_entries, lo, hi, ro_slot, _read_only(x), ww, acc)
        with t.phase("own rows"):
            if tb > ta:
                at = block[ta:tb] - lo
                mine = encode(x[at if chunks.code else slot[at]])
                if writer is None:
                    own[ta:tb] = mine
                else:
                    writer.write(np.arange(ta, tb), mine)
    if not np.array_equal(cur, end):  # every entry must have been summed
        raise RuntimeError("in-neighbour ids outside the layer's input: cannot sum them")
    k = reads.slice_rows
    if writer is not None:
        with t.phase("own rows"):
            writer.close()
    log.info("a block of %d targets summed: %s (the read wait counts the marking)", len(block), t)
    if writer is not None:
        yield from _finish_spilled(sl, acc, own, deg_t, block, reads)
        return
    for a in range(0, len(block), k):
        d = deg_t[torch.from_numpy(block[a : a + k])].unsqueeze(1)
        h = torch.from_numpy(np.ascontiguousarray(decode(own[a : a + k])))
        yield a, sl.finish(torch.from_numpy(acc[a : a + k]), h, d)


def _finish_spilled(sl: SumLayer, acc, own, deg_t, block, reads: _Reads):
    """Finish a chunked block whose own rows were spilled to the scratch array ``own``:
    slice by slice, each slice's own rows read (planned reads, decoded into float32) by the
    reading thread while the slice before is finished."""
    k = reads.slice_rows
    spilled = LayerRows(own, threads=1)
    try:
        slices = (
            (np.arange(a, min(a + k, len(block)), dtype=np.int64),) for a in range(0, len(block), k)
        )
        for (at,), h in _read_ahead(reads.pool, spilled, None, slices, reads.slice_bufs):
            a = int(at[0])
            d = deg_t[torch.from_numpy(block[a : a + len(at)])].unsqueeze(1)
            yield a, sl.finish(torch.from_numpy(acc[a : a + len(at)]), h, d)
    finally:
        spilled.close()


@dataclass
class _LayerPlan:
    """How a layer runs: its ``blocks`` of targets, the ids of a chunked pull's chunk
    (0: not chunked), the message weights by source and a phrase for the log."""

    blocks: list
    chunk_rows: int
    weights: np.ndarray | None
    how: str
    held: object = None
    #: bytes of the read buffers the plan counted (slices, and a sweep's ranges)
    read_bytes: int = 0
    #: a chunked pull writes its targets' own rows to a scratch file (they would cost a block)
    spill: bool = False


def _plan_layer(
    sl: SumLayer, rows: LayerRows, pre, graph, todo, budget: int, src_ids, spill: bool = False
):
    """The :class:`_LayerPlan` of a layer within ``budget`` bytes: a pull from memory when
    its sources are all there (accumulators only, and the in-edges when copied), a chunked
    pull when they are read (accumulators, own rows as stored and cursors per target; the
    in-edges when copied; the chunk buffers take what the largest block leaves, up to
    :data:`PULL_CHUNK_BYTES`, at least an eighth), else a sweep of bucketed ranges. With
    ``spill`` (a scratch directory exists) a chunked pull whose own rows would take more
    blocks in memory writes them to a scratch file instead: twice their bytes of disk
    traffic against a pass over the whole input per block saved."""
    indptr, indices = graph[0], graph[1]
    in_dim = width_of(pre, rows.dim)
    linear = sl.linear and pre is None  # sources summed as stored: pulled
    # the sweep's range buffers are made only when a sweep runs
    held_reads = _Reads.held_bytes(budget, rows.dim, max(in_dim, sl.width), ranges=not linear)
    held = rows.in_memory() if linear else None
    w = None
    if linear and sl.scale is not None:  # a message weight per source
        w = sl.scale(graph[2].unsqueeze(1)).reshape(-1).contiguous().numpy()
        if held is not None and src_ids is not None:  # by row of the compact input
            w = w[np.asarray(src_ids, np.int64)]
    room = max(budget - held_reads - (0 if w is None else w.nbytes), 1)
    disk = file_of(indices) is not None
    if held is not None:  # no bucketed edge, no own row kept: accumulators (and copied edges)
        copied = disk or src_ids is not None
        per_edge = indices.dtype.itemsize + (8 if src_ids is not None else 0) if copied else 0
        spans = held[0].nbytes > 2 * PULL_SPAN_BYTES  # a target's cursors (pull_sum)
        per_target = 4 * sl.width + (8 if copied else 0) + (16 if spans else 0)
        blocks = _blocks(indptr, todo, per_target, room, per_edge)
        how = "each pulling its sources' rows from memory" + (
            f" in spans of {PULL_SPAN_BYTES >> 20} MiB of rows" if spans else ""
        )
        return _LayerPlan(blocks, 0, w, how, held, held_reads)
    if linear:  # sources from disk, chunk by chunk; accumulators, own rows, cursors
        per_row = _Chunks.bytes_per_row(rows.dim, _chunk_code(rows))
        least = max(per_row, min(PULL_CHUNK_BYTES, room // 8))
        own = _own_kind(rows)[0].itemsize * rows.dim
        per_target = 4 * sl.width + own + CURSOR_BYTES + (8 if disk else 0)
        per_edge = indices.dtype.itemsize if disk else 0
        blocks = _blocks(indptr, todo, per_target, max(room - least, 1), per_edge)
        spilled = False
        if spill and len(blocks) > 1:  # own rows on disk: fewer passes over the input?
            fewer = _blocks(indptr, todo, per_target - own, max(room - least, 1), per_edge)
            if len(fewer) < len(blocks):
                blocks, per_target, spilled = fewer, per_target - own, True
        largest = max(
            (_block_cost(indptr, todo[a:b], per_target, per_edge) for a, b in blocks), default=0
        )
        size = max(least, min(PULL_CHUNK_BYTES, room - largest)) // per_row
        how = f"each a pass over its sources in chunks of {size} ids" + (
            ", own rows spilled to a scratch file" if spilled else ""
        )
        return _LayerPlan(blocks, size, w, how, None, held_reads, spilled)
    per_target = target_bytes(sl, indices, in_dim)
    blocks = _blocks(indptr, todo, per_target, room, edge_bytes(indices))
    return _LayerPlan(blocks, 0, None, "each a pass over the sources it needs", None, held_reads)


def _block_cost(indptr, targets, per_target: int, per_edge: int) -> int:
    d = np.asarray(indptr[targets + 1], np.int64) - np.asarray(indptr[targets], np.int64)
    return int(d.sum()) * per_edge + len(targets) * per_target


def layer_blocks(
    sl: SumLayer, src, graph, todo, *, pre, budget: int, src_ids=None, normalize=False, spill=False
) -> int:
    """The number of blocks (passes over its input) a layer would take within ``budget``."""
    rows = LayerRows(src, normalize=normalize, threads=1, row_ids=src_ids)
    try:
        return len(_plan_layer(sl, rows, pre, graph, todo, budget, src_ids, spill).blocks)
    finally:
        rows.close()


class _Reads:
    """How a layer reads: source ranges of ``range_rows`` ids and finishing slices of
    ``slice_rows`` targets, each into two reused buffers, by one reading thread."""

    def __init__(self, budget: int, dim: int, width: int) -> None:
        chunk, piece = self._sizes(budget)
        self.range_rows = max(1, chunk // (4 * max(dim, 1)))
        self.slice_rows = max(1, piece // (4 * max(dim, width, 1)))
        self._dim = dim
        self._range_bufs: list | None = None  # made on first use (a sweep's)
        self.slice_bufs = [np.empty((self.slice_rows, dim), np.float32) for _ in range(2)]
        self.held = self.held_bytes(budget, dim, width)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-infer-read")

    @staticmethod
    def _sizes(budget: int) -> tuple[int, int]:
        chunk = min(CHUNK_BYTES, budget // (8 * RANGE_COPIES))  # an eighth for the ranges
        piece = min(SLICE_BYTES, budget // (8 * SLICE_COPIES))  # and one for the slices
        return chunk, piece

    @staticmethod
    def held_bytes(budget: int, dim: int, width: int, ranges: bool = True) -> int:
        """The bytes of the finishing slices and, with ``ranges``, a sweep's ranges."""
        chunk, piece = _Reads._sizes(budget)
        return (RANGE_COPIES * chunk if ranges else 0) + SLICE_COPIES * piece

    @property
    def range_bufs(self) -> list:
        if self._range_bufs is None:
            shape = (self.range_rows, self._dim)
            self._range_bufs = [np.empty(shape, np.float32) for _ in range(2)]
        return self._range_bufs

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def id_dtype(size: int) -> np.dtype:
    """The narrowest of int32 and int64 that holds the ids ``[0, size)``."""
    return np.dtype(np.int32 if size < 2**31 else np.int64)


def nonzero_ids(mark: np.ndarray, step: int = 1 << 22) -> np.ndarray:
    """``np.flatnonzero(mark)`` as :func:`id_dtype` ids, built ``step`` entries at a time
    (no int64 array over all of ``mark`` when int32 holds the ids)."""
    dt = id_dtype(len(mark))
    parts = [(np.flatnonzero(mark[a : a + step]) + a).astype(dt) for a in range(0, len(mark), step)]
    return np.concatenate(parts) if parts else np.empty(0, dt)


def needed_nodes(
    indptr: np.ndarray, indices: np.ndarray, size: int, targets: np.ndarray, num_layers: int
) -> list[np.ndarray]:
    """The nodes each layer must compute (sorted): the last layer its ``targets`` (as given),
    every earlier one the nodes of the next plus their in-neighbours (ids below ``size``, as
    :func:`id_dtype` ids; CSR rows for the ids that have them). A val evaluation thus
    computes the first layer for the targets' neighbourhood only, not for every node."""
    return needed_nodes_lists(indptr, indices, size, targets, num_layers)[0]


def needed_nodes_lists(
    indptr: np.ndarray,
    indices: np.ndarray,
    size: int,
    targets: np.ndarray,
    num_layers: int,
    keep: int = 0,
) -> tuple[list[np.ndarray], Lists | None]:
    """:func:`needed_nodes`, and the in-edges of the last layer's ``targets`` when the pass
    read them from a file-backed ``indices`` and they take at most ``keep`` bytes (a
    :class:`Lists`; else None): the last layer need not read them again."""
    out: list[np.ndarray] = [np.empty(0, np.int64)] * num_layers
    if num_layers == 0:
        return out, None
    out[-1] = np.asarray(targets)
    mark = np.zeros(size, dtype=np.bool_)
    cur = out[-1]
    on_disk = file_of(indices) is not None
    kept = None
    for li in range(num_layers - 2, -1, -1):
        mark[cur] = True
        rows = cur[cur < len(indptr) - 1]
        if not on_disk:
            BK._mark_in_neighbours(indptr, indices, rows, mark)
        elif li == num_layers - 2 and _lists_fit(indptr, indices, rows, keep):
            ptr, src = _in_edges(indptr, indices, np.asarray(rows, np.int64))
            BK._mark_in_neighbours(ptr, src, np.arange(len(rows), dtype=np.int64), mark)
            if len(rows) == len(cur):  # every target has its list
                kept = Lists(np.asarray(rows, np.int64), ptr, src)
        else:  # span by span, read from the file (one pass at most)
            for a, b, lo, part in _spans(indptr, indices, rows):
                local = np.asarray(indptr[rows[a] : rows[b - 1] + 2], np.int64) - lo
                BK._mark_in_neighbours(local, part, rows[a:b] - rows[a], mark)
        cur = nonzero_ids(mark)
        out[li] = cur
    return out, kept


def _lists_fit(indptr, indices, nodes, keep: int) -> bool:
    """Whether the in-edges of ``nodes`` take at most ``keep`` bytes in memory."""
    if keep <= 0 or np.any(np.diff(nodes) <= 0):  # (sorted, unique: as read)
        return False
    edges = int((np.asarray(indptr[nodes + 1], np.int64) - np.asarray(indptr[nodes])).sum())
    return 16 * len(nodes) + edges * indices.itemsize <= keep


def output_width(sl: SumLayer, in_dim: int, nxt=None) -> int:
    """Columns a layer's stored output has: its output, or the next layer's projection
    ``nxt`` of it (stored instead: the next layer reads it as is)."""
    probe = sl.finish(torch.zeros(1, sl.width), torch.zeros(1, in_dim), torch.ones(1, 1))
    return int(probe.shape[1]) if nxt is None else width_of(nxt, int(probe.shape[1]))


@torch.no_grad()
def blocked_layer(
    sl: SumLayer,
    src,
    graph: tuple,
    todo: np.ndarray,
    *,
    out: np.ndarray | None = None,
    on_output: Callable[[np.ndarray, np.ndarray], None] | None = None,
    pre=None,
    nxt=None,
    budget: int,
    normalize: bool = False,
    threads: int = 8,
    progress_bar=None,
    src_ids: np.ndarray | None = None,
    compact: bool = False,
    spill: Callable[[int, int, np.dtype], np.ndarray] | None = None,
    keep_width: int = 0,
    lists: Lists | None = None,
) -> np.ndarray | None:
    """One layer for the targets ``todo`` (sorted, unique) from the rows of ``src`` (anything
    :class:`LayerRows` reads): ``graph = (indptr, indices, deg)`` with ``deg`` a float32
    tensor of full in-degrees over ``src``'s rows; ``pre`` projects source rows first (the
    first layer's projection), ``nxt`` the output before it is stored. Outputs go to rows
    ``todo`` of ``out`` (positioned writes; with ``compact``, to rows ``0..len(todo)``: ``out``
    holds the outputs of ``todo`` in order) or to ``on_output(positions in todo, rows)``.
    ``src_ids``: the sorted ids whose rows ``src`` holds in order (the compact output of the
    layer before); None: row ``i`` is id ``i``. ``spill(rows, cols, dtype)``: a file-backed
    scratch array, for a chunked pull's own rows when keeping them would cost a block (None:
    always kept in memory). ``keep_width`` (with ``out`` None): the outputs, ``keep_width``
    columns in ``todo``'s order, are kept in memory and returned; a pull from memory in one
    block writes them over its own accumulators (:func:`_packed`: no second array's pages
    faulted in). ``lists``: in-edges of ``todo`` already in memory (:class:`Lists`: not
    read from the file again)."""
    rows = LayerRows(src, normalize=normalize, threads=threads, row_ids=src_ids)
    plan = _plan_layer(sl, rows, pre, graph, todo, budget, src_ids, spill is not None)
    blocks, chunks, how, w = plan.blocks, None, plan.how, plan.weights
    acc = None  # a one-block pull's accumulators, when the kept output is packed into them
    if keep_width:
        compact = True
        if plan.held is not None and len(blocks) == 1 and keep_width <= sl.width:
            acc = huge_zeros((len(todo), sl.width), np.float32)
            out = _packed(acc, keep_width)
        else:
            out = huge_empty((len(todo), keep_width), np.float32)
    reads = _Reads(budget, rows.dim, max(width_of(pre, rows.dim), sl.width))
    if plan.chunk_rows:
        chunks = _Chunks(plan.chunk_rows, rows.dim, _chunk_code(rows))
    log.info(
        "layer of width %d: %d targets in %d block(s) of at most %d, %s (%.0f MiB of working "
        "memory, %.0f MiB of it read buffers)",
        sl.width,
        len(todo),
        len(blocks),
        max((b - a for a, b in blocks), default=0),
        how,
        budget / 2**20,
        (plan.read_bytes + (0 if chunks is None else 2 * chunks.bufs[0].nbytes)) / 2**20,
    )
    writer = RowWriter(out) if out is not None else None
    try:
        for a, b in blocks:
            block = np.asarray(todo[a:b], np.int64)
            if plan.held is not None:
                parts = _pull_block(sl, rows, plan.held, graph, block, reads, w, acc, lists)
            elif chunks is not None:
                how_own = spill if plan.spill else None
                parts = _chunked_block(sl, rows, graph, block, reads, chunks, w, how_own, lists)
            else:
                parts = _layer_block(sl, rows, pre, graph, block, reads, lists)
            for i, h in parts:
                at = a + i
                if writer is None:
                    on_output(np.arange(at, at + len(h)), h.numpy())
                else:
                    at_rows = np.arange(at, at + len(h)) if compact else block[i : i + len(h)]
                    h = (nxt(h) if nxt else h).numpy()
                    if acc is not None and np.may_share_memory(h, acc):
                        h = h.copy()  # a finish that returns its accumulators as they are
                    writer.write(at_rows, h)
            if progress_bar is not None:
                progress_bar.update(b - a)
    finally:
        reads.close()
        rows.close()
        if writer is not None:
            writer.close()
    return out if keep_width else None


def _packed(acc: np.ndarray, width: int) -> np.ndarray:
    """The rows of ``width <= acc.shape[1]`` columns packed from the start of ``acc``'s
    memory: output row ``i`` ends at float ``(i + 1) * width``, within accumulator rows ``<=
    i``, so outputs written in order, each slice after its accumulators were finished, never
    overwrite an accumulator still to be read."""
    n = acc.shape[0]
    return acc.reshape(-1)[: n * width].reshape(n, width)


def blocked_layers(
    layers: list[SumLayer],
    inputs,
    indptr: np.ndarray,
    indices: np.ndarray,
    deg: np.ndarray,
    targets: np.ndarray,
    on_output: Callable[[np.ndarray, np.ndarray], None],
    *,
    new_array: Callable[[int, int], np.ndarray],
    budget: int,
    normalize: bool = False,
    threads: int = 8,
    show_progress: bool | None = None,
    spill: Callable[[int, int, np.dtype], np.ndarray] | None = None,
) -> None:
    """Run ``layers`` over the graph ``(indptr, indices)`` (in-neighbour CSR of all
    ``len(deg)`` nodes; ``deg`` float32 full in-degrees) from ``inputs`` (a
    :class:`DiskFeatures`, a memory map or an array). Every layer but the last is computed for
    the nodes the next needs (:func:`needed_nodes`) into ``new_array(rows, cols)``, one row
    per such node in id order (not an array over every node: the next layer reads a dense
    file, not the scattered rows of a sparse one); the last for ``targets`` (sorted, unique) only,
    handed to ``on_output(target positions, rows)`` block by block. ``budget``: bytes of
    working memory (accumulators, edges, the rows being read, and a layer's output when it
    fits :data:`KEEP_SHARE` of it: kept in memory instead of a scratch file); ``spill``: as
    :func:`blocked_layer`'s. The last layer's in-edges, read by the needed-nodes pass, are
    kept for it when they take at most :data:`LISTS_SHARE` of ``budget`` (counted in every
    layer's working memory)."""
    n = len(deg)
    graph = (indptr, indices, torch.from_numpy(np.asarray(deg, np.float32)))
    src, norm, pre = inputs, normalize, layers[0].pre if layers else None
    keep = int(budget * LISTS_SHARE) if len(layers) > 1 else 0
    todos, lists = needed_nodes_lists(indptr, indices, n, targets, len(layers), keep)
    budget -= 0 if lists is None else lists.nbytes
    src_ids = None  # the input's rows are the graph's ids; then a layer's compact output
    kept = 0  # bytes of the input held in memory (a layer output kept there)
    for li, sl in enumerate(layers):
        last = li == len(layers) - 1
        todo = todos[li]
        nxt = None if last else layers[li + 1].pre  # stored by this layer, not recomputed
        out, held, keep_width = None, kept, 0
        if not last:  # the rows of todo only, in order: no sparse array over every node
            dim = int(src.dim if isinstance(src, DiskFeatures) else src.shape[1])
            width = output_width(sl, width_of(pre, dim), nxt)
            nbytes = 4 * len(todo) * width
            if _keeps(sl, src, graph, todo, pre, budget, kept, nbytes, src_ids, norm, spill):
                keep_width = width  # kept in memory: the next layer pulls it
                held += nbytes
            else:
                out = new_array(len(todo), width)
        bar = progress(
            total=len(todo), desc=f"inference layer {li}", unit="node", enable=show_progress
        )
        kept_out = blocked_layer(
            sl,
            src,
            graph,
            todo,
            out=out,
            on_output=on_output if last else None,
            pre=pre,
            nxt=nxt,
            budget=max(budget - held, 1),
            normalize=norm,
            threads=threads,
            progress_bar=bar,
            src_ids=src_ids,
            compact=True,
            spill=spill,
            keep_width=keep_width,
            lists=lists if last else None,
        )
        bar.close()
        src, norm, pre, src_ids = kept_out if keep_width else out, False, None, todo
        kept = held - kept  # this layer's output, if in memory; its input goes


def _keeps(sl, src, graph, todo, pre, budget, kept, nbytes, src_ids, normalize, spill) -> bool:
    """Whether a layer keeps its output (``nbytes``) in the working memory: it fits
    :data:`KEEP_SHARE` of it beside the input kept there (``kept``) and the layer still runs
    in one block. A layer that needs several blocks (a pass over its input each) is short
    of memory: what the output would take serves it better as larger chunks (fewer visits
    of every target; docs/measurements.md#pulling-rows-held-in-memory)."""
    if kept + nbytes > budget * KEEP_SHARE:
        return False
    kw = {"pre": pre, "src_ids": src_ids, "normalize": normalize, "spill": spill is not None}
    return layer_blocks(sl, src, graph, todo, budget=max(budget - kept - nbytes, 1), **kw) == 1


def width_of(fn, dim: int) -> int:
    """Columns of ``fn`` applied to ``dim``-column rows (``dim`` when ``fn`` is None)."""
    return dim if fn is None else int(fn(torch.zeros(1, dim)).shape[1])
