"""``HeteroNeighborLoader``: typed mini-batches as ``torch_geometric.data.HeteroData``, the
way PyG's ``NeighborLoader`` yields them from a ``HeteroData``, drawn by shoal's typed sampler
from a typed graph directory (:mod:`shoal.data.hetero`).

Each batch is a ``HeteroData`` with, per node type ``t`` present in the batch:

- ``x``: the rows of its nodes (read with planned direct reads from ``features/<t>.npy``;
  absent for a type without features); ``n_id``: their ids *within the type*, in batch order;
- for the target type also ``y``, ``batch_size`` (the seeds, which come first) and
  ``input_id`` (the seeds' positions in ``input_nodes``);

and per edge type ``(src, relation, dst)``, ``edge_index``: ``(2, E)`` positions among the
batch's nodes of the source and destination types, hop 1's edges first. A PyG model made with
``to_hetero`` or ``HeteroConv`` trains on these batches in a plain loop, the loss on the
first ``batch_size`` target rows. Sampling draws each hop's fanout per relation
(:class:`~shoal.sample.typed.TypedNeighborSampler`); shuffling and sampling depend only on
``(seed, epoch, step)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.loader.neighbor import SeedBatches
from shoal.sample.typed import TypedBatch, TypedFeatures, TypedNeighborSampler

__all__ = ["HeteroNeighborLoader", "to_hetero_batch"]


def to_hetero_batch(
    tb: TypedBatch, schema, features: Sequence[torch.Tensor | None], labels: np.ndarray
) -> Any:
    """A :class:`TypedBatch` as PyG's ``HeteroData`` (module docstring); ``features[t]``: the
    rows of the batch's nodes of type ``t`` in batch order, ``labels``: global labels."""
    from torch_geometric.data import HeteroData

    n_id = np.asarray(tb.n_id)
    types = tb.node_type.numpy()
    pos = np.empty(len(n_id), np.int64)  # each node's position among its type's nodes
    data = HeteroData()
    for t, nt in enumerate(schema.node_types):
        on = np.flatnonzero(types == t)
        pos[on] = np.arange(len(on))
        if not len(on):
            continue
        store = data[nt.name]
        store.n_id = torch.from_numpy(n_id[on] - nt.offset)
        store.num_nodes = len(on)
        if features[t] is not None:
            store.x = features[t]
        if nt.name == schema.target:
            store.y = torch.from_numpy(np.asarray(labels[n_id[on]], np.int64))
            store.batch_size = tb.batch.num_seeds
    hops = list(reversed(range(len(tb.blocks))))  # hop 1 (the seeds' neighbours) first
    ei = np.concatenate([tb.blocks[h].edge_index.numpy() for h in hops], axis=1)
    et = np.concatenate([tb.edge_types[h].numpy() for h in hops])
    for r, e in enumerate(schema.edge_types):
        on = et == r
        if not on.any():
            continue
        data[e.key].edge_index = torch.from_numpy(np.stack([pos[ei[0, on]], pos[ei[1, on]]]))
    return data


class HeteroNeighborLoader(SeedBatches):
    """PyG-style typed mini-batches from a typed graph directory (module docstring).

    Args:
        source: a typed graph directory (path or :class:`GraphDir`).
        num_neighbors: neighbours per hop *and relation*, hop 1 first (PyG's order; -1: all).
        relation_fanouts: per relation name, its own per-hop fanouts (default none).
        input_nodes: seeds of the target type: a split name (``"train"``, default) or global
            ids.
        batch_size: seeds per batch (default 512); shuffle: reshuffle every epoch (default
            true); seed: shuffling and sampling seed (default 0).
    """

    def __init__(
        self,
        source: str | os.PathLike | GraphDir,
        num_neighbors: Sequence[int] | str,
        *,
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
        input_nodes: str | np.ndarray = "train",
        batch_size: int = 512,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        g = source if isinstance(source, GraphDir) else GraphDir.open(source)
        if g.schema is None:
            raise ShoalInputError(
                "not a typed graph", path=g.path, fix="use shoal.loader.NeighborLoader"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.graph, self.schema = g, g.schema
        csr = g.csr("in")
        self.sampler = TypedNeighborSampler(
            csr.indptr, csr.indices, g.schema, num_neighbors, relation_fanouts=relation_fanouts
        )
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.epoch = 0
        y = g.labels()
        self.labels = np.full(g.num_nodes, -1, np.int64) if y is None else np.asarray(y, np.int64)
        if isinstance(input_nodes, str):
            s = g.split(input_nodes)
            if s is None or len(s) == 0:
                raise ValueError(f"no {input_nodes!r} nodes to load")
            self.seeds = np.array(s, np.int64)
        else:
            self.seeds = np.asarray(input_nodes, np.int64)
        self.features = TypedFeatures(g)

    def batch(self, positions: np.ndarray, seed: int) -> Any:
        """The ``HeteroData`` of the seeds at ``positions`` of ``input_nodes``."""
        tb = self.sampler.sample(self.seeds[positions], seed)
        data = to_hetero_batch(tb, self.schema, self.features.gather(tb), self.labels)
        data[self.schema.target].input_id = torch.from_numpy(np.asarray(positions, np.int64))
        return data

    def close(self) -> None:
        """Close the feature readers."""
        self.features.close()
