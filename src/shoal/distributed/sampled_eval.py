"""Exact distributed evaluation of any model called as ``model(x, blocks)`` (no per-layer
access: e.g. a ``--model-factory`` model), by full L-hop neighbourhoods.

Every rank takes its parts' core nodes of the evaluated splits in batches of ``batch_size``
targets, samples their complete L-hop in-neighbourhoods where the data lives
(:class:`~shoal.distributed.sampler.DistNeighborSampler` with every fanout -1: exact, no
randomness), pulls the input rows (:class:`~shoal.distributed.feature_store.DistFeatureStore`)
and runs the model; every rank takes the same number of steps (the most any rank needs), so
the collectives stay paired. Cost: the L-hop expansion of each batch (the layer-wise path of
shoal's own models computes each node once per layer instead).

With fanouts (``--eval-fanouts``) the same loop is the sampled validation of any model during
training (GraphStorm's mini-batch inference): each batch's neighbourhoods drawn from fixed
streams, so that every evaluation of a run sees the same ones.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.distributed.comm import CommStats
from shoal.distributed.feature_store import DistFeatureStore, placement
from shoal.distributed.runtime import DistContext
from shoal.distributed.sampler import DistNeighborSampler
from shoal.distributed.tables import NodeTables
from shoal.rows.parts import part_rows
from shoal.store.reader import Partition, Store
from shoal.training.batches import batch_seed
from shoal.training.inference import EVAL_EPOCH

__all__ = ["sampled_dist_counts"]


@torch.no_grad()
def sampled_dist_counts(
    model: nn.Module,
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    tables: NodeTables,
    splits: tuple[str, ...],
    *,
    num_layers: int,
    batch_size: int,
    normalize: bool,
    stats: CommStats | None,
    fanouts: tuple[int, ...] | None = None,
    seed: int = 0,
    structure_group: int | None = None,
    threads: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """(correct, total) per split on this rank's core nodes (module docstring). Collective.
    ``fanouts`` (default None: every neighbour) samples the neighbourhoods instead, step
    ``i`` from the stream ``batch_seed(seed, EVAL_EPOCH, i)`` (a sampled validation: the
    same draws at every call). ``structure_group``: the parts' neighbour lists are read
    from disk (an untyped store whose memory plan left them there), the batches sampled in
    groups of this many bytes (:meth:`DistNeighborSampler.sample_group`; the same on every
    rank; default None: in memory), with ``threads`` concurrent reads."""
    stats = stats if stats is not None else CommStats()
    sampler = DistNeighborSampler(
        parts=parts,
        **placement(store, part_to_rank, ctx),
        fanouts=tuple(fanouts) if fanouts is not None else (-1,) * num_layers,
        degrees=tables.degrees,
        stats=stats,
        schema=store.schema,
        type_of=store.type_of if store.schema is not None else None,
    )
    typed = store.schema is not None
    if structure_group is not None and not typed:
        sampler.read_from_disk(io_threads=threads, group_bytes=structure_group)
    features = DistFeatureStore(
        **placement(store, part_to_rank, ctx),
        local_parts={p.index: part_rows(p) if typed else p.features for p in parts},
        feature_dim=int(store.feature_dim),
        stats=stats,
    )
    masks = [
        np.concatenate([np.asarray(p.mask(s)) for p in parts] or [np.zeros(0, bool)])
        for s in splits
    ]
    core = np.concatenate([p.core_ids for p in parts] or [np.zeros(0, np.int64)])
    any_split = np.logical_or.reduce(masks) if masks else np.zeros(0, bool)
    targets, which = core[any_split], [m[any_split] for m in masks]
    steps = torch.tensor([math.ceil(len(targets) / batch_size)], dtype=torch.int64)
    if ctx.world_size > 1:
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    correct = np.zeros(len(splits), np.float64)
    total = np.zeros(len(splits), np.float64)
    try:
        model.eval()
        for step, mb in enumerate(_sampled(sampler, targets, int(steps), batch_size, seed)):
            sel = slice(step * batch_size, (step + 1) * batch_size)
            x = features.pull(mb.n_id).clone()
            if normalize:
                s = x.sum(1, keepdim=True)
                x = torch.where(s != 0, x / torch.where(s != 0, s, 1.0), x)
            if mb.num_seeds == 0:
                continue
            blocks = mb.with_node_ids(store.to_orig(mb.n_id)) if typed else mb.blocks
            pred = model(x, blocks).argmax(1).numpy()
            y = tables.labels[targets[sel]]
            for k, w in enumerate(which):
                m = w[sel]
                correct[k] += float((pred[m] == y[m]).sum())
                total[k] += float(m.sum())
    finally:
        sampler.close()
    return correct, total


def _sampled(sampler: DistNeighborSampler, targets: np.ndarray, steps: int, bs: int, seed: int):
    """The ``steps`` batches of ``targets``, in order, sampled in groups when the sampler
    reads its neighbour lists from disk (collective: every rank the same group sizes)."""
    size = sampler.group_size(bs)
    for a in range(0, steps, size):
        group = [
            (targets[i * bs : (i + 1) * bs], batch_seed(seed, EVAL_EPOCH, i))
            for i in range(a, min(a + size, steps))
        ]
        yield from sampler.sample_group(group)
