"""Exact distributed evaluation: the one layer loop of :mod:`shoal.training.inference`, with
remote rows pulled from their owners (docs/distributed.md#evaluation-every-engine).

:class:`PullRows` fetches a batch's halo rows from the ranks that own them (one collective pull
per batch; ranks with fewer batches pull nothing until every rank is done), so memory is
O(batch + one layer's output of the rank's parts). Accuracy counts are all-reduced: every rank
returns the same numbers. A typed store's batch is sized by the memory budget
(:func:`budgeted_batch_size`): a batch holds every in-neighbour of every relation at the padded
input width (on an IGBH-shaped store a batch of 1024 with a hub held 323 MB; issue 53).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.distributed.blocked import blocked_dist_counts, needed_nodes_dist
from shoal.distributed.comm import CommStats
from shoal.distributed.feature_store import DistFeatureStore, placement
from shoal.distributed.runtime import DistContext
from shoal.distributed.sampled_eval import sampled_dist_counts
from shoal.distributed.tables import NodeTables
from shoal.errors import ShoalInputError
from shoal.rows.gather import read_rows
from shoal.rows.parts import part_rows
from shoal.sample.sampler import NeighborSampler
from shoal.store.reader import Partition, Store
from shoal.training.blocked import sum_layers
from shoal.training.inference import BLOCKED_BUDGET, RowProvider, Scratch, Segment, run_layers

__all__ = [
    "EVAL_ROW_COPIES",
    "PullRows",
    "budgeted_batch_size",
    "dist_evaluate",
    "reads_node_tables",
    "target_segment",
]

#: copies of a layer-0 input row a batch of the layer loop holds at once: the batch's rows,
#: the rows pulled from their owners, the rows read for a peer's pull, the model's per-type
#: slices of its input rows (float32, ``dim`` wide each)
EVAL_ROW_COPIES = 4


class PullRows(RowProvider):
    """Remote rows of a layer pulled from their owners (collective)."""

    def __init__(self, store: Store, part_to_rank: np.ndarray, ctx: DistContext, stats):
        self.store = store
        self.part_to_rank = part_to_rank
        self.ctx = ctx
        self.stats = stats
        self.feature_dim = int(store.feature_dim)
        self.fs: DistFeatureStore | None = None

    def set_layer(self, inputs: dict[int, np.ndarray], dim: int) -> None:
        self.dim = dim
        self.fs = DistFeatureStore(
            **placement(self.store, self.part_to_rank, self.ctx),
            local_parts=inputs,
            feature_dim=dim,
            stats=self.stats,
            gather=read_rows,
        )

    def num_steps(self, local_steps: int) -> int:
        t = torch.tensor([local_steps], dtype=torch.int64)
        if self.ctx.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def end_layer(self) -> None:
        self.fs = None

    def fetch(self, ids: np.ndarray) -> np.ndarray:
        assert self.fs is not None
        if self.ctx.world_size == 1 and not len(ids):
            return np.empty((0, self.dim), np.float32)
        return self.fs.pull(ids).numpy()


def _batch_rows(seg: Segment, batch_size: int, last: bool) -> int:
    """The most input rows a batch of ``batch_size`` of ``seg``'s steps can hold (the layer
    loop's batches: every core row in order, or the targets of the last layer): its nodes
    plus all their in-neighbours (every relation), counted with repeats."""
    indptr = np.asarray(seg.sampler.indptr, np.int64)
    if last:
        nodes = np.asarray(seg.targets, np.int64)
        per = indptr[nodes + 1] - indptr[nodes] + 1
    else:
        per = np.diff(indptr[: seg.num_core + 1]) + 1
    if not len(per):
        return 0
    cs = np.concatenate([[0], np.cumsum(per)])
    start = np.arange(0, len(per), batch_size)
    return int((cs[np.minimum(start + batch_size, len(per))] - cs[start]).max())


def budgeted_batch_size(
    segments: list[Segment], batch_size: int, budget: int | None, row_bytes: int, layers: int
) -> int:
    """The largest ``batch_size / 2**k`` (at least 1) whose layer-0 batches' input rows
    (:func:`_batch_rows`, :data:`EVAL_ROW_COPIES` copies of ``row_bytes`` each) fit in
    ``budget`` bytes in every segment; ``batch_size`` without a budget."""
    if not budget or batch_size <= 1 or not segments:
        return batch_size
    most = max(1, int(budget) // (EVAL_ROW_COPIES * max(int(row_bytes), 1)))
    b = int(batch_size)
    while b > 1 and any(_batch_rows(s, b, layers <= 1) > most for s in segments):
        b //= 2
    return b


def target_segment(
    part: Partition, tables: NodeTables, targets: np.ndarray, threads: int = 8
) -> Segment:
    """Part ``part`` as a segment of the layer loop whose outputs are wanted for the core
    nodes ``targets`` (local ids; its halo rows pulled from their owners)."""
    halo = np.asarray(part.halo_ids, dtype=np.int64)
    store, typed = part.store, part.store.schema is not None
    local = np.concatenate([part.core_ids, halo])
    sampler = NeighborSampler(
        part.indptr,
        part.indices,
        (-1,),
        num_nodes=part.num_nodes,
        degrees=tables.degrees[local],
        # a typed part: every local node's type and every entry's relation label the blocks
        schema=store.schema,
        node_type=store.type_of(local) if typed else None,
        edge_types=np.asarray(part.edge_types) if typed else None,
    )
    return Segment(
        key=part.index,
        sampler=sampler,
        num_core=part.num_core,
        inputs=part_rows(part, threads=threads) if typed else part.features,
        remote=halo,
        targets=targets.astype(np.int64),
        original=(lambda ids: store.to_orig(local[ids])) if typed else None,
    )


def _layer_wise(model: nn.Module, fanouts) -> bool:
    """Whether :func:`dist_evaluate` runs ``model`` layer by layer (exact: no ``fanouts``)."""
    return fanouts is None and hasattr(model, "layer_forward")


def reads_node_tables(model: nn.Module, halo: str) -> bool:
    """Whether an exact :func:`dist_evaluate` of ``model`` on an untyped store's node task
    reads the per-node tables: not when its layers are sums with served halos (each part's
    own degrees and labels), else yes (sampled, stored halos, other models)."""
    return not (_layer_wise(model, None) and halo == "served" and sum_layers(model) is not None)


@torch.no_grad()
def dist_evaluate(
    model: nn.Module,
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    tables: NodeTables,
    *,
    splits: tuple[str, ...] = ("val", "test"),
    batch_size: int = 1024,
    normalize_features: bool = False,
    stats: CommStats | None = None,
    scratch_dir: str | os.PathLike | None = None,
    memory_budget: int | None = None,
    threads: int = 8,
    halo: str = "served",
    fanouts: tuple[int, ...] | None = None,
    seed: int = 0,
    structure_group: int | None = None,
    id_book: int = 0,
) -> dict[str, float]:
    """Exact accuracy on ``splits`` by distributed layer-wise inference. Collective.
    With ``fanouts`` (one per layer), the accuracy on neighbourhoods sampled from the
    streams of ``seed`` instead (:func:`~shoal.distributed.sampled_eval.sampled_dist_counts`:
    the same draws at every call; a sampled validation during training).

    Same numbers as :func:`shoal.training.inference.evaluate` on the unpartitioned graph for
    the same weights. Temporary arrays go to ``scratch_dir`` (default: beside the store). Sum
    layers (:func:`~shoal.training.blocked.sum_layers`) run blocked
    (:mod:`shoal.distributed.blocked`; ``memory_budget`` default 1 GiB, ``halo`` default
    ``"served"``), other models (GAT) by batches of ``batch_size`` targets, sampled in
    groups read from disk when ``structure_group`` is given (the parts' neighbour lists on
    disk: :func:`~shoal.distributed.sampled_eval.sampled_dist_counts`). ``id_book``: bytes
    set aside beside ``memory_budget`` for the blocked layers' node sets (the unused rest is
    theirs: :func:`~shoal.distributed.blocked.blocked_dist_outputs`).
    """
    model.eval()
    if store.feature_dim is None:
        raise ShoalInputError("the store has no features", path=store.path)
    if not _layer_wise(model, fanouts):  # model(x, blocks)
        correct, total = sampled_dist_counts(
            model,
            store,
            parts,
            part_to_rank,
            ctx,
            tables,
            splits,
            num_layers=int(getattr(model, "num_layers", 0) or 0),
            batch_size=batch_size,
            normalize=normalize_features,
            stats=stats,
            fanouts=fanouts,
            seed=seed,
            structure_group=structure_group,
            threads=threads,
        )
        return _reduce(ctx, splits, correct, total)
    layers = sum_layers(model)
    if layers is not None:
        with Scratch(scratch_dir, beside=store.path) as scratch:
            correct, total = blocked_dist_counts(
                layers,
                store,
                parts,
                part_to_rank,
                ctx,
                tables,
                splits,
                scratch=scratch,
                budget=memory_budget or BLOCKED_BUDGET,
                normalize=normalize_features,
                stats=stats,
                threads=threads,
                halo=halo,
                id_book=id_book if memory_budget else 0,
            )
        return _reduce(ctx, splits, correct, total)
    masks = {p.index: [np.asarray(p.mask(s)) for s in splits] for p in parts}
    segments = [target_segment(p, tables, _wanted(masks[p.index]), threads) for p in parts]
    _restrict(segments, parts, store, part_to_rank, ctx, int(model.num_layers), stats)
    correct = np.zeros(len(splits), dtype=np.float64)
    total = np.zeros(len(splits), dtype=np.float64)
    starts = {p.index: p.start for p in parts}

    def count(seg: Segment, rows: np.ndarray, logits: np.ndarray) -> None:
        local = seg.targets[rows]
        pred = logits.argmax(1)
        y = tables.labels[starts[seg.key] + local]
        for k, m in enumerate(masks[seg.key]):
            sel = m[local]
            correct[k] += float((pred[sel] == y[sel]).sum())
            total[k] += float(sel.sum())

    if store.schema is not None:  # every relation's neighbours at the padded width
        rb = int(store.feature_dim) * np.dtype(np.float32).itemsize
        layers = int(getattr(model, "num_layers", 1) or 1)
        batch_size = budgeted_batch_size(segments, batch_size, memory_budget, rb, layers)
    provider = PullRows(store, part_to_rank, ctx, stats if stats is not None else CommStats())
    with Scratch(scratch_dir, beside=store.path) as scratch:
        run_layers(
            model,
            segments,
            count,
            provider=provider,
            normalize_features=normalize_features,
            batch_size=batch_size,
            scratch=scratch,
            show_progress=False,
        )
    return _reduce(ctx, splits, correct, total)


def _restrict(segments, parts, store, part_to_rank, ctx, num_layers: int, stats) -> None:
    """Each segment's receptive field (:attr:`Segment.needed`), the other ranks' asks
    included (:func:`~shoal.distributed.blocked.needed_nodes_dist` over ``num_layers + 1``
    levels: the last the targets, the first the rows whose inputs layer 0 reads). Collective."""
    targets = {s.key: np.asarray(s.targets, np.int64) for s in segments}
    stats = stats if stats is not None else CommStats()
    core, _ = needed_nodes_dist(
        store, parts, part_to_rank, ctx, targets, num_layers + 1, stats, keep_halo=False
    )
    for seg in segments:
        seg.needed = [core[li][seg.key] for li in range(num_layers + 1)]


def _wanted(masks: list[np.ndarray]) -> np.ndarray:
    """The local ids any of ``masks`` selects."""
    return np.flatnonzero(np.logical_or.reduce(masks)) if masks else np.empty(0, np.int64)


def _reduce(ctx: DistContext, splits, correct: np.ndarray, total: np.ndarray) -> dict[str, float]:
    t = torch.from_numpy(np.concatenate([correct, total]))
    if ctx.world_size > 1:
        dist.all_reduce(t)
    c, n = t[: len(splits)].numpy(), t[len(splits) :].numpy()
    return {s: float(c[k] / n[k]) if n[k] else math.nan for k, s in enumerate(splits)}
