"""Uniform neighbour sampling on an in-neighbour CSR (:class:`NeighborSampler`).

Row ``v`` of ``(indptr, indices)`` lists the nodes whose messages ``v`` receives (PyG's
``source -> target`` convention): ``GraphDir.csr("in")`` for a graph directory, or a store
part's local CSR (core nodes with their full in-neighbourhoods; ids beyond the CSR rows, e.g.
halo nodes, have no neighbours). The sampler supplies one hop's draws from that CSR; the hop
loop (GraphSAGE's Algorithm 2), the relabelling and the blocks are
:class:`shoal.sample.base.BlockSampler`'s: a model runs ``x = layer_l((x, x[:num_dst]),
block_l)`` from the gathered features ``x = X[n_id]``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import MiniBatch
from shoal.rows.blockcache import BlockCache
from shoal.rows.direct import load_array
from shoal.rows.opener import open_rows
from shoal.sample import _exclude_kernels as KX
from shoal.sample import _kernels as K
from shoal.sample.base import BlockSampler, hop_rowptr, parse_fanouts
from shoal.sample.relations import RelationDraws
from shoal.utils.arrays import unique_sorted

__all__ = [
    "GROUP_ENTRY_BYTES",
    "DrawnEntries",
    "DrawnMarks",
    "GroupReads",
    "HeldLists",
    "HELD_LATER_HOPS",
    "NeighborSampler",
    "NotedPositions",
    "draws_per_seed",
    "group_batches",
    "parse_fanouts",
]

_NO_INDICES = np.empty(0, dtype=np.int64)  # the kernels' indices when only positions are drawn
#: memory per drawn entry of a group of batches sampled together from a structure on disk
#: (:meth:`NeighborSampler.sample_group`): its position as drawn and in the hop's sorted set
#: (8 B each) and the entry read (up to 8 B); what :meth:`NeighborSampler.group_size` divides
#: the group's budget by
GROUP_ENTRY_BYTES = 24
#: drawn positions per bucket of :class:`DrawnEntries`'s directory, on average (default 16)
DRAWN_BUCKET = 16


@dataclass
class GroupReads:
    """What :meth:`NeighborSampler.sample_group` read: ``passes`` (one per hop of each group
    of batches: one sorted, coalesced read of the entries the group's batches drew at that
    hop), their ``bytes`` and the ``largest`` pass's bytes (never more than the file of
    ``indices``: the positions of a pass are distinct and sorted, each page read once)."""

    passes: int = 0
    bytes: int = 0
    largest: int = 0


class DrawnEntries:
    """The entries of ``indices`` one hop of a group drew: sorted distinct positions and the
    entries there, read from disk in one pass.

    :meth:`take` finds each drawn position through a directory of buckets of
    :data:`DRAWN_BUCKET` positions on average (half a byte an entry): a binary search over
    millions of positions misses the cache at most of its levels, and a group's batches look
    up every entry they drew (docs/measurements.md, "Sampling ahead from lists on disk")."""

    def __init__(self, pos: np.ndarray, values: np.ndarray) -> None:
        self.pos = np.ascontiguousarray(pos, np.int64)
        self.values = values
        top = int(self.pos[-1]) if len(self.pos) else 0
        buckets = max(1, len(self.pos) // DRAWN_BUCKET)
        self.shift = max(0, (top // buckets).bit_length())
        edges = np.arange((top >> self.shift) + 2, dtype=np.int64) << self.shift
        self.starts = np.searchsorted(self.pos, edges)

    def take(self, picked: np.ndarray) -> np.ndarray:
        """The entries at the positions ``picked`` (each one of those read)."""
        picked = np.ascontiguousarray(picked, np.int64)
        out = np.empty(len(picked), self.values.dtype)
        if not len(picked):
            return out
        if picked.min() < 0 or picked.max() > (int(self.pos[-1]) if len(self.pos) else -1):
            raise ValueError("a drawn position outside those the group read")
        missing = K._take_drawn(self.pos, self.starts, self.shift, self.values, picked, out)
        if missing:
            raise ValueError(f"{missing} drawn positions were not among those the group read")
        return out


#: a hop past the first of a group of batches looks its drawn positions up among the held
#: rows (:class:`HeldLists`) only when those hold at least this share of all the entries
#: (default 1/2); below it the hop's pass reads every position it drew, the held rows' too
#: (the same entries): the training seeds' lists at papers100M's split, 1% of the nodes,
#: save the pass almost nothing, while looking up every entry a later hop draws costs a
#: search each (docs/measurements.md, "The start's sampling")
HELD_LATER_HOPS = 0.5


class DrawnMarks:
    """The positions of ``indices`` one hop of a group drew, marked in a bitmap of a bit an
    entry of ``indices``, then the entries there, read in one sorted pass: for a group that
    draws more positions than ~2% of the entries (:meth:`pays`), where :class:`DrawnEntries`
    would sort every drawn position, build a directory and search it for every lookup
    (docs/measurements.md, "The start's sampling"). :meth:`take` finds an entry by its
    position's rank among the marked ones: the set bits of the words before it (a count a
    word) and of its own word below it, no search. Memory: :meth:`nbytes`."""

    def __init__(self, entries: int) -> None:
        self.entries = int(entries)
        self.bits = np.zeros(-(-self.entries // 64), np.int64)
        self.before = np.empty(0, np.int64)
        self.values = np.empty(0, np.int64)

    @staticmethod
    def _count_type(entries: int) -> type:
        return np.uint32 if entries < 1 << 32 else np.int64

    @classmethod
    def nbytes(cls, entries: int) -> int:
        """Memory of the marks of a structure of ``entries`` (beside the entries read): a
        bit an entry and a count a 64-bit word (4 bytes; 8 past 2^32 entries)."""
        count = np.dtype(cls._count_type(entries)).itemsize
        return -(-int(entries) // 64) * (8 + count)

    @classmethod
    def pays(cls, entries: int, drawn: int) -> bool:
        """Whether marks take less memory than ``drawn`` positions would (8 bytes each)."""
        return cls.nbytes(entries) <= 8 * int(drawn)

    def add(self, picked: np.ndarray) -> None:
        """Mark the positions ``picked``."""
        picked = np.ascontiguousarray(picked, np.int64)
        if len(picked) and (picked.min() < 0 or picked.max() >= self.entries):
            raise ValueError(f"a drawn position outside the {self.entries} entries")
        K._mark_bits(self.bits, picked)

    def positions(self) -> np.ndarray:
        """The marked positions, sorted (their counts a word kept for :meth:`take`)."""
        self.before = np.empty(len(self.bits), self._count_type(self.entries))
        out = np.empty(K._bit_ranks(self.bits, self.before), np.int64)
        K._bit_positions(self.bits, out)
        return out

    def read(self, values: np.ndarray) -> DrawnMarks:
        """The entries at :meth:`positions`, in their order; returns self."""
        self.values = values
        return self

    def take(self, picked: np.ndarray) -> np.ndarray:
        """The entries at the positions ``picked`` (each one of those marked)."""
        picked = np.ascontiguousarray(picked, np.int64)
        out = np.empty(len(picked), self.values.dtype)
        if not len(picked):
            return out
        if picked.min() < 0 or picked.max() >= self.entries:
            raise ValueError("a drawn position outside those the group read")
        missing = K._take_marked(self.bits, self.before, self.values, picked, out)
        if missing:
            raise ValueError(f"{missing} drawn positions were not among those the group read")
        return out


class NotedPositions:
    """The positions one hop of a group draws from ``indices`` (``entries`` entries), noted
    for the hop's pass: marked (:class:`DrawnMarks`) when that pays for the ``drawn``
    positions expected, else each batch's kept and sorted together once
    (:class:`DrawnEntries`)."""

    def __init__(self, entries: int, drawn: int) -> None:
        self.marks = DrawnMarks(entries) if DrawnMarks.pays(entries, drawn) else None
        self.parts: list[np.ndarray] = []

    def add(self, picked: np.ndarray) -> None:
        """Note the positions ``picked``."""
        if self.marks is not None:
            self.marks.add(picked)
        else:
            self.parts.append(unique_sorted(picked))

    def positions(self) -> np.ndarray:
        """The noted positions, sorted and distinct (int64)."""
        if self.marks is not None:
            return self.marks.positions()
        return unique_sorted(np.concatenate(self.parts)) if self.parts else _NO_INDICES

    def read(self, pos: np.ndarray, values: np.ndarray) -> DrawnEntries | DrawnMarks:
        """The hop's entries: ``values`` at :meth:`positions` ``pos``, in their order."""
        self.parts = []
        return self.marks.read(values) if self.marks is not None else DrawnEntries(pos, values)


class HeldLists:
    """Some rows' neighbour lists held in memory (a structure otherwise on disk): the rows
    every batch starts from (the training seeds, whose lists hop 0 draws from in every batch
    of every epoch), read once in one sorted pass. :meth:`take` resolves the positions of
    ``indices`` that fall inside a held row."""

    #: entries read at once (default 1M): their positions are the reading's only memory
    #: beside the held entries (8 MiB)
    READ_ENTRIES = 1 << 20

    def __init__(self, indptr: np.ndarray, rows: np.ndarray, read, dtype) -> None:
        """``rows``: sorted distinct row ids; ``read(pos, out)``: the entries at the sorted
        positions ``pos`` into ``out`` (``(len(pos), 1)`` of ``dtype``, the entries' type);
        returns the bytes read. Read in one sorted pass, :data:`READ_ENTRIES` at a time."""
        starts = np.asarray(indptr[rows], np.int64)
        ends = np.asarray(indptr[rows + 1], np.int64)
        keep = ends > starts  # rows without entries hold nothing
        self.starts, self.ends = starts[keep], ends[keep]
        lens = self.ends - self.starts
        self.local = np.zeros(len(lens), np.int64)
        np.cumsum(lens[:-1], out=self.local[1:])
        total = int(lens.sum())
        vals = np.empty((total, 1), dtype)
        self.bytes_read = 0
        a = 0
        while a < len(lens):  # rows whose entries make up at most READ_ENTRIES (one at least)
            top = int(self.local[a]) + self.READ_ENTRIES
            b = max(int(np.searchsorted(self.local, top, side="right")), a + 1)
            lo, hi = int(self.local[a]), int(self.local[b - 1] + lens[b - 1])
            pos = np.repeat(self.starts[a:b] - self.local[a:b], lens[a:b])
            pos += np.arange(lo, hi, dtype=np.int64)
            self.bytes_read += int(read(pos, vals[lo:hi]))
            a = b
        self.values = vals[:, 0]
        #: whether a group's later hops look their positions up here (:data:`HELD_LATER_HOPS`)
        self.serves_later_hops = total >= HELD_LATER_HOPS * int(indptr[-1])

    def serves(self, hop: int, in_group: bool) -> bool:
        """Whether hop ``hop``'s positions are looked up here: always alone or at hop 0; at a
        group's later hop only when :attr:`serves_later_hops` (else its pass reads them)."""
        return hop == 0 or not in_group or self.serves_later_hops

    @classmethod
    def nbytes(cls, indptr: np.ndarray, rows: np.ndarray, itemsize: int = 8) -> int:
        """Memory :class:`HeldLists` takes for ``rows`` at most: each entry (``itemsize``
        bytes, at most 8), 24 B of offsets per row, and while they are read the positions of
        :data:`READ_ENTRIES` entries (8 B each)."""
        rows = np.asarray(rows, np.int64)
        lens = np.asarray(indptr[rows + 1], np.int64) - np.asarray(indptr[rows], np.int64)
        entries = int(lens.sum())
        return entries * int(itemsize) + 24 * len(rows) + 8 * min(entries, cls.READ_ENTRIES)

    @property
    def held_bytes(self) -> int:
        return int(self.values.nbytes + self.starts.nbytes + self.ends.nbytes + self.local.nbytes)

    def resolve(self, picked: np.ndarray, read_rest) -> None:
        """Replace the positions ``picked`` by their entries in place: those inside a held
        row from memory, the others by ``read_rest(rest)`` (in place too)."""
        inside, vals, count = self._take(picked)
        if count < len(picked):
            rest = np.ascontiguousarray(picked[~inside])
            read_rest(rest)
            vals[~inside] = rest
        picked[:] = vals

    def take(self, picked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(inside, values)``: which positions ``picked`` fall in a held row, and the
        entries there (0 elsewhere)."""
        inside, vals, _ = self._take(picked)
        return inside, vals

    def _take(self, picked: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`take` and how many fell in a held row."""
        picked = np.ascontiguousarray(picked, np.int64)
        inside = np.empty(len(picked), np.bool_)
        vals = np.empty(len(picked), np.int64)
        args = (self.starts, self.ends, self.local, self.values)
        return inside, vals, int(K._take_held(*args, picked, inside, vals))


class _Group:
    """The state of :meth:`NeighborSampler.sample_group`: per hop, the entries read (hops
    already read) or the positions noted so far (the hop being collected)."""

    def __init__(self) -> None:
        self.drawn: dict[int, DrawnEntries | DrawnMarks] = {}
        self.collecting = -1
        self.noted: NotedPositions | None = None  # the hop being collected


def group_batches(
    fanouts: Sequence[int], group_bytes: int, batch_size: int, *, first_held: bool = False
) -> int:
    """Batches of ``batch_size`` seeds sampled together within ``group_bytes`` (at least 1):
    a batch draws at most ``batch_size`` times the fanouts' products summed over the hops (an
    unbounded hop counted as 64; not hop 0 with ``first_held``: the seeds' lists are held,
    their draws never collected), each entry taking :data:`GROUP_ENTRY_BYTES`."""
    hops = range(1 if first_held else 0, len(fanouts))
    entries = sum(draws_per_seed(fanouts, h) for h in hops)
    return max(1, int(group_bytes) // max(GROUP_ENTRY_BYTES * entries * batch_size, 1))


def draws_per_seed(fanouts: Sequence[int], hop: int) -> int:
    """Entries hop ``hop`` draws at most for each seed: the fanouts' product up to it (an
    unbounded hop counted as 64)."""
    n = 1
    for f in fanouts[: hop + 1]:
        n *= f if f > 0 else 64
    return n


def _as_index_array(a: np.ndarray | torch.Tensor, name: str) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array, got shape {a.shape} {a.dtype}")
    return a


class NeighborSampler(BlockSampler):
    """Uniform neighbour sampler over an in-neighbour CSR, with reused buffers.

    Args:
        indptr: ``(R + 1,)`` row offsets (any integer dtype; memory maps are fine).
        indices: ``(nnz,)`` in-neighbour ids, each ``< num_nodes``.
        fanouts: neighbours sampled per hop (:class:`~shoal.sample.base.BlockSampler`).
        num_nodes: size of the id space (default ``R``). Ids ``>= R`` (e.g. a store part's halo
            nodes) are valid sources with no in-neighbours of their own.
        degrees: full in-degree of every node (default the CSR's row lengths; give it for a
            store part so halo nodes' degrees are known). Used only by degree-normalised layers.
        direct_indices: ``indices`` is a memory map of a file larger than the memory budget:
            each hop draws the *positions* of the sampled neighbours (the same draws), then
            reads just those entries with planned direct reads
            (:class:`~shoal.rows.direct.RowReader`), never through page faults of the map
            (default false). ``indptr`` is indexed as given (``O(V)``: keep it in memory).
        io_threads: concurrent reads of ``indices`` with ``direct_indices`` (default 8).
        neighbor_cache_bytes: with ``direct_indices``, entries are read by blocks through a
            CLOCK cache of this many bytes (:class:`~shoal.rows.blockcache.BlockCache`;
            default 0: no cache, each hop reads the pages of its drawn entries).
        group_bytes: with ``direct_indices``, the memory of a group of batches sampled
            together by :meth:`sample_group` (each hop's entries of the whole group read in
            one sorted pass; default 0: groups of one batch).
        schema: a typed graph's node types and relations (default None: untyped). Each hop
            then draws ``fanouts`` per relation (:mod:`shoal.sample.relations`); over a store
            part's local CSR give ``node_type`` and ``edge_types``.
        relation_fanouts: per relation name, its own per-hop fanouts (default none).
        node_type: ``(num_nodes,)`` node type of every local id (a typed store part: core
            rows, then halo nodes; default None: the schema's id ranges).
        edge_types: ``(nnz,)`` relation of every CSR entry, each row's entries grouped by
            relation (a typed store part's ``edge_types``; needed with ``node_type``).

    ``sample(seeds, seed)`` is deterministic for a ``seed`` whatever the number of numba
    threads; buffers are kept between calls (not safe to share between threads).
    """

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        fanouts: Sequence[int] | str,
        *,
        num_nodes: int | None = None,
        degrees: np.ndarray | None = None,
        direct_indices: bool = False,
        io_threads: int = 8,
        neighbor_cache_bytes: int = 0,
        group_bytes: int = 0,
        schema: HeteroSchema | None = None,
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
        node_type: np.ndarray | None = None,
        edge_types: np.ndarray | None = None,
    ) -> None:
        self.indptr = _as_index_array(indptr, "indptr")
        self.indices = _as_index_array(indices, "indices")
        self._reader = None
        self._blocks: BlockCache | None = None
        self._held: HeldLists | None = None  # rows whose lists are in memory (hold_rows)
        self.group_bytes = int(group_bytes)
        self._local = threading.local()  # the group being sampled, by the thread sampling it
        #: the passes of :meth:`sample_group` over ``indices`` on disk
        self.group_reads = GroupReads()
        #: bytes of ``indices`` read whole by :meth:`lists_in_memory`
        self.loaded_bytes = 0
        if direct_indices:
            mapped = indices if isinstance(indices, np.ndarray) else self.indices
            src = mapped.reshape(-1, 1)
            self._reader = open_rows(src, threads=io_threads) if self.indices.size else None
            if self._reader is None and self.indices.size:
                raise ValueError("direct_indices needs indices memory-mapped from a file")
            if self._reader is not None and neighbor_cache_bytes > 0:
                self._blocks = BlockCache(mapped, neighbor_cache_bytes, threads=io_threads)
        self._on_disk = (self._reader, self._blocks)
        if self.indptr.shape[0] < 1:
            raise ValueError("indptr must have at least one entry")
        rows = self.indptr.shape[0] - 1
        self.num_nodes = rows if num_nodes is None else int(num_nodes)
        if self.num_nodes < rows:
            raise ValueError(f"num_nodes={self.num_nodes} is smaller than the CSR's {rows} rows")
        if int(self.indptr[-1]) != self.indices.shape[0]:
            raise ValueError(
                f"indptr[-1]={int(self.indptr[-1])} does not match len(indices)="
                f"{self.indices.shape[0]}"
            )
        super().__init__(fanouts, self.num_nodes)
        if degrees is None:
            deg = np.zeros(self.num_nodes, dtype=np.float32)
            deg[:rows] = np.diff(self.indptr)
        else:
            deg = np.asarray(degrees, dtype=np.float32)
            if deg.shape != (self.num_nodes,):
                raise ValueError(f"degrees must have shape ({self.num_nodes},), got {deg.shape}")
        self.degrees = deg
        self.relations = (
            None if schema is None else RelationDraws(schema, self.fanouts, relation_fanouts)
        )
        self._node_type = self._edge_types = self._row_type = None
        self._per_relation = False  # this batch drawn per relation
        if node_type is not None:
            if schema is None or edge_types is None:
                raise ValueError("node_type needs a schema and the entries' edge_types")
            self._node_type = np.asarray(node_type, np.int64)
            self._row_type = self._node_type.astype(np.int32)
            self._edge_types = np.asarray(edge_types)
            if self._node_type.shape != (self.num_nodes,):
                raise ValueError(f"node_type must have shape ({self.num_nodes},)")
        for name in ("_counts", "_n_ex", "_picked", "_dst"):  # the hops' buffers (_grow)
            setattr(self, name, np.empty(0, dtype=np.int64))

    def sample(
        self,
        seeds: np.ndarray | torch.Tensor,
        seed: int = 0,
        *,
        fanouts: Sequence[int] | None = None,
        exclude: np.ndarray | torch.Tensor | None = None,
    ) -> MiniBatch:
        """Sample blocks for ``seeds`` (unique ids); ``fanouts`` overrides the sampler's.

        ``exclude``: ``(m, 2)`` edges ``(src, dst)`` that message passing must not use at any
        hop (a link batch's own positive edges and their reverses, DGL's ``exclude``): they
        are removed from the candidates before drawing, so a node still gets ``fanout`` of
        its other in-neighbours. Needs ``indices`` in memory (not ``direct_indices``)."""
        fan = self.fanouts if fanouts is None else parse_fanouts(fanouts)
        rel = self.relations
        # every neighbour of every relation is a whole row: the untyped draw takes it
        whole = fanouts is not None and all(f < 0 for f in fan)
        if rel is not None and rel.per_relation and fanouts is not None and not whole:
            raise ValueError("a typed sampler draws its fanouts per relation: make a sampler")
        self._per_relation = rel is not None and rel.per_relation and not whole
        ex = self._exclusion_keys(exclude)
        s = _as_index_array(seeds, "seeds").astype(np.int64, copy=False)
        mb = self._sample_hops(s, fan, seed, ex)
        if rel is None:
            return mb
        n_id = np.asarray(mb.n_id)
        types = rel.schema.type_of(n_id) if self._node_type is None else self._node_type[n_id]
        return rel.label(mb, types)

    def _draw_hop(
        self, n: int, fanout: int, key: np.uint64, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One hop from the CSR (:meth:`BlockSampler._draw_hop`): count, then draw each
        frontier row's neighbours (``exclude``: sorted keys of edges to skip, or None)."""
        if self._per_relation:
            return self._draw_relations(n, key, exclude)
        counts = self._grow("_counts", n)
        csr = (self.indptr, self.indices, self._nodes, n)
        if exclude is not None:
            n_ex = self._grow("_n_ex", n)
            KX._count_excl(*csr, fanout, exclude, self.num_nodes, counts, n_ex)
        else:
            K._count(self.indptr, self._nodes, n, fanout, counts)
        rowptr = hop_rowptr(counts, n)
        m = int(rowptr[-1])
        picked = self._grow("_picked", m)
        dst = self._grow("_dst", m)
        if exclude is not None:
            KX._fill_excl(*csr, rowptr, key, picked, dst, exclude, self.num_nodes, n_ex)
        elif self._reader is None:
            K._fill(*csr, rowptr, key, picked, dst)
        else:
            K._fill(self.indptr, _NO_INDICES, self._nodes, n, rowptr, key, picked, dst, True)
            self._read_picked(picked, m)
        return rowptr, picked, dst

    def _draw_relations(
        self, n: int, key: np.uint64, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, ...]:
        """One hop of a typed graph, each relation with its own fanout
        (:class:`~shoal.sample.relations.RelationDraws`), the ``exclude`` keys skipped. The
        rows are read where they are: a relation's run is found by binary searches."""
        rel = self.relations
        rel.hop = self._hop
        ex = None if exclude is None else (exclude, np.int64(self.num_nodes))
        counts = self._grow("_counts", n)
        if self._node_type is None:
            rel.count_by_range(self.indptr, self.indices, self._nodes, n, counts, ex)
        else:
            args = (self.indptr, self._edge_types, self._row_type, self._nodes, n)
            rel.count_by_edge_type(*args, counts, ex, self.indices)
        rowptr = hop_rowptr(counts, n)
        m = int(rowptr[-1])
        picked = self._grow("_picked", m)
        dst = self._grow("_dst", m)
        if self._node_type is None:
            args = (self.indptr, self.indices, self._nodes, n)
            rel.fill_by_range(*args, rowptr, key, picked, dst, ex)
        else:
            ix = (self.indptr, self.indices, self._edge_types, self._row_type, self._nodes, n)
            rel.fill_by_edge_type(*ix, rowptr, key, picked, dst, ex)
        return rowptr, picked, dst

    def _exclusion_keys(self, exclude: np.ndarray | torch.Tensor | None) -> np.ndarray | None:
        """Sorted ``dst * num_nodes + src`` keys of the edges to exclude, or None."""
        if exclude is None:
            return None
        e = exclude.numpy() if isinstance(exclude, torch.Tensor) else np.asarray(exclude)
        e = e.astype(np.int64, copy=False).reshape(-1, 2)
        if len(e) == 0:
            return None
        if self._reader is not None or self._blocks is not None:
            raise ValueError(
                "excluding edges needs the in-neighbour CSR in memory; this sampler reads it "
                "from disk (--structure disk): use --structure memory for link prediction"
            )
        if e.min() < 0 or e.max() >= self.num_nodes:
            raise ValueError(f"excluded edge ids must lie in [0, {self.num_nodes})")
        return unique_sorted(e[:, 1] * np.int64(self.num_nodes) + e[:, 0])

    def hold_rows(self, rows: np.ndarray, max_bytes: int) -> bool:
        """Hold the neighbour lists of ``rows`` in memory (:class:`HeldLists`; with
        ``indices`` on disk) when they take at most ``max_bytes``: the draws from them never
        read the disk again (the training seeds' lists: hop 0 of every batch). Returns
        whether they are held."""
        if self._reader is None:
            return False
        rows = np.asarray(rows, np.int64)
        rows = unique_sorted(rows[(rows >= 0) & (rows < self.indptr.shape[0] - 1)])
        if HeldLists.nbytes(self.indptr, rows, self.indices.dtype.itemsize) > max_bytes:
            return False
        self._held = HeldLists(self.indptr, rows, self._reader.read, self.indices.dtype)
        return True

    @property
    def held_bytes(self) -> int:
        """Memory of the lists held by :meth:`hold_rows` (0: none)."""
        return 0 if self._held is None else self._held.held_bytes

    def _read_picked(self, picked: np.ndarray, m: int) -> None:
        """Replace the positions ``picked[:m]`` by the entries of ``indices`` there: those of
        held rows (:meth:`hold_rows`) from memory, the others read from disk in one planned
        pass over their sorted distinct positions (in a group, :meth:`sample_group`: taken
        from the hop's pass, or noted for it). A group's hop past the first takes the held
        rows' positions from its pass too unless they hold most entries
        (:data:`HELD_LATER_HOPS`)."""
        held, in_group = self._held, getattr(self._local, "group", None) is not None
        if m == 0 or held is None or not held.serves(self._hop, in_group):
            self._read_positions(picked, m)
            return
        held.resolve(picked[:m], lambda rest: self._read_positions(rest, len(rest)))

    def _read_positions(self, picked: np.ndarray, m: int) -> None:
        """:meth:`_read_picked` of positions outside the held rows."""
        if m == 0:
            return
        g = getattr(self._local, "group", None)
        if g is not None and self._hop == g.collecting:  # noted for the hop's pass; dropped
            g.noted.add(picked[:m])
            picked[:m] = 0
            return
        if g is not None and self._hop in g.drawn:
            picked[:m] = g.drawn[self._hop].take(picked[:m])
            return
        # (a hop without a pass, hop 0 beside held lists: read like a batch alone)
        if self._blocks is not None:
            picked[:m] = self._blocks.take(picked[:m])
            return
        pos, inv = np.unique(picked[:m], return_inverse=True)
        vals = np.empty((len(pos), 1), dtype=self.indices.dtype)
        self._reader.read(pos, vals)
        picked[:m] = vals[inv, 0]

    @contextlib.contextmanager
    def lists_in_memory(self, max_bytes: int) -> Iterator[bool]:
        """While the block runs, draw from every neighbour list in memory when ``indices`` is
        on disk (:attr:`reads_from_disk`) and takes at most ``max_bytes``: the file is read
        once, sequentially, its page cache dropped as it goes
        (:func:`~shoal.rows.direct.load_array`), and freed when the block ends. Yields
        whether the lists were read (false: nothing changes). For a caller with that much
        memory free for a while, e.g. while epochs are sampled ahead before a feature cache
        is read: one pass over the file instead of a sorted pass per hop and group of
        batches (:meth:`sample_group`). Only the thread sampling meanwhile may use the
        sampler."""
        reader = self._reader
        if reader is None or self.indices.nbytes > int(max_bytes):
            yield False
            return
        saved = (self.indices, self._reader, self._blocks)
        loaded = load_array(self.indices)
        self.loaded_bytes += loaded.nbytes
        self.indices, self._reader, self._blocks = loaded, None, None
        try:
            yield True
        finally:
            self.indices, self._reader, self._blocks = saved
            del loaded

    @property
    def reads_from_disk(self) -> bool:
        """Whether sampled entries are read from ``indices`` on disk (``direct_indices``)."""
        return self._reader is not None

    def group_size(self, batch_size: int) -> int:
        """Batches of ``batch_size`` seeds :meth:`sample_group` takes together within
        :attr:`group_bytes` (at least 1): a batch draws at most ``batch_size`` times the
        fanouts' products summed over the hops (an unbounded hop counted as 64), each entry
        taking :data:`GROUP_ENTRY_BYTES`."""
        return group_batches(
            self.fanouts, self.group_bytes, batch_size, first_held=self._held is not None
        )

    def sample_group(self, batches: Sequence[tuple[np.ndarray, int]]) -> Iterator[MiniBatch]:
        """``sample(seeds, seed)`` of each ``(seeds, seed)`` of ``batches``, in order, the
        same batches; with ``indices`` on disk (:attr:`reads_from_disk`) sampled together
        hop by hop: the positions every batch draws at hop ``h`` (the draws need only
        ``indptr``) are read in one sorted, coalesced pass over ``indices``
        (:class:`~shoal.rows.direct.RowReader`), then each batch is drawn again up to hop
        ``h + 1`` from what was read (the draws are keyed by seed and hop). A group reads
        at most the file once per hop, where sampling its batches one by one reads a page
        per neighbour list drawn, tens of times the file per epoch of a large graph
        (DiskGNN's offline sampling reads the structure in sorted passes too: Liu et al.,
        VLDB 2025, Sec. 3). Counted in :attr:`group_reads`. Untyped draws only (a typed
        graph's batches are sampled one by one). With held lists (:meth:`hold_rows`) hop 0
        has no pass: its entries come from them (any outside them read directly)."""
        if self._reader is None or self._per_relation_draws() or len(batches) < 2:
            for seeds, seed in batches:
                yield self.sample(seeds, seed)
            return
        g = _Group()
        seeds_in = sum(len(seeds) for seeds, _ in batches)
        for hop in range(1 if self._held is not None else 0, self.num_layers):
            drawn = seeds_in * draws_per_seed(self.fanouts, hop)
            g.collecting, g.noted = hop, NotedPositions(self.indices.shape[0], drawn)
            for seeds, seed in batches:
                self._in_group(g, seeds, seed, self.fanouts[: hop + 1])
            pos = g.noted.positions()
            vals = np.empty((len(pos), 1), dtype=self.indices.dtype)
            nbytes = self._reader.read(pos, vals) if len(pos) else 0
            g.drawn[hop], g.noted = g.noted.read(pos, vals[:, 0]), None
            del pos
            r = self.group_reads
            r.passes, r.bytes, r.largest = r.passes + 1, r.bytes + nbytes, max(r.largest, nbytes)
        g.collecting = -1
        for seeds, seed in batches:
            # (the group is set only while its own batch is drawn: a caller may sample other
            # batches between two of its batches, as a reading thread sampling again does)
            yield self._in_group(g, seeds, seed, None)

    def _in_group(self, g: _Group, seeds: np.ndarray, seed: int, fanouts) -> MiniBatch:
        """``sample(seeds, seed, fanouts=fanouts)`` drawing ``indices`` through ``g``."""
        self._local.group = g
        try:
            return self.sample(seeds, seed, fanouts=fanouts)
        finally:
            self._local.group = None

    def _per_relation_draws(self) -> bool:
        rel = self.relations
        return rel is not None and rel.per_relation

    @property
    def structure_bytes_read(self) -> int:
        """Bytes of ``indices`` read from disk so far (``direct_indices``; 0 otherwise): by
        the block cache and by :meth:`sample_group`'s passes."""
        reader, blocks = self._on_disk  # (not those lists_in_memory swaps out)
        loaded = self.loaded_bytes
        if blocks is not None:
            held = self._held.bytes_read if self._held is not None else 0
            return blocks.bytes_read + self.group_reads.bytes + held + loaded
        return (reader.stats.bytes if reader is not None else 0) + loaded

    def close(self) -> None:
        """Close the reader of ``indices`` (``direct_indices``)."""
        reader, blocks = self._on_disk
        if reader is not None:
            reader.close()
        if blocks is not None:
            blocks.close()

    def full(self, nodes: np.ndarray | torch.Tensor) -> MiniBatch:
        """One block holding *all* in-neighbours of ``nodes`` (for layer-wise inference)."""
        return self.sample(nodes, 0, fanouts=(-1,))
