"""SGC (Wu et al., "Simplifying graph convolutional networks", ICML 2019), Eq. 8:
``softmax(S^K X W)`` with ``S`` GCN's normalised adjacency. ``K = num_layers`` propagation
steps, one per block; ``W`` (PyG ``SGConv``'s linear layer) is applied first, which is the same
product (``S^K (X W)``) on fewer columns. No nonlinearity, dropout only on the input."""

from __future__ import annotations

import torch
from torch_geometric.nn import SGConv

from shoal.graph.blocks import Block
from shoal.nn.base import BlockGNN, SumLayer
from shoal.nn.dropout import dropout
from shoal.nn.gcn import gcn_propagate, gcn_sum_layer

__all__ = ["SGC"]


class SGC(BlockGNN):
    """SGC. Args (keyword-only): in_dim, out_dim, num_layers (= K, default 2), dropout
    (default 0.0), hidden (ignored; accepted for a uniform registry)."""

    def __init__(
        self,
        *,
        in_dim: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.0,
        hidden: int | None = None,
    ) -> None:
        super().__init__(num_layers, dropout)
        self.sgc = SGConv(in_dim, out_dim, K=num_layers)

    def layer_forward(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        if layer == 0:
            site = self.dropout_site(0, block, x.shape[0])
            x = self.sgc.lin(dropout(x, self.dropout, self.training, **site))
        return gcn_propagate(x, block)

    def inference_split(self, layer: int):
        if layer == 0:
            return self.sgc.lin, gcn_propagate
        return super().inference_split(layer)

    def sum_layer(self, layer: int) -> SumLayer:
        lin = self.sgc.lin
        if layer == 0:  # project first (S (X W)), no activation anywhere
            return gcn_sum_layer(lin, None, lambda h: h, True, lin.out_channels)
        return gcn_sum_layer(None, None, lambda h: h, False, lin.out_channels)
