"""Model factories for the --model-factory tests (importable as tests.loader.factories)."""

from __future__ import annotations

from torch_geometric.nn.models import GraphSAGE


def pyg_sage(*, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
    return GraphSAGE(in_dim, hidden, num_layers=num_layers, out_channels=out_dim, dropout=dropout)


def not_a_module(**_):
    return 42
