"""GNN models working on sampled blocks and on full graphs, and a registry by name.

Models know nothing of partitions: distributed engines wrap them from outside.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from shoal.nn.base import BlockGNN
from shoal.nn.gat import GAT
from shoal.nn.gcn import GCN
from shoal.nn.gin import GIN
from shoal.nn.relational import RGAT, RGCN
from shoal.nn.sage import GraphSAGE
from shoal.nn.sgc import SGC

__all__ = [
    "GAT",
    "GCN",
    "GIN",
    "MODELS",
    "RGAT",
    "RGCN",
    "SGC",
    "TYPED_MODELS",
    "BlockGNN",
    "GraphSAGE",
    "build_model",
]

#: Model names accepted by ``--model`` and :func:`build_model`.
MODELS: dict[str, type[nn.Module]] = {
    "sage": GraphSAGE,
    "gcn": GCN,
    "gat": GAT,
    "gin": GIN,
    "sgc": SGC,
}
#: Relational models, for typed graphs only (``--model``; :mod:`shoal.nn.relational`, trained
#: by the trainer and every engine on a typed graph).
TYPED_MODELS: dict[str, type[nn.Module]] = {"rgcn": RGCN, "rgat": RGAT}


def build_model(
    name: str,
    *,
    in_dim: int,
    hidden: int,
    out_dim: int,
    num_layers: int,
    dropout: float,
    **extra: Any,
) -> nn.Module:
    """Instantiate a registered model by name; ``extra`` goes to its constructor (e.g. heads)."""
    cls = MODELS.get(name)
    if name in TYPED_MODELS:
        from shoal.errors import ShoalInputError

        raise ShoalInputError(
            f"--model {name} is a relational model: it trains on a typed graph (node types, "
            "relations), in one process for now",
            fix="pass --graph with a typed graph directory, or choose " + ", ".join(sorted(MODELS)),
        )
    if cls is None:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}")
    return cls(
        in_dim=in_dim,
        hidden=hidden,
        out_dim=out_dim,
        num_layers=num_layers,
        dropout=dropout,
        **extra,
    )
