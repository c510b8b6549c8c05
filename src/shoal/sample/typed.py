"""``TypedBatch``: a sampled batch of a typed graph as the typed trainer reads it.

Sampling on a typed graph is the one sampler's (:class:`~shoal.sample.sampler.NeighborSampler`
with a schema, :mod:`shoal.sample.relations`: a fanout per relation, blocks labelled with
their edges' relations and their sources' node types). What remains here is the batch form of
the relational models of :mod:`shoal.training.typed` (the untyped batch, each node's type and
each block's relations side by side), until that trainer reads labelled blocks too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from shoal.graph.blocks import MiniBatch

__all__ = ["TypedBatch"]


@dataclass
class TypedBatch:
    """A sampled batch of a typed graph: the untyped ``batch``, each node's type index
    (``node_type``, ``(len(n_id),)`` int64) and each block's ``(E,)`` int64 relations."""

    batch: MiniBatch
    node_type: torch.Tensor
    edge_types: list[torch.Tensor]

    @property
    def n_id(self) -> np.ndarray:
        """Global ids of the batch's nodes, seeds first (int64)."""
        return self.batch.n_id

    @property
    def blocks(self) -> list:
        return self.batch.blocks
