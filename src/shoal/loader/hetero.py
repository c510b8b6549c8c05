"""``HeteroNeighborLoader``: typed mini-batches as ``torch_geometric.data.HeteroData``, the
way PyG's ``NeighborLoader`` yields them from a ``HeteroData``, drawn by shoal's sampler from
a typed graph directory (:mod:`shoal.data.hetero`).

Each batch is a ``HeteroData`` with, per node type ``t`` present in the batch:

- ``x``: the rows of its nodes (its ``F_t`` feature columns, read with planned direct reads
  from ``features/<t>.npy``; absent for a type without features); ``n_id``: their ids
  *within the type*, in batch order;
- for the target type also ``y``, ``batch_size`` (the seeds, which come first) and
  ``input_id`` (the seeds' positions in ``input_nodes``);

and per edge type ``(src, relation, dst)``, ``edge_index``: ``(2, E)`` positions among the
batch's nodes of the source and destination types, hop 1's edges first. A PyG model made with
``to_hetero`` or ``HeteroConv`` trains on these batches in a plain loop, the loss on the
first ``batch_size`` target rows. Sampling is the trainer's: the
:class:`~shoal.sample.sampler.NeighborSampler` of a schema draws each hop's fanout per
relation and labels every block's relations (``Block.edge_type``) and node types
(``Block.src_type``); rows come from one :class:`~shoal.rows.typed.TypedRows` source (every
type padded to the widest). Shuffling and sampling depend only on ``(seed, epoch, step)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.graph.blocks import MiniBatch
from shoal.loader.neighbor import SeedBatches
from shoal.rows.typed import TypedRows, open_typed_rows
from shoal.sample.sampler import NeighborSampler

__all__ = ["HeteroNeighborLoader", "to_hetero_batch"]


def to_hetero_batch(
    mb: MiniBatch, schema, x: np.ndarray | None, widths: Sequence[int], labels: np.ndarray
) -> Any:
    """A typed :class:`~shoal.graph.blocks.MiniBatch` (its blocks labelled with ``edge_type``
    and ``src_type``) as PyG's ``HeteroData`` (module docstring); ``x``: the rows of the
    batch's nodes (batch order, padded to the widest type; None: no type has features),
    ``widths``: each type's feature width, ``labels``: global labels."""
    from torch_geometric.data import HeteroData

    if not mb.typed:
        raise ValueError("an untyped batch: sample with NeighborSampler(..., schema=...)")
    n_id = np.asarray(mb.n_id)
    types = mb.node_type.numpy()[: len(n_id)]
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
        if x is not None and widths[t]:
            store.x = torch.from_numpy(np.ascontiguousarray(x[on, : widths[t]]))
        if nt.name == schema.target:
            store.y = torch.from_numpy(np.asarray(labels[n_id[on]], np.int64))
            store.batch_size = mb.num_seeds
    hops = list(reversed(range(len(mb.blocks))))  # hop 1 (the seeds' neighbours) first
    ei = np.concatenate([mb.blocks[h].edge_index.numpy() for h in hops], axis=1)
    et = np.concatenate([mb.blocks[h].edge_type.numpy() for h in hops])
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
        self.sampler = NeighborSampler(
            csr.indptr,
            csr.indices,
            num_neighbors,
            num_nodes=g.num_nodes,
            schema=g.schema,
            relation_fanouts=relation_fanouts,
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
        #: every type's rows padded to the widest (None: no type has features)
        self.rows: TypedRows | None = open_typed_rows(g)
        self.widths = (
            [0] * len(g.schema.node_types) if self.rows is None else self.rows.widths.tolist()
        )

    def _read(self, n_id: np.ndarray) -> np.ndarray | None:
        if self.rows is None:
            return None
        x = np.empty((len(n_id), self.rows.dim), self.rows.dtype)
        order = np.argsort(n_id, kind="stable")
        self.rows.read(np.ascontiguousarray(n_id[order]), x, dest=order)
        return x

    def batch(self, positions: np.ndarray, seed: int) -> Any:
        """The ``HeteroData`` of the seeds at ``positions`` of ``input_nodes``."""
        mb = self.sampler.sample(self.seeds[positions], seed)
        x = self._read(np.asarray(mb.n_id))
        data = to_hetero_batch(mb, self.schema, x, self.widths, self.labels)
        data[self.schema.target].input_id = torch.from_numpy(np.asarray(positions, np.int64))
        return data

    def close(self) -> None:
        """Close the feature readers."""
        if self.rows is not None:
            self.rows.close()
