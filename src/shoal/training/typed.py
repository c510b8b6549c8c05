"""``TypedModel``: the relational model of the typed engines (per-type inputs, then the
R-GCN or R-GAT layers of :mod:`shoal.nn.hetero`), called ``model(batch, features)``.

Kept only for the typed engines (``shoal.engines.typed``) until they run the relational
models of :mod:`shoal.nn.relational` called ``model(x, blocks)``, as the single-process
:class:`~shoal.training.trainer.Trainer` does on a typed graph (with the featureless types'
embeddings in the model or on disk: :class:`~shoal.training.embedding.TypeTables`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from shoal.nn.hetero import RGAT, RGCN, TypedInput
from shoal.sample.typed import TypedBatch
from shoal.training.config import TrainConfig
from shoal.training.model import typed_factory_model

__all__ = ["TypedModel"]


class TypedModel(nn.Module):
    """Per-type inputs, then the relational layers: ``forward(batch, features)`` with
    ``features[t]`` the rows of the batch's nodes of type ``t`` (batch order), returns the
    seeds' logits."""

    def __init__(
        self, schema, config: TrainConfig, num_classes: int, given: list[bool] | None = None
    ) -> None:
        super().__init__()
        m = config.model
        hidden = int(m.hidden)
        self.schema = schema
        self.input = TypedInput(
            [t.feature_dim for t in schema.node_types],
            [t.count for t in schema.node_types],
            hidden,
            given=given,  # types whose rows come in as features (embedding tables on disk)
        )
        layers, rels = config.num_layers, len(schema.edge_types)
        #: whether the layers can run one at a time over the graph (exact layer-wise
        #: inference); a ``--model-factory`` model runs on sampled batches only
        self.layerwise = not m.factory
        if m.factory:
            self.gnn: nn.Module = typed_factory_model(
                m.factory,
                schema,
                hidden=hidden,
                out_dim=num_classes,
                num_layers=layers,
                dropout=float(m.dropout or 0.0),
            )
        elif m.name == "rgcn":
            self.gnn = RGCN(hidden, hidden, num_classes, rels, num_layers=layers, dropout=m.dropout)
        else:
            heads = int(m.heads or 4)
            self.gnn = RGAT(
                hidden,
                hidden,
                num_classes,
                rels,
                num_layers=layers,
                heads=heads,
                dropout=m.dropout,
            )

    def forward(self, tb: TypedBatch, features: list[torch.Tensor | None]) -> torch.Tensor:
        n_id = np.asarray(tb.n_id)
        local = torch.from_numpy(n_id - self.schema.offsets[tb.node_type.numpy()])
        h = self.input(tb.node_type, local, features)
        if not self.layerwise:
            return self.gnn(h, tb.blocks, tb.edge_types, tb.node_type)
        return self.gnn(h, tb.blocks, tb.edge_types)
