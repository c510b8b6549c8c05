"""Exact distributed link evaluation: every rank embeds its core nodes, then ranks the held-out
positives whose source it owns.

1. **Embeddings** (:func:`dist_node_embeddings`): the model's last-layer output for every core
   node of the rank's parts, by the blocked layer-wise inference with halo exchanges
   (:func:`~shoal.distributed.blocked.blocked_dist_outputs`), into scratch arrays: the same
   rows as :func:`shoal.training.inference.layerwise_inference` on the unpartitioned graph.
2. **Ranking** (:func:`dist_link_metrics`): the held-out positives (``link_val.npy`` /
   ``link_test.npy`` of the store, new ids) are read in blocks of
   :data:`~shoal.training.linkdata.EVAL_CHUNK`; each block's negatives are those of the
   single-process trainer (:func:`~shoal.training.linkdata.eval_negative_chunk`, drawn in
   original ids and mapped to new ones), so for the same weights the MRR equals
   :class:`~shoal.training.tasks.LinkTask`'s. The owner of a positive's source scores
   it, pulling the other rows from their owners (one collective pull per block; every rank
   reads every block, so the pulls stay paired). Reciprocal-rank and hit sums are all-reduced.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.distributed.blocked import blocked_dist_outputs
from shoal.distributed.comm import CommStats
from shoal.distributed.feature_store import DistFeatureStore, owner_of
from shoal.distributed.runtime import DistContext
from shoal.distributed.tables import NodeTables
from shoal.errors import ShoalInputError
from shoal.store.reader import Partition, Store
from shoal.training.blocked import sum_layers
from shoal.training.inference import Scratch
from shoal.training.linkdata import EVAL_CHUNK, eval_negative_chunk
from shoal.training.linkmetrics import link_ranks
from shoal.utils.arrays import unique_sorted

__all__ = ["dist_link_metrics", "dist_node_embeddings"]


@torch.no_grad()
def dist_node_embeddings(
    model: nn.Module,
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    tables: NodeTables,
    *,
    width: int,
    scratch: Scratch,
    budget: int,
    inputs: dict[int, np.ndarray] | None = None,
    normalize: bool = False,
    stats: CommStats | None = None,
    threads: int = 8,
) -> dict[int, np.ndarray]:
    """Part -> ``(num_core, width)`` exact model outputs of its core nodes (module docstring;
    collective). ``inputs``: layer-0 rows per part (default the store's features)."""
    layers = sum_layers(model)
    if layers is None:
        raise ShoalInputError(
            "distributed link evaluation runs the model layer by layer and needs layers that "
            "sum messages (sage, gcn, gin, sgc)",
            fix="use --model sage, gcn, gin or sgc, or train link prediction in one process",
        )
    out = {p.index: scratch.array(p.num_core, width) for p in parts}
    targets = {p.index: np.arange(p.num_core, dtype=np.int64) for p in parts}

    def keep(part: int):
        def put(pos: np.ndarray, h: np.ndarray, todo: np.ndarray) -> None:
            out[part][todo[pos]] = h

        return put

    model.eval()
    blocked_dist_outputs(
        layers,
        store,
        parts,
        part_to_rank,
        ctx,
        tables,
        targets,
        {p.index: keep(p.index) for p in parts},
        scratch=scratch,
        budget=budget,
        normalize=normalize,
        stats=stats,
        threads=threads,
        inputs=inputs,
    )
    return out


@torch.no_grad()
def dist_link_metrics(
    scorer: nn.Module,
    emb: dict[int, np.ndarray],
    store: Store,
    part_to_rank: np.ndarray,
    ctx: DistContext,
    *,
    split: str,
    seed: int,
    num_neg: int,
    hits_k: int,
    width: int,
    stats: CommStats | None = None,
) -> tuple[float, float]:
    """(MRR, Hits@K) of ``split``'s held-out positives (module docstring; collective)."""
    edges = store.link_edges(split)
    if edges is None:
        raise ShoalInputError(
            f"the store has no held-out {split} edges (link_{split}.npy)",
            path=store.path,
            fix="split the graph's edges (shoal data split-edges), then partition and build "
            "the store from the split graph",
        )
    rows = DistFeatureStore(
        part_offsets=store.part_offsets,
        part_to_rank=part_to_rank,
        rank=ctx.rank,
        world_size=ctx.world_size,
        local_parts=emb,
        feature_dim=width,
        stats=stats,
    )
    sums = np.zeros(3, np.float64)  # reciprocal ranks, hits, positives
    scorer.eval()
    for c in range(math.ceil(len(edges) / EVAL_CHUNK)):
        pos = np.asarray(edges[c * EVAL_CHUNK : (c + 1) * EVAL_CHUNK], dtype=np.int64)
        neg = eval_negative_chunk(seed, split, c, len(pos), store.num_nodes, num_neg)
        mine = part_to_rank[owner_of(store.part_offsets, pos[:, 0])] == ctx.rank
        pos, neg = pos[mine], store.to_new(neg[mine])
        ids = unique_sorted(np.concatenate([pos.ravel(), neg.ravel()]))
        h = rows.pull(ids)
        if not len(pos):
            continue
        hu, hv, hq = (
            h[torch.from_numpy(np.searchsorted(ids, a))]
            for a in (pos[:, 0], pos[:, 1], neg.ravel())
        )
        sp = scorer(hu, hv)
        sq = scorer(hu.repeat_interleave(num_neg, 0), hq).view(len(pos), num_neg)
        r = link_ranks(sp, sq)
        sums += (float(np.sum(1.0 / r)), float(np.sum(r <= hits_k)), float(len(r)))
    t = torch.from_numpy(sums)
    if ctx.world_size > 1:
        dist.all_reduce(t)
    n = float(t[2])
    return (float(t[0]) / n, float(t[1]) / n) if n else (math.nan, math.nan)
