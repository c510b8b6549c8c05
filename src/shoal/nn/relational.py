"""Relational GNNs with the interface of every other shoal model: R-GCN and R-GAT.

An untyped graph is a typed graph with one node type and one relation; a typed graph's
batch is the same :class:`~shoal.graph.blocks.MiniBatch` whose blocks also carry each edge's
relation (``Block.edge_type``), each source's node type (``Block.src_type``) and the
sources' original ids (``Block.node_ids``). The models here are
:class:`~shoal.nn.base.BlockGNN` subclasses called ``model(x, blocks)`` and run layer by
layer (``layer_forward``) like the untyped ones, so every trainer, engine and exact
layer-wise inference runs them unchanged.

The input contract (``x`` of ``model(x, blocks)`` and of ``layer_forward(0, x, block)``):
``x`` is ``(n, F)`` float, one row per source of ``blocks[0]`` (targets first), ``F`` at least
the widest node type's feature width. A node of type ``t`` with ``F_t`` features has them in
columns ``[:F_t]`` (zeros beyond). A featureless type's rows are ignored: each of its nodes
has a learned embedding row, ``node_ids - offsets[t]``; or, for a type marked ``given``, its
rows are taken as they are from columns ``[:hidden]`` (embedding tables kept outside the
model, e.g. on disk, by the trainer). ``F`` may be 0 when no type has features.

- :class:`RelationalInput`: the per-type input stage that layer 0 applies.
- :class:`RGCN`: Schlichtkrull et al., "Modeling relational data with graph convolutional
  networks" (ESWC 2018), eq. (2) with the basis decomposition of eq. (3), PyG ``RGCNConv``.
- :class:`RGAT`: the R-GAT of the MLPerf Training GNN benchmark (mlcommons/training,
  ``graph_neural_network/rgnn.py``, now ``retired_benchmarks/rgat/rgnn.py``): a ``GATConv``
  (Velickovic et al., ICLR 2018) per relation summed over the relations (PyG ``HeteroConv``,
  ``aggr="sum"``), leaky ReLU and dropout 0.2 between layers, a final ``Linear``.

A node's output depends only on its own (sampled) neighbourhood, never on which other nodes
share its batch: exact layer-wise inference and the distributed engines rely on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.nn import GATConv, RGCNConv

from shoal.graph.blocks import Block
from shoal.nn.base import BlockGNN

__all__ = ["RGAT", "RGCN", "RelationalGNN", "RelationalInput"]


def _check_types(
    feature_dims: Sequence[int | None], counts: Sequence[int], offsets: Sequence[int]
) -> np.ndarray:
    """``offsets`` as an int64 array, after checking the three per-type sequences agree."""
    t = len(counts)
    if t < 1:
        raise ValueError("a relational model needs at least one node type")
    if len(feature_dims) != t:
        raise ValueError(f"{len(feature_dims)} feature_dims for {t} node types (counts)")
    off = np.asarray(offsets, dtype=np.int64)
    if off.shape != (t + 1,):
        raise ValueError(f"offsets must have {t + 1} entries (T + 1), got {len(off)}")
    if not np.array_equal(np.diff(off), np.asarray(counts, np.int64)):
        raise ValueError(f"offsets {off.tolist()} are not the running sum of counts {counts}")
    for i, f in enumerate(feature_dims):
        if f is not None and int(f) < 0:
            raise ValueError(f"node type {i}: feature width {f} < 0")
    return off


class RelationalInput(nn.Module):
    """The per-type input stage (module docstring's input contract): each node type's rows of
    ``x`` mapped to ``out_dim``: ``Linear(F_t, out_dim)`` of a type with ``F_t > 0`` features,
    ``Embedding(counts[t], out_dim)`` of a featureless one (None or 0), its rows as they come
    with ``given[t]``. ``project=False`` maps nothing: every type must have features of one
    width ``F`` and the stage returns ``x[:, :F]`` (the MLPerf reference feeds IGBH's 1024
    features of every type straight to its first ``GATConv``).

    ``forward(x, node_type, node_ids)``: ``x`` ``(n, >= in_width)``, ``node_type`` ``(n,)``
    int64, ``node_ids`` ``(n,)`` original ids (needed when a type has an embedding).
    """

    def __init__(
        self,
        feature_dims: Sequence[int | None],
        counts: Sequence[int],
        offsets: Sequence[int],
        out_dim: int,
        *,
        given: Sequence[bool] | None = None,
        project: bool = True,
    ) -> None:
        super().__init__()
        self.offsets = _check_types(feature_dims, counts, offsets)
        self.counts = [int(c) for c in counts]
        dims = [int(f) if f else 0 for f in feature_dims]
        given = [bool(g) for g in given] if given is not None else [False] * len(dims)
        if len(given) != len(dims):
            raise ValueError(f"{len(given)} given flags for {len(dims)} node types")
        for t, (f, g) in enumerate(zip(dims, given, strict=True)):
            if g and f:
                raise ValueError(f"node type {t} has features; only a featureless one is given")
        self.feature_dims, self.given, self.project = dims, given, bool(project)
        if not project:
            if any(given) or len(set(dims)) != 1 or dims[0] == 0:
                raise ValueError(
                    "project=False needs every node type to have features of one width, "
                    f"got feature widths {list(feature_dims)} (given {given})"
                )
            self.out_dim = dims[0]
            self.maps = nn.ModuleList(nn.Identity() for _ in dims)
        else:
            self.out_dim = int(out_dim)
            self.maps = nn.ModuleList(
                nn.Identity()
                if g
                else nn.Linear(f, self.out_dim)
                if f
                else nn.Embedding(c, self.out_dim)
                for f, c, g in zip(dims, self.counts, given, strict=True)
            )
        #: the columns of ``x`` the stage reads (0: none)
        self.in_width = max(dims + ([self.out_dim] if any(given) else []))

    @property
    def num_types(self) -> int:
        return len(self.counts)

    @property
    def needs_ids(self) -> bool:
        """Whether some type's rows are embedding rows looked up by node id."""
        return any(isinstance(m, nn.Embedding) for m in self.maps)

    def forward(
        self,
        x: torch.Tensor,
        node_type: torch.Tensor,
        node_ids: np.ndarray | torch.Tensor | None,
    ) -> torch.Tensor:
        n = int(node_type.shape[0])
        if x.shape[0] != n or x.dim() != 2:
            raise ValueError(f"x must be (n, F) with n = {n} nodes, got {tuple(x.shape)}")
        if x.shape[1] < self.in_width:
            raise ValueError(
                f"x has {x.shape[1]} columns, the node types' inputs need {self.in_width}"
            )
        if not self.project:
            return x[:, : self.out_dim]
        if n and (int(node_type.min()) < 0 or int(node_type.max()) >= self.num_types):
            raise ValueError(f"node types must lie in [0, {self.num_types})")
        ids = None
        if self.needs_ids:
            if node_ids is None:
                raise ValueError(
                    "a featureless node type's embedding rows are looked up by original id: "
                    "the block has no node_ids (MiniBatch.with_node_ids sets them)"
                )
            ids = torch.as_tensor(np.asarray(node_ids, np.int64)[:n]).to(node_type.device)
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        for t, m in enumerate(self.maps):
            on = (node_type == t).nonzero().squeeze(1)
            if not len(on):
                continue
            if isinstance(m, nn.Embedding):
                local = ids[on] - int(self.offsets[t])
                if int(local.min()) < 0 or int(local.max()) >= self.counts[t]:
                    raise ValueError(
                        f"node type {t}: node ids outside its range "
                        f"[{self.offsets[t]}, {self.offsets[t + 1]})"
                    )
                parts.append((on, m(local)))
            elif self.given[t]:
                parts.append((on, x[on, : self.out_dim]))
            else:
                parts.append((on, m(x[on, : self.feature_dims[t]])))
        dtype = parts[0][1].dtype if parts else x.dtype
        out = torch.zeros((n, self.out_dim), dtype=dtype, device=x.device)
        for on, h in parts:
            out = out.index_copy(0, on, h.to(dtype))
        return out


class RelationalGNN(BlockGNN):
    """A :class:`BlockGNN` over typed blocks: layer 0 first maps ``x`` by the per-type input
    stage (:class:`RelationalInput`, ``self.input``), then every layer's :meth:`conv` reads
    ``block.edge_type``. Activation and dropout between layers as :class:`BlockGNN`'s; the
    input (the stage's output) is dropped with ``input_dropout`` (a separate keyword: the
    MLPerf reference and R-GCN's shoal default drop none).

    Blocks: a block with edges must carry ``edge_type`` and ``src_type``
    (:class:`ValueError` otherwise). A block with no edges and no types is accepted as a
    width probe (:func:`~shoal.nn.base.layer_widths`' isolated node): its sources' input
    rows are zeros and no type-dependent term is added.
    """

    def __init__(
        self,
        *,
        feature_dims: Sequence[int | None],
        counts: Sequence[int],
        offsets: Sequence[int],
        num_relations: int,
        hidden: int,
        num_layers: int,
        dropout: float,
        input_dropout: float = 0.0,
        given: Sequence[bool] | None = None,
        project_inputs: bool = True,
        in_dim: int | None = None,
    ) -> None:
        super().__init__(num_layers, dropout)
        if num_relations < 1:
            raise ValueError(f"num_relations must be >= 1, got {num_relations}")
        if not 0.0 <= input_dropout < 1.0:
            raise ValueError(f"input_dropout must be in [0, 1), got {input_dropout}")
        self.input = RelationalInput(
            feature_dims, counts, offsets, hidden, given=given, project=project_inputs
        )
        if in_dim is not None and int(in_dim) < self.input.in_width:
            raise ValueError(
                f"in_dim {in_dim}: the node types' inputs need {self.input.in_width} columns"
            )
        self.num_relations = int(num_relations)
        self.input_dropout = float(input_dropout)

    # ------------------------------------------------------------------ blocks
    def _typed(self, block: Block) -> bool:
        """Whether ``block`` carries its types; raises unless it may do without (no edges)."""
        if block.src_type is None and block.num_edges == 0:
            return False
        missing = "src_type" if block.src_type is None else None
        if missing is None and block.num_edges and block.edge_type is None:
            missing = "edge_type"
        if missing is not None:
            raise ValueError(
                f"{type(self).__name__} is a relational model: its blocks must carry each "
                f"edge's relation and each source's node type, and this block has no "
                f"{missing} (an untyped graph's block? a typed graph's sampler sets them)"
            )
        et = block.edge_type
        if et is not None and block.num_edges:
            if et.shape[0] != block.num_edges:
                raise ValueError(f"edge_type has {et.shape[0]} entries for {block.num_edges} edges")
            if int(et.min()) < 0 or int(et.max()) >= self.num_relations:
                raise ValueError(f"edge types must lie in [0, {self.num_relations})")
        return True

    def edge_types(self, block: Block) -> torch.Tensor:
        """``block.edge_type``, or an empty one on an edgeless width-probe block."""
        if block.edge_type is not None:
            return block.edge_type
        return torch.empty(0, dtype=torch.int64, device=block.edge_index.device)

    def input_rows(self, x: torch.Tensor, block: Block) -> torch.Tensor:
        """Layer 0's input: the per-type input stage of ``x`` (``block``'s sources)."""
        return self._input_rows(x, block, self._typed(block))

    def _input_rows(self, x: torch.Tensor, block: Block, typed: bool) -> torch.Tensor:
        if not typed:
            w = self.input.out_dim
            dtype = x.dtype if x.is_floating_point() else torch.float32
            return torch.zeros((block.num_src, w), dtype=dtype, device=x.device)
        return self.input(x, block.src_type[: block.num_src], block.node_ids)

    # ------------------------------------------------------------------ layers
    def _rate(self, slot: int) -> float:
        return self.input_dropout if slot == 0 else self.dropout

    def _layer_input(self, x: torch.Tensor, block: Block) -> torch.Tensor:
        # layer_forward checked the block: typed unless an edgeless width probe
        return self._input_rows(x, block, block.src_type is not None)

    def layer_forward(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        """:meth:`BlockGNN.layer_forward` on a checked typed block; layer 0 maps ``x`` by the
        input stage first (module docstring's input contract) and drops the result with
        ``input_dropout``."""
        self._typed(block)
        return super().layer_forward(layer, x, block)


class RGCN(RelationalGNN):
    """R-GCN (Schlichtkrull et al., ESWC 2018), eq. (2):
    ``h_i' = W_0 h_i + sum_r sum_{j in N_i^r} W_r h_j / |N_i^r| + b`` over the (sampled)
    in-neighbours of relation ``r``; ``num_bases``: eq. (3)'s ``W_r = sum_b a_rb V_b``. PyG
    ``RGCNConv`` (``aggr="mean"``) per layer, ReLU and dropout between layers.

    Args (keyword-only): feature_dims (per node type, None: featureless), counts (nodes per
    type), offsets (type ``t``'s ids ``[offsets[t], offsets[t + 1])``), num_relations,
    hidden, out_dim, num_layers (default 2), dropout (default 0.5), num_bases (default None:
    a full matrix per relation), input_dropout (default 0.0), given (default none),
    project_inputs (default True), in_dim (``x``'s width, checked; default None): as
    :class:`RelationalGNN` and :class:`RelationalInput`.
    """

    def __init__(
        self,
        *,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        num_bases: int | None = None,
        **common: Any,
    ) -> None:
        super().__init__(hidden=hidden, num_layers=num_layers, dropout=dropout, **common)
        dims = self.dims(self.input.out_dim, hidden, out_dim, num_layers)
        self.convs = nn.ModuleList(
            RGCNConv(a, b, self.num_relations, num_bases=num_bases) for a, b in dims
        )

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        return self.convs[layer]((x, x[: block.num_dst]), block.edge_index, self.edge_types(block))


class RGAT(RelationalGNN):
    """R-GAT as the MLPerf Training GNN reference builds it (mlcommons/training,
    ``graph_neural_network/rgnn.py``, class ``RGNN`` with ``model="rgat"``; since training
    v6.0 in ``retired_benchmarks/rgat/``).

    The reference, per layer ``i``: ``HeteroConv({r: GATConv(in, hidden // heads,
    heads=heads, add_self_loops=False) for r in relations})`` (PyG's default ``aggr="sum"``
    over the relations; ``GATConv`` defaults: heads concatenated, its own bias, attention
    leaky-ReLU slope 0.2, no attention dropout), every layer ``hidden`` wide, the last one
    too (4 heads, concatenated); ``F.leaky_relu`` (slope 0.01) then ``Dropout(0.2)`` after
    every layer but the last; then ``Linear(hidden, out_dim)`` of the target type's rows.
    No normalisation, no input dropout, no root term: a paper reaches itself only through
    the self-loops its data loader adds to ``cites`` (``dataset.py``:
    ``add_self_loops(remove_self_loops(...))``); ``train_rgnn_multi_gpu.py`` runs it with
    hidden 512, 3 layers, 4 heads, dropout 0.2, fanouts 15, 10, 5. GAT: Velickovic et al.,
    ICLR 2018, eqs. (1)-(5), per relation.

    Here layer ``l`` for target ``i`` of type ``t`` is
    ``sum_r GAT_r(i) + sum_{r: relation_dst[r] = t} b_r`` (``GAT_r(i)``: eq. (4)/(5) over
    ``i``'s in-edges of relation ``r``, zero without any), exactly the reference's sum when
    ``relation_dst`` is given: the reference calls each relation's ``GATConv`` (and so adds
    its bias) on every node of its destination type (checked against a transcription of
    ``rgnn.py`` in ``tests/nn/test_relational.py``); here ``b_r`` is a parameter beside a
    ``GATConv(bias=False)`` (``biases[l][r]``) added by target type, so that a node's output
    never depends on which relations its batch mates' block has edges of.

    Args (keyword-only): feature_dims, counts, offsets, num_relations, hidden, out_dim (as
    :class:`RGCN`); num_layers (default 2, the reference class's; its benchmark runs 3);
    dropout (default 0.2); heads (default 4, every layer). Options, each a deviation from
    the reference when changed, defaults reproducing it:

    - ``relation_dst`` (default None): each relation's destination node type, whose every
      target gets the relation's bias (the reference's). None: every target gets every
      relation's bias (one shared bias per layer, ``sum_r b_r``).
    - ``relation_bias`` (default True): a bias per relation. False: one bias per layer for
      every target (shoal's earlier R-GAT).
    - ``root`` (default False): add ``Linear(in, width, bias=False)`` of the target's own row
      (shoal's earlier R-GAT, where no self-loops are in the data).
    - ``self_loops`` (default none): relations (each from a type to itself, e.g. ``cites``)
      whose ``GATConv`` also gets an edge ``i -> i`` for every target of its destination
      type (needs ``relation_dst``): the loops the reference's ``dataset.py`` adds to
      ``cites``, here always present instead of stored and sampled like any edge. Do not
      combine with data that stores them.
    - ``final_linear`` (default True): the reference's ``Linear(hidden, out_dim)`` after
      the last layer. False: the last layer's ``GATConv`` maps to ``out_dim`` with one head
      (shoal's earlier R-GAT).
    - ``attention_dropout`` (default 0.0, the reference's): ``GATConv``'s dropout of the
      attention coefficients (never keyed).
    - ``input_dropout`` (default 0.0, the reference drops none), ``given``,
      ``project_inputs`` (default True: the per-type input stage maps every type to
      ``hidden``, which the reference lacks: IGBH's types all have 1024 features; False
      feeds them to the first ``GATConv``, as the reference), ``in_dim`` (as :class:`RGCN`).
    """

    activation = staticmethod(F.leaky_relu)

    def __init__(
        self,
        *,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.2,
        heads: int = 4,
        relation_dst: Sequence[int] | None = None,
        relation_bias: bool = True,
        root: bool = False,
        self_loops: Sequence[int] = (),
        final_linear: bool = True,
        attention_dropout: float = 0.0,
        **common: Any,
    ) -> None:
        super().__init__(hidden=hidden, num_layers=num_layers, dropout=dropout, **common)
        if heads < 1 or hidden % heads:
            raise ValueError(f"hidden {hidden} must be a multiple of heads {heads} >= 1")
        R, T = self.num_relations, self.input.num_types
        if relation_dst is not None:
            rd = [int(t) for t in relation_dst]
            if len(rd) != R or any(not 0 <= t < T for t in rd):
                raise ValueError(f"relation_dst needs {R} node types in [0, {T}), got {rd}")
            self.register_buffer("relation_dst", torch.tensor(rd, dtype=torch.int64), False)
        else:
            self.register_buffer("relation_dst", None, False)
        self.self_loops = sorted({int(r) for r in self_loops})
        if self.self_loops and (
            relation_dst is None or any(not 0 <= r < R for r in self.self_loops)
        ):
            raise ValueError(
                f"self_loops {list(self_loops)} must be relations in [0, {R}), with relation_dst"
            )
        self.heads, self.root, self.final_linear = int(heads), bool(root), bool(final_linear)
        self.relation_bias = bool(relation_bias)
        self.convs = nn.ModuleList()
        self.roots = nn.ModuleList()
        self.biases = nn.ParameterList()
        a = self.input.out_dim
        for i in range(num_layers):
            last = i == num_layers - 1
            one = last and not final_linear  # the last layer maps to out_dim, one head
            width = out_dim if one else hidden
            h = 1 if one else self.heads
            self.convs.append(
                nn.ModuleList(
                    GATConv(
                        a,
                        width // h,
                        heads=h,
                        add_self_loops=False,
                        bias=False,
                        dropout=attention_dropout,
                    )
                    for _ in range(R)
                )
            )
            self.roots.append(nn.Linear(a, width, bias=False) if root else nn.Identity())
            self.biases.append(nn.Parameter(torch.zeros(R if relation_bias else 1, width)))
            a = width
        self.lin = nn.Linear(hidden, out_dim) if final_linear else None

    def _bias(self, layer: int, dst_type: torch.Tensor | None) -> torch.Tensor | float:
        """Every target's bias of layer ``layer`` (module docstring)."""
        b = self.biases[layer]
        if not self.relation_bias:
            return b[0]
        if self.relation_dst is None:
            return b.sum(0)
        if dst_type is None:  # an edgeless width probe: no types, no bias
            return 0.0
        per_type = b.new_zeros((self.input.num_types, b.shape[1]))
        return per_type.index_add(0, self.relation_dst, b)[dst_type]

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        nd = block.num_dst
        dst = x[:nd]
        dst_type = block.src_type[:nd] if block.src_type is not None else None
        et, ei = self.edge_types(block), block.edge_index
        out = None
        for r, conv in enumerate(self.convs[layer]):
            sel = ei[:, et == r]
            if r in self.self_loops and dst_type is not None:
                loops = (dst_type == self.relation_dst[r]).nonzero().squeeze(1)
                sel = torch.cat([sel, torch.stack([loops, loops])], dim=1)
            if not sel.shape[1]:
                continue
            # only the relation's sources and targets go through its GATConv (rows are
            # mapped independently: the same numbers as over every row, at the edges' cost)
            u, su = torch.unique(sel[0], return_inverse=True)
            v, sv = torch.unique(sel[1], return_inverse=True)
            y = conv((x[u], x[v]), torch.stack([su, sv]), size=(len(u), len(v)))
            if out is None:
                out = y.new_zeros((nd, y.shape[1]))
            out = out.index_add(0, v, y)
        if out is None:
            width = self.biases[layer].shape[1]
            out = dst.new_zeros((nd, width))
        if self.root:
            out = out + self.roots[layer](dst)
        out = out + self._bias(layer, dst_type)
        if self.lin is not None and layer == self.num_layers - 1:
            out = self.lin(out)
        return out
