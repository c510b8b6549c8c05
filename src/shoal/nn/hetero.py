"""Relational GNNs over sampled typed blocks: R-GCN and R-GAT, with per-type inputs.

A typed batch (:class:`~shoal.sample.typed.TypedBatch`) is untyped blocks over batch-local
ids plus each edge's relation and each node's type. The models here are single-process
PyTorch built from PyTorch Geometric layers and know nothing about partitions:

- :class:`TypedInput`: each node type's input representation: a linear map of its features
  (types have features of their own widths) or, for a type without features, a learned
  embedding row per node (as ogbn-mag's authors, fields and institutions are trained).
- :class:`RGCN`: R-GCN (Schlichtkrull et al., "Modeling relational data with graph
  convolutional networks", ESWC 2018), eq. (2): ``h_i' = W_0 h_i + sum_r sum_{j in N_i^r}
  W_r h_j / |N_i^r|`` with the basis decomposition of eq. (3), ``W_r = sum_b a_rb V_b``
  (PyG ``RGCNConv``, mean per relation); ReLU and dropout between layers.
- :class:`RGAT`: a GAT layer per relation (Velickovic et al., ICLR 2018), heads
  concatenated, summed over the relations: the R-GAT of the MLPerf Training GNN reference on
  IGBH (hidden 512, 4 heads, fanouts 15,10,5 there). ``root`` (default true) adds a linear
  map of a target's own representation, where the reference instead adds self-loops to
  ``cites``: without it a node's own features would reach it only through its neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, RGCNConv

from shoal.graph.blocks import Block

__all__ = ["RGAT", "RGCN", "TypedInput"]


class TypedInput(nn.Module):
    """Per node type, the input representation of width ``out_dim``: ``Linear(F_t, out_dim)``
    of its features, or an ``Embedding(count_t, out_dim)`` when ``feature_dims[t]`` is None;
    with ``given[t]`` true, type ``t``'s rows come in ``features[t]`` already ``out_dim``
    wide (embeddings kept outside the module, e.g. on disk) and are taken as they are.

    ``forward(node_type, local_id, features)``: ``node_type``/``local_id`` ``(n,)`` int64 of the
    batch's nodes (ids within their type); ``features[t]``: the features of the batch's nodes
    of type ``t`` in batch order (``(count of type t in the batch, F_t)``), None for a type
    without features. Returns ``(n, out_dim)``."""

    def __init__(
        self,
        feature_dims: Sequence[int | None],
        counts: Sequence[int],
        out_dim: int,
        given: Sequence[bool] | None = None,
    ) -> None:
        super().__init__()
        self.out_dim = out_dim
        given = list(given) if given is not None else [False] * len(counts)
        self.maps = nn.ModuleList(
            nn.Identity()
            if g
            else nn.Linear(int(f), out_dim)
            if f
            else nn.Embedding(int(c), out_dim)
            for f, c, g in zip(feature_dims, counts, given, strict=True)
        )

    def forward(
        self,
        node_type: torch.Tensor,
        local_id: torch.Tensor,
        features: Sequence[torch.Tensor | None],
    ) -> torch.Tensor:
        out = None
        for t, m in enumerate(self.maps):
            on = (node_type == t).nonzero().squeeze(1)
            if not len(on):
                continue
            h = m(local_id[on]) if isinstance(m, nn.Embedding) else m(features[t])
            if out is None:
                out = h.new_zeros((len(node_type), self.out_dim))
            out[on] = h
        if out is None:
            out = torch.zeros((len(node_type), self.out_dim))
        return out


class RGCN(nn.Module):
    """R-GCN on typed blocks (module docstring). ``num_bases`` None: a full matrix per
    relation (default: None); ``dropout`` between layers (default 0.5)."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_relations: int,
        *,
        num_layers: int = 2,
        num_bases: int | None = None,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(
            RGCNConv(a, b, num_relations, num_bases=num_bases)
            for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.dropout = dropout

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, h: torch.Tensor, blk: Block, et: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` on one block: ``h`` the block's source rows (targets first); the
        targets' outputs, after ReLU and dropout unless ``i`` is the last layer (exact
        layer-wise inference calls it layer by layer over the whole graph)."""
        h = self.convs[i]((h, h[: blk.num_dst]), blk.edge_index, et)
        if i < len(self.convs) - 1:
            h = F.dropout(F.relu(h), self.dropout, self.training)
        return h

    def forward(
        self, h: torch.Tensor, blocks: Sequence[Block], edge_types: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """``h``: input rows of every node of the batch (the first block's sources);
        returns the last block's targets' outputs."""
        for i, (blk, et) in enumerate(zip(blocks, edge_types, strict=True)):
            h = self.layer(i, h, blk, et)
        return h


class RGAT(nn.Module):
    """R-GAT on typed blocks (module docstring): per layer and relation a ``GATConv`` with
    ``heads`` heads of ``width / heads`` channels each (concatenated), summed over the
    relations, plus ``root`` (default true); the last layer maps to ``out_dim`` with one
    head. ``dropout`` between layers (default 0.5). One bias per layer (the root's; a
    parameter of its own without ``root``), not one per relation: a node's output then
    depends only on its own neighbourhood, never on its batch mates'."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_relations: int,
        *,
        num_layers: int = 2,
        heads: int = 4,
        root: bool = True,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList()
        self.roots = nn.ModuleList()
        self.biases = nn.ParameterList()
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            last = i == num_layers - 1
            h = 1 if last else heads
            # no bias per relation: a GATConv adds its bias to every target it is called on,
            # so a node's output would depend on whether its batch mates have edges of that
            # relation; one bias per layer (the root's, or its own) instead
            self.layers.append(
                nn.ModuleList(
                    GATConv(a, b // h, heads=h, add_self_loops=False, bias=False)
                    for _ in range(num_relations)
                )
            )
            self.roots.append(nn.Linear(a, b) if root else nn.Identity())
            self.biases.append(nn.Parameter(torch.zeros(0 if root else b)))
        self.root = root
        self.dropout = dropout

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layer(self, i: int, h: torch.Tensor, blk: Block, et: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` on one block (as :meth:`RGCN.layer`)."""
        convs = self.layers[i]
        dst = h[: blk.num_dst]
        out = self.roots[i](dst) if self.root else None
        for r, conv in enumerate(convs):
            on = (et == r).nonzero().squeeze(1)
            if not len(on):
                continue
            y = conv((h, dst), blk.edge_index[:, on], size=blk.size)
            out = y if out is None else out + y
        if out is None:
            out = dst.new_zeros((blk.num_dst, convs[0].heads * convs[0].out_channels))
        if not self.root:
            out = out + self.biases[i]
        if i < len(self.layers) - 1:
            out = F.dropout(F.relu(out), self.dropout, self.training)
        return out

    def forward(
        self, h: torch.Tensor, blocks: Sequence[Block], edge_types: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        for i, (blk, et) in enumerate(zip(blocks, edge_types, strict=True)):
            h = self.layer(i, h, blk, et)
        return h
