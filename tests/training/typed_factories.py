"""Heterogeneous model factories for ``--model-factory`` tests (imported by name)."""

from __future__ import annotations

import torch


def sage_hetero(*, metadata, target, in_dim, hidden, out_dim, num_layers, dropout):
    """PyG's GraphSAGE made heterogeneous by ``to_hetero`` (one SAGEConv per relation,
    summed per destination type)."""
    from torch_geometric.nn import SAGEConv, to_hetero

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
            self.convs = torch.nn.ModuleList(
                SAGEConv(dims[i], dims[i + 1]) for i in range(num_layers)
            )
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = self.drop(x.relu())
            return x

    return to_hetero(Net(), metadata, aggr="sum")


def not_a_module(**_):
    return 3
