"""The base of shoal's neighbour samplers: fanouts, the hop loop and the blocks, written once.

Both samplers implement the layer-wise node-wise sampling of GraphSAGE (W. Hamilton, R. Ying,
J. Leskovec, "Inductive representation learning on large graphs", NeurIPS 2017, Algorithm 2,
lines 1-7): starting from the seeds, sample a fixed number of in-neighbours per frontier node,
hop by hop, without replacement. They differ only in where a hop's neighbours come from:

- :class:`shoal.sample.sampler.NeighborSampler`: a CSR in memory or read from disk;
- :class:`shoal.distributed.sampler.DistNeighborSampler`: each frontier node sampled by the
  rank owning it (DistDGL, Zheng et al., IA3 2020, Section 3.2).

:class:`BlockSampler` holds the rest: the fanouts (validated once, :func:`parse_fanouts`), the
batch's id map and id buffer, the random stream of every hop (``_kernels._stream_key(seed,
hop)``), the relabelling of each hop's picked neighbours into batch-local ids (new nodes
appended in order of first appearance) and the assembly of the :class:`MiniBatch`: ``n_id``
the global ids, seeds first; one :class:`Block` per layer, input layer (the last hop) first,
whose destination nodes are the first ``num_dst`` of its source nodes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from shoal.graph.blocks import Block, MiniBatch
from shoal.sample import _kernels as K

__all__ = [
    "ID_MAPS",
    "BlockSampler",
    "DenseIdMap",
    "HashedIdMap",
    "HopEdges",
    "assemble_blocks",
    "hop_rowptr",
    "parse_fanouts",
]

#: the id maps of :class:`BlockSampler`
ID_MAPS = ("dense", "hashed")

# one hop's sampled edges: (edge_index (2, m) batch-local [src; dst], rowptr (n_dst + 1,),
# number of source nodes, number of destination nodes)
HopEdges = tuple[np.ndarray, np.ndarray, int, int]


def parse_fanouts(value: str | Sequence[int]) -> tuple[int, ...]:
    """``"15,10,5"`` or ``[15, 10, 5]`` -> ``(15, 10, 5)``; -1 (or ``"all"``) = all neighbours."""
    if isinstance(value, str):
        try:
            items = [
                -1 if v.lower() == "all" else int(v)
                for v in value.replace(" ", "").split(",")
                if v != ""
            ]
        except ValueError:
            raise ValueError(f"fanouts must be comma-separated integers, got {value!r}") from None
    else:
        items = [int(v) for v in value]
    if not items:
        raise ValueError("fanouts must name at least one layer")
    for f in items:
        if f == 0 or f < -1:
            raise ValueError(f"each fanout must be a positive integer or -1 (all), got {f}")
    return tuple(items)


def assemble_blocks(
    hops: Sequence[HopEdges],
    n_id: np.ndarray,
    degrees: np.ndarray,
    num_seeds: int,
    of_batch: bool = False,
) -> MiniBatch:
    """The :class:`MiniBatch` of sampled ``hops`` (hop 1 first): blocks in layer order (the
    last hop is the input layer), each with the full in-degrees of its source nodes
    (``degrees`` of every node, or of ``n_id``'s nodes with ``of_batch``)."""
    deg = torch.from_numpy(degrees if of_batch else degrees[n_id])
    blocks = [
        Block(torch.from_numpy(ei), n_src, n_dst, torch.from_numpy(rp), deg[:n_src])
        for ei, rp, n_src, n_dst in reversed(hops)
    ]
    return MiniBatch(n_id=n_id, blocks=blocks, num_seeds=num_seeds)


def hop_rowptr(counts: np.ndarray, n: int) -> np.ndarray:
    """``(n + 1,)`` int64 offsets of rows with ``counts[:n]`` entries each."""
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts[:n], out=rowptr[1:])
    return rowptr


class DenseIdMap:
    """The batch's global -> local ids as an array over the id space (-1: not in the batch),
    cleared after each batch: ``O(num_nodes)``, one lookup per id."""

    def __init__(self, num_nodes: int) -> None:
        self.g2l = np.full(num_nodes, -1, dtype=np.int32 if num_nodes < 2**31 else np.int64)

    def seed(self, seeds: np.ndarray, nodes: np.ndarray) -> int:
        return int(K._seed_ids(seeds, self.g2l, nodes))

    def relabel(self, picked, m: int, nodes, n: int, col) -> int:
        return int(K._relabel(picked, m, self.g2l, nodes, n, col))

    def reset(self, nodes: np.ndarray, n: int) -> None:
        K._reset(self.g2l, nodes, n)


class HashedIdMap:
    """The batch's global -> local ids in an open-addressing hash table sized to the batch
    (a power of two at least twice the ids it may hold, grown and rehashed as a hop adds
    ids): ``O(batch)`` memory, the same local ids as :class:`DenseIdMap`."""

    def __init__(self) -> None:
        self._alloc(1 << 12)

    def _alloc(self, size: int) -> None:
        self.keys = np.full(size, -1, np.int64)
        self.vals = np.empty(size, np.int64)
        self.shift = np.uint64(64 - (size.bit_length() - 1))

    def _fit(self, count: int, nodes: np.ndarray, n: int) -> None:
        """Room for ``count`` ids in all; the ``n`` ids of ``nodes`` so far kept."""
        if 2 * count <= self.keys.shape[0]:
            return
        size = self.keys.shape[0]
        while size < 2 * count:
            size *= 2
        self._alloc(size)
        K._h_insert_all(nodes, n, self.keys, self.vals, self.shift)

    def seed(self, seeds: np.ndarray, nodes: np.ndarray) -> int:
        self._fit(len(seeds), nodes, 0)
        dup = int(K._h_seed_ids(seeds, self.keys, self.vals, self.shift, nodes))
        if dup >= 0:
            self.keys[:] = -1
        return dup

    def relabel(self, picked, m: int, nodes, n: int, col) -> int:
        self._fit(n + m, nodes, n)
        return int(K._h_relabel(picked, m, self.keys, self.vals, self.shift, nodes, n, col))

    def reset(self, nodes: np.ndarray, n: int) -> None:
        self.keys[:] = -1


class BlockSampler(ABC):
    """A neighbour sampler producing blocks; a subclass supplies one hop's draws.

    Args:
        fanouts: neighbours sampled per hop, hop 1 (the seeds' neighbours, i.e. the *last*
            GNN layer) first, as in PyG's ``num_neighbors``; -1 takes all neighbours. A
            string (``"15,10"``) or a sequence; checked here, once (:func:`parse_fanouts`).
        num_nodes: size of the global id space.
        id_map: the batch's map from global to local ids: ``"dense"`` (default; an array
            over the id space, ``O(num_nodes)``: 4 bytes per node) or ``"hashed"`` (a hash
            table sized to the batch, ``O(batch)``: a distributed sampler's id space is the
            whole graph's). Both give the same local ids.

    A subclass sets :attr:`degrees` (``(num_nodes,)`` float32 full in-degrees, for
    degree-normalised layers) and implements :meth:`_draw_hop`; its ``sample`` prepares its
    inputs and calls :meth:`_sample_hops`. Buffers are kept between calls: a sampler is not
    safe to share between threads.
    """

    degrees: np.ndarray

    def __init__(
        self, fanouts: Sequence[int] | str, num_nodes: int, *, id_map: str = "dense"
    ) -> None:
        self.fanouts = parse_fanouts(fanouts)
        self.num_nodes = int(num_nodes)
        # the batch's ids (grown) and the map id -> local id of the batch being sampled
        self._nodes = np.empty(1024, dtype=np.int64)
        self._col = np.empty(0, dtype=np.int64)
        if id_map not in ID_MAPS:
            raise ValueError(f"id_map must be one of {ID_MAPS}, got {id_map!r}")
        self._ids = DenseIdMap(num_nodes) if id_map == "dense" else HashedIdMap()
        self._hop = 0  # the hop being drawn (a typed sampler's fanouts differ per hop)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def _after_relabel(self, col: np.ndarray, m: int, n_new: int) -> None:
        """Called after a hop's ``m`` picks got the local ids ``col[:m]`` (the batch now has
        ``n_new`` nodes): a subclass notes what its draw learnt of them (default: nothing)."""
        return None

    def _degrees_of(self, n_id: np.ndarray) -> np.ndarray:
        """float32 full in-degrees of the batch's nodes ``n_id`` (a subclass whose degrees are
        not all at hand overrides it; called once per batch, on every rank)."""
        return np.asarray(self.degrees[n_id], np.float32)

    def _grow(self, name: str, n: int) -> np.ndarray:
        """The int64 buffer ``self.<name>``, reallocated (contents dropped) to hold ``n``."""
        buf = getattr(self, name)
        if buf.shape[0] < n:
            buf = np.empty(max(n, int(buf.shape[0] * 1.5)), dtype=np.int64)
            setattr(self, name, buf)
        return buf

    def _room(self, k: int) -> None:
        """Grow the batch's id buffer to hold ``k`` ids (kernels do not check bounds)."""
        if self._nodes.shape[0] < k:
            grown = np.empty(max(k, 2 * self._nodes.shape[0]), dtype=np.int64)
            grown[: self._nodes.shape[0]] = self._nodes
            self._nodes = grown

    @abstractmethod
    def _draw_hop(
        self, n: int, fanout: int, key: np.uint64, exclude: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample the in-neighbours of the frontier ``self._nodes[:n]`` (global ids).

        ``key``: the hop's random stream; ``exclude``: what the subclass's ``sample`` passed
        to :meth:`_sample_hops`. Returns ``(rowptr, picked, dst)``: ``rowptr`` ``(n + 1,)``
        int64, frontier node ``i``'s neighbours are ``picked[rowptr[i]:rowptr[i + 1]]``
        (global ids) and ``dst[rowptr[i]:rowptr[i + 1]] == i``; ``picked`` and ``dst`` are
        int64 and may be longer than ``rowptr[-1]`` (reused buffers)."""

    def _sample_hops(
        self, seeds: np.ndarray, fanouts: Sequence[int], seed: int, exclude: Any = None
    ) -> MiniBatch:
        """The blocks of ``seeds`` (int64, unique ids), one hop per fanout (module docstring):
        hop ``h`` draws with the stream ``_stream_key(seed, h)``; its picked neighbours get
        batch-local ids (:func:`_kernels._relabel`), the id map is cleared after the batch."""
        if seeds.size and (seeds.min() < 0 or seeds.max() >= self.num_nodes):
            bad = int(seeds[(seeds < 0) | (seeds >= self.num_nodes)][0])
            raise ValueError(f"seed node {bad} is out of range [0, {self.num_nodes})")
        self._room(len(seeds))
        ids = self._ids
        dup = ids.seed(seeds, self._nodes)
        if dup >= 0:
            raise ValueError(f"seeds must be unique; node {int(seeds[dup])} appears twice")
        n = seeds.shape[0]
        hops: list[HopEdges] = []
        try:
            for hop, f in enumerate(fanouts):
                self._hop = hop
                key = np.uint64(K._stream_key(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), np.uint64(hop)))
                rowptr, picked, dst = self._draw_hop(n, f, key, exclude)
                m = int(rowptr[-1])
                col = self._grow("_col", m)
                self._room(n + m)
                n_new = ids.relabel(picked, m, self._nodes, n, col)
                self._after_relabel(col, m, n_new)
                hops.append((np.stack([col[:m], dst[:m]]), rowptr, n_new, n))
                n = n_new
            n_id = self._nodes[:n].copy()
        finally:
            ids.reset(self._nodes, n)
        return assemble_blocks(hops, n_id, self._degrees_of(n_id), int(seeds.shape[0]), True)
