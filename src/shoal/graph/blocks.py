"""The sampled-subgraph types every layer shares (no sampler, no model imports them twice).

A :class:`Block` is one bipartite message-passing graph (PyG's ``(source, target)`` edge
convention, targets first among the sources); a :class:`MiniBatch` is the global ids of every
node a batch touches (seeds first) and one block per GNN layer, input layer first. Samplers
produce them, models consume them, engines move them between processes and devices.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

__all__ = ["Batch", "Block", "MiniBatch", "full_graph_block"]


def _to(t: torch.Tensor | None, device: torch.device, non_blocking: bool) -> torch.Tensor | None:
    return None if t is None else t.to(device, non_blocking=non_blocking)


@dataclass
class Block:
    """A bipartite message-passing graph from ``num_src`` source to ``num_dst`` target nodes.

    Attributes:
        edge_index: ``(2, E)`` int64, row 0 local source ids (in ``[0, num_src)``), row 1 local
            target ids (in ``[0, num_dst)``), grouped by target in ascending order.
        num_src, num_dst: node counts; targets are the first ``num_dst`` sources.
        rowptr: ``(num_dst + 1,)`` int64 offsets of each target's edges (CSR by target).
        deg_src: ``(num_src,)`` float32 in-degree of each source node in the *whole* graph
            (used by degree-normalised layers such as GCN to stay unbiased under sampling).
        node_ids: ``(num_src,)`` int64 host array of the sources' ids in the graph's original
            numbering (targets first), or None. Keyed dropout reads it
            (:func:`shoal.nn.base.keyed_dropout`: a node's mask is a function of its id), and
            so do a relational model's per-type inputs (a featureless type's embedding row).
        edge_type: ``(E,)`` int64 relation index of each edge (the schema's order), or None
            for an untyped graph (one relation): a relational layer reads it beside
            ``edge_index``, as PyG's ``RGCNConv`` does.
        src_type: ``(num_src,)`` int64 node type index of each source node (targets first),
            or None for an untyped graph (one node type).
    """

    edge_index: torch.Tensor
    num_src: int
    num_dst: int
    rowptr: torch.Tensor
    deg_src: torch.Tensor
    node_ids: np.ndarray | None = None
    edge_type: torch.Tensor | None = None
    src_type: torch.Tensor | None = None
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> tuple[int, int]:
        """``(num_src, num_dst)``, the ``size`` argument of PyG's ``propagate``."""
        return (self.num_src, self.num_dst)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def deg_dst(self) -> torch.Tensor:
        return self.deg_src[: self.num_dst]

    @property
    def count_dst(self) -> torch.Tensor:
        """Number of sampled in-edges of each target (int64)."""
        return self.rowptr[1:] - self.rowptr[:-1]

    def adj_t(self) -> torch.Tensor:
        """The block as a ``(num_dst, num_src)`` torch sparse CSR tensor of ones (cached)."""
        a = self.cache.get("adj_t")
        if a is None:
            ones = torch.ones(self.num_edges, dtype=torch.float32, device=self.edge_index.device)
            a = self.weighted_adj_t(ones)
            self.cache["adj_t"] = a
        return a

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Block:
        """This block with its tensors on ``device`` (itself when already there)."""
        device = torch.device(device)
        if self.edge_index.device == device:
            return self
        return replace(
            self,
            edge_index=self.edge_index.to(device, non_blocking=non_blocking),
            rowptr=self.rowptr.to(device, non_blocking=non_blocking),
            deg_src=self.deg_src.to(device, non_blocking=non_blocking),
            edge_type=_to(self.edge_type, device, non_blocking),
            src_type=_to(self.src_type, device, non_blocking),
            cache={},
        )

    def weighted_adj_t(self, values: torch.Tensor) -> torch.Tensor:
        """The block as a ``(num_dst, num_src)`` sparse CSR tensor with the given edge values."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(
                self.rowptr,
                self.edge_index[0],
                values,
                size=(self.num_dst, self.num_src),
                check_invariants=False,
            )


@dataclass
class MiniBatch:
    """One sampled mini-batch: global ids ``n_id`` (seeds first) and blocks, input layer first."""

    n_id: np.ndarray
    blocks: list[Block]
    num_seeds: int

    @property
    def seeds(self) -> np.ndarray:
        return self.n_id[: self.num_seeds]

    @property
    def typed(self) -> bool:
        """Whether the blocks carry node types and relations (a typed graph's batch)."""
        return bool(self.blocks) and self.blocks[0].src_type is not None

    @property
    def node_type(self) -> torch.Tensor | None:
        """``(len(n_id),)`` int64 node type of every node of the batch (None: untyped)."""
        return self.blocks[0].src_type if self.blocks else None

    @property
    def nbytes(self) -> int:
        """Bytes this mini-batch holds (its ids and its blocks' index tensors)."""
        n = self.n_id.nbytes
        for b in self.blocks:
            ts = (b.edge_index, b.rowptr, b.deg_src, b.edge_type, b.src_type)
            n += sum(t.numel() * t.element_size() for t in ts if t is not None)
        return int(n)

    def with_node_ids(self, ids: np.ndarray | None = None) -> list[Block]:
        """The blocks, each with its sources' ids (``ids``, default ``n_id``: every block's
        sources are a prefix of the batch's nodes) as ``node_ids``, for keyed dropout."""
        ids = self.n_id if ids is None else ids
        return [replace(b, node_ids=ids[: b.num_src]) for b in self.blocks]

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> MiniBatch:
        """This mini-batch with its blocks on ``device`` (``n_id`` stays a host array)."""
        blocks = [b.to(device, non_blocking=non_blocking) for b in self.blocks]
        return MiniBatch(n_id=self.n_id, blocks=blocks, num_seeds=self.num_seeds)


@dataclass
class Batch:
    """A ready mini-batch: sampled blocks, input features of ``mb.n_id``, seed labels, and
    what else the task's loss reads (``step``: a link batch's edges; None for nodes)."""

    mb: MiniBatch
    x: torch.Tensor
    y: torch.Tensor
    step: Any = None

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Batch:
        """This batch with its blocks, features and labels on ``device``."""
        return Batch(
            self.mb.to(device, non_blocking=non_blocking),
            self.x.to(device, non_blocking=non_blocking),
            self.y.to(device, non_blocking=non_blocking),
            self.step,
        )


def full_graph_block(
    indptr: np.ndarray, indices: np.ndarray, *, num_nodes: int | None = None
) -> Block:
    """The whole graph as one block (``num_src == num_dst == N``) for full-graph training.

    Loads every edge: meant for graphs that fit in memory (tests, small datasets).
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = indptr.shape[0] - 1
    n = rows if num_nodes is None else int(num_nodes)
    rowptr = np.zeros(n + 1, dtype=np.int64)
    rowptr[: rows + 1] = indptr
    rowptr[rows + 1 :] = indptr[-1]
    counts = np.diff(rowptr)
    src = torch.from_numpy(np.asarray(indices, dtype=np.int64).copy())
    dst = torch.repeat_interleave(torch.arange(n), torch.from_numpy(counts))
    return Block(
        torch.stack([src, dst]),
        n,
        n,
        torch.from_numpy(rowptr),
        torch.from_numpy(counts.astype(np.float32)),
    )
