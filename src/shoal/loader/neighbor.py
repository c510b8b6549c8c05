"""``NeighborLoader``: mini-batches as ``torch_geometric.data.Data``, the way PyG's
``NeighborLoader`` yields them, drawn by shoal's sampler from a graph directory (features read
through the budgeted store: cached hot rows plus planned direct reads, never the page cache)
or from one part of a store.

Each batch is a ``Data`` with

- ``x``: input rows of ``n_id``; ``y``: labels of ``n_id`` (-1: unlabelled or unknown);
- ``n_id``: global ids (a store part: the store's ids), the ``batch_size`` seeds first, then
  each hop's new nodes in order; ``input_id``: the seeds' positions in ``input_nodes``;
- ``edge_index``: ``(2, E)`` local ids, row 0 the sampled neighbour (message source), row 1
  the node it was sampled for, hop 1's edges first;
- ``num_sampled_nodes`` (per hop, seeds first) and ``num_sampled_edges`` (per hop), so
  ``torch_geometric.utils.trim_to_layer`` and ``model(x, edge_index, num_sampled_nodes_per_hop=...,
  num_sampled_edges_per_hop=...)`` work as with PyG's loader.

Any module called as ``model(x, edge_index)`` (e.g. ``torch_geometric.nn.models.GraphSAGE``)
trains on these batches in a plain loop; the loss is taken on the first ``batch_size`` rows.
Shuffling and sampling depend only on ``(seed, epoch, step)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from shoal.data.format import GraphDir
from shoal.graph.blocks import MiniBatch
from shoal.sample.features import PartGatherer
from shoal.sample.sampler import NeighborSampler, parse_fanouts
from shoal.store.reader import Partition
from shoal.training.batches import batch_seed
from shoal.training.data import TrainData, open_features

__all__ = ["NeighborLoader", "SeedBatches", "to_pyg"]


def to_pyg(mb: MiniBatch, x: torch.Tensor, y: torch.Tensor, n_id: np.ndarray) -> Any:
    """A shoal :class:`MiniBatch` (blocks input layer first) as PyG's ``Data`` (module
    docstring); ``n_id`` replaces the batch's local id space by the ids to report."""
    from torch_geometric.data import Data

    hops = list(reversed(mb.blocks))  # hop 1 (the seeds' neighbours) first
    edge_index = torch.cat([b.edge_index for b in hops], dim=1) if hops else torch.empty(2, 0)
    nodes = [mb.num_seeds] + [b.num_src - b.num_dst for b in hops]
    return Data(
        x=x,
        y=y,
        edge_index=edge_index.long(),
        n_id=torch.from_numpy(n_id),
        batch_size=mb.num_seeds,
        num_sampled_nodes=nodes,
        num_sampled_edges=[int(b.edge_index.shape[1]) for b in hops],
    )


class SeedBatches:
    """Epochs of seed batches: ``seeds`` cut into ``batch_size`` pieces, reshuffled every
    epoch when ``shuffle`` (the order and each batch's sampling seed depend only on
    ``(seed, epoch, step)``); a subclass sets those attributes and ``epoch = 0``, and builds
    a batch in ``batch(positions, seed)``."""

    seeds: np.ndarray
    batch_size: int
    shuffle: bool
    seed: int
    epoch: int

    def batch(self, positions: np.ndarray, seed: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return math.ceil(len(self.seeds) / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        order = (
            np.random.default_rng([self.seed, epoch]).permutation(len(self.seeds))
            if self.shuffle
            else np.arange(len(self.seeds))
        )
        for step in range(len(self)):
            pos = order[step * self.batch_size : (step + 1) * self.batch_size]
            yield self.batch(pos, batch_seed(self.seed, epoch, step))


class NeighborLoader(SeedBatches):
    """PyG-style neighbour-sampled mini-batches (module docstring).

    Args:
        source: a graph directory (path or :class:`GraphDir`) or a store
            :class:`~shoal.store.reader.Partition` (its core nodes' full in-neighbourhoods,
            halo rows from the part: build the store with ``--halo-features``).
        num_neighbors: neighbours per hop, hop 1 first (PyG's order; -1 = all).
        input_nodes: seeds: a split name (``"train"``, default), or an array of ids (the
            graph's ids; a part's local ids).
        batch_size: seeds per batch (default 512); shuffle: reshuffle every epoch (default
            true); seed: shuffling and sampling seed (default 0).
        memory: feature-store budget in bytes for a graph directory (default: the machine's
            or the cgroup's limit, as ``shoal train``).
        normalize_features: row-normalise rows when read (default false).
    """

    def __init__(
        self,
        source: str | os.PathLike | GraphDir | Partition,
        num_neighbors: Sequence[int] | str,
        *,
        input_nodes: str | np.ndarray = "train",
        batch_size: int = 512,
        shuffle: bool = True,
        seed: int = 0,
        memory: int | None = None,
        normalize_features: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.fanouts = parse_fanouts(num_neighbors)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.epoch = 0
        if isinstance(source, Partition):
            self._open_part(source, input_nodes, normalize_features)
        else:
            self._open_graph(source, input_nodes, memory, normalize_features)

    def _open_graph(self, source, input_nodes, memory, normalize) -> None:
        data = TrainData.from_graph_dir(source)
        self.features = open_features(
            data,
            memory=memory,
            fanouts=self.fanouts,
            batch_size=self.batch_size,
            normalize=normalize,
        ).features
        self.sampler = NeighborSampler(
            data.indptr, data.indices, self.fanouts, num_nodes=data.num_nodes
        )
        self.labels = np.asarray(data.labels)
        self.seeds = _seeds(input_nodes, lambda s: getattr(data, f"{s}_idx"))
        self.global_ids = None

    def _open_part(self, part: Partition, input_nodes, normalize) -> None:
        self.features = PartGatherer(part, normalize=normalize)
        self.sampler = NeighborSampler(
            part.indptr, part.indices, self.fanouts, num_nodes=part.num_nodes
        )
        lab = np.full(part.num_nodes, -1, dtype=np.int64)
        if part.labels is not None:
            lab[: len(part.labels)] = np.asarray(part.labels)
        self.labels = lab
        self.seeds = _seeds(input_nodes, lambda s: np.flatnonzero(np.asarray(part.mask(s))))
        self.global_ids = part.local_to_global(np.arange(part.num_nodes))

    def batch(self, positions: np.ndarray, seed: int) -> Any:
        """The ``Data`` of the seeds at ``positions`` of ``input_nodes``."""
        mb = self.sampler.sample(self.seeds[positions], seed)
        x = self.features.gather(mb.n_id).clone()  # the store reuses its buffer
        y = torch.from_numpy(self.labels[mb.n_id].astype(np.int64))
        ids = mb.n_id if self.global_ids is None else self.global_ids[mb.n_id]
        d = to_pyg(mb, x, y, np.asarray(ids, dtype=np.int64))
        d.input_id = torch.from_numpy(np.asarray(positions, dtype=np.int64))
        return d


def _seeds(input_nodes: str | np.ndarray, split) -> np.ndarray:
    if isinstance(input_nodes, str):
        if input_nodes not in ("train", "val", "test"):
            raise ValueError(f"input_nodes must be train, val, test or ids, got {input_nodes!r}")
        s = split(input_nodes)
        if s is None or len(s) == 0:
            raise ValueError(f"no {input_nodes!r} nodes to load")
        return np.asarray(s, dtype=np.int64)
    return np.asarray(input_nodes, dtype=np.int64)
