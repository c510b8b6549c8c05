"""Link-prediction mini-batches: seeds are edges (:class:`LinkBatchLoader`).

A batch takes ``batch_size`` positive edges ``(u, v)``, draws ``num_neg`` negative
destinations ``w`` per positive, and samples the blocks of the union of every end node with
the batch's positive edges and their reverses excluded at every hop (DGL's
``exclude="reverse_id"``), as PyG's ``LinkNeighborLoader`` and DGL's
``as_edge_prediction_sampler`` do. Positives are block-shuffled out of core (memory: one
chunk of ``chunk_edges``), self-loops skipped, an undirected graph's pairs once, each
oriented at random every epoch; the order and orientation depend only on ``(seed, epoch)``.
Negatives: ``uniform`` (default), ``in-batch`` (batches of at least 2 positives) or
``owner-local`` (in one process, ``uniform``). Why: docs/linkpred.md#the-pieces.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from shoal.graph.blocks import MiniBatch
from shoal.sample.sampler import NeighborSampler
from shoal.training.batches import Gatherer, Timer, batch_seed
from shoal.utils.arrays import unique_sorted

__all__ = [
    "NEGATIVE_SAMPLERS",
    "LinkBatch",
    "LinkBatchLoader",
    "draw_negatives",
    "flip_random",
    "positive_chunks",
]

NEGATIVE_SAMPLERS = ("uniform", "in-batch", "owner-local")


@dataclass
class LinkBatch:
    """Blocks and features of a link batch's nodes, and its edges as positions among the
    seeds (``mb.n_id[:mb.num_seeds]``): ``pos`` ``(2, B)``, ``neg`` ``(2, B * K)`` with each
    positive's ``K`` negatives consecutive."""

    mb: MiniBatch
    x: torch.Tensor
    pos: torch.Tensor
    neg: torch.Tensor
    num_neg: int


def positive_chunks(
    edges: np.ndarray,
    *,
    directed: bool,
    seed: int,
    epoch: int,
    chunk_edges: int = 1 << 16,
    relations: np.ndarray | None = None,
    target: int | None = None,
) -> Iterator[np.ndarray]:
    """The positive edges of an epoch in block-shuffled order (module docstring); on a
    typed graph only those whose relation (``relations``, per edge) is ``target``."""
    rng = np.random.default_rng([seed, epoch, 0x11C])
    n_chunks = math.ceil(len(edges) / chunk_edges)
    for c in rng.permutation(n_chunks):
        e = np.asarray(edges[c * chunk_edges : (c + 1) * chunk_edges], dtype=np.int64)
        if relations is not None:
            e = e[np.asarray(relations[c * chunk_edges : (c + 1) * chunk_edges]) == target]
        keep = e[:, 0] < e[:, 1] if not directed else e[:, 0] != e[:, 1]
        e = e[keep]
        if not directed:
            flip_random(e, rng)
        yield e[rng.permutation(len(e))]


def flip_random(pairs: np.ndarray, rng: np.random.Generator) -> None:
    """Swap the two ends of each ``(k, 2)`` pair with probability 1/2, in place."""
    flip = rng.random(len(pairs)) < 0.5
    pairs[flip] = pairs[flip][:, ::-1]


def draw_negatives(
    pos: np.ndarray,
    num_nodes: int,
    k: int,
    how: str,
    rng: np.random.Generator,
    neg_range: tuple[int, int] | None = None,
) -> np.ndarray:
    """``(B, k)`` negative destinations for the ``(B, 2)`` positives; ``neg_range``: the
    ``[lo, hi)`` ids they are drawn from (a typed target's destination type; default every
    node)."""
    b = len(pos)
    if how in ("uniform", "owner-local"):  # one process owns every node
        if neg_range is not None:
            lo, hi = neg_range
            return lo + rng.integers(0, hi - lo, size=(b, k), dtype=np.int64)
        return rng.integers(0, num_nodes, size=(b, k), dtype=np.int64)
    if how == "in-batch":
        if b < 2:
            raise ValueError("in-batch negatives need batches of at least 2 positive edges")
        j = rng.integers(0, b - 1, size=(b, k))
        j += j >= np.arange(b)[:, None]  # any other positive of the batch, never itself
        return pos[j, 1]
    raise ValueError(
        f"unknown negative sampler {how!r}; valid names: {', '.join(NEGATIVE_SAMPLERS)}"
    )


class LinkBatchLoader:
    """Yields an epoch's :class:`LinkBatch` es (module docstring).

    Args:
        sampler: neighbour sampler over the message-passing graph (CSR in memory);
        gatherer: feature gatherer (or a learnable embedding table's gatherer);
        edges: ``(E, 2)`` edges of the message-passing graph (a memory map is fine);
        directed: whether ``edges`` stores both directions of each pair (False) or not;
        num_nodes: size of the id space; batch_size: positives per batch;
        num_neg: negatives per positive (default 1); negatives: ``uniform`` or ``in-batch``;
        seed: run seed; chunk_edges: rows per shuffled chunk of ``edges`` (default 65536);
        relations, target: a typed graph's relation of every edge and the target relation
            (the positives); neg_range: the ``[lo, hi)`` ids negatives are drawn from
            (default none: an untyped graph, every edge and every node).
    """

    def __init__(
        self,
        sampler: NeighborSampler,
        gatherer: Gatherer,
        edges: np.ndarray,
        *,
        directed: bool,
        num_nodes: int,
        batch_size: int,
        num_neg: int = 1,
        negatives: str = "uniform",
        seed: int = 0,
        chunk_edges: int = 1 << 16,
        timer: Timer | None = None,
        relations: np.ndarray | None = None,
        target: int | None = None,
        neg_range: tuple[int, int] | None = None,
    ) -> None:
        if negatives not in NEGATIVE_SAMPLERS:
            raise ValueError(
                f"unknown negative sampler {negatives!r}; valid names: {', '.join(NEGATIVE_SAMPLERS)}"
            )
        if batch_size < 1 or num_neg < 1:
            raise ValueError("batch_size and num_neg must be >= 1")
        self.sampler, self.gatherer, self.edges = sampler, gatherer, edges
        self.directed, self.num_nodes = directed, num_nodes
        self.batch_size, self.num_neg, self.negatives = batch_size, num_neg, negatives
        self.seed, self.chunk_edges = seed, chunk_edges
        self.timer = timer or Timer()
        self.relations, self.target, self.neg_range = relations, target, neg_range

    def positives(self, epoch: int) -> Iterator[np.ndarray]:
        """``(B, 2)`` positive batches of the epoch (the last one may be smaller)."""
        buf = np.zeros((0, 2), dtype=np.int64)
        for chunk in positive_chunks(
            self.edges,
            directed=self.directed,
            seed=self.seed,
            epoch=epoch,
            chunk_edges=self.chunk_edges,
            relations=self.relations,
            target=self.target,
        ):
            buf = np.concatenate([buf, chunk])
            while len(buf) >= self.batch_size:
                yield buf[: self.batch_size]
                buf = buf[self.batch_size :]
        if len(buf):
            yield buf

    def make_batch(self, pos: np.ndarray, step_seed: int) -> LinkBatch:
        """Negatives, sampling (positives and reverses excluded) and gather of one batch."""
        t0 = time.perf_counter()
        rng = np.random.default_rng(step_seed)
        neg_dst = draw_negatives(
            pos, self.num_nodes, self.num_neg, self.negatives, rng, self.neg_range
        )
        nodes = unique_sorted(np.concatenate([pos.ravel(), neg_dst.ravel()]))
        exclude = np.concatenate([pos, pos[:, ::-1]])
        mb = self.sampler.sample(nodes, step_seed, exclude=exclude)
        neg_src = np.repeat(pos[:, 0], self.num_neg)
        local = lambda ids: torch.from_numpy(np.searchsorted(nodes, ids))  # noqa: E731
        p = torch.stack([local(pos[:, 0]), local(pos[:, 1])])
        q = torch.stack([local(neg_src), local(neg_dst.ravel())])
        self.timer.add("sampling", time.perf_counter() - t0)
        t1 = time.perf_counter()
        x = self.gatherer.gather(mb.n_id)
        self.timer.add("gather", time.perf_counter() - t1)
        return LinkBatch(mb, x, p, q, self.num_neg)

    def epoch(self, epoch: int) -> Iterator[LinkBatch]:
        for step, pos in enumerate(self.positives(epoch)):
            yield self.make_batch(pos, batch_seed(self.seed, epoch, step))
