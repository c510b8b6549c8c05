"""The link task on an engine's ranks (``--task link``): what every engine trains by it.

The engines differ in how a batch's node outputs are computed; the link task is the same for
all of them (:class:`~shoal.training.tasks.LinkTask` is its single-process twin, whose seeds,
losses and metric it follows): positives (:class:`RankPositives`), negatives
(:class:`NegativeRanges`), a step (:class:`LinkStep`: its positive edges and their reverses
excluded at every hop; the scorer is the model's submodule ``link_scorer``,
:func:`attach_scorer`) and the exact, collective evaluation
(:meth:`DistLinkTask.evaluate`, :func:`dist_node_embeddings`). An engine computing only its
parts' nodes (``link_scope = "part"``) trains on the edges between two core nodes of one part,
negatives from that part. All of it: docs/linkpred.md#across-processes-every-engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.distributed.blocked import blocked_dist_outputs
from shoal.distributed.comm import CommStats
from shoal.distributed.evaluate import PullRows, target_segment
from shoal.distributed.feature_store import DistFeatureStore, owner_of, placement
from shoal.errors import ShoalInputError
from shoal.nn.linkpred import build_scorer, link_loss
from shoal.nn.ondevice import on_device
from shoal.store.reader import Partition
from shoal.training import batch_seed
from shoal.training.blocked import sum_layers
from shoal.training.inference import BLOCKED_BUDGET, Scratch, run_layers
from shoal.training.linkbatches import flip_random
from shoal.training.linkdata import EVAL_CHUNK, eval_negative_chunk
from shoal.training.linkmetrics import link_ranks
from shoal.training.loop import eval_work_ratio
from shoal.utils.arrays import unique_sorted

__all__ = [
    "DistLinkTask",
    "LinkStep",
    "NegativeRanges",
    "RankPositives",
    "attach_scorer",
    "dist_link_metrics",
    "dist_node_embeddings",
]

#: the name of the scorer's submodule in an engine's model
SCORER = "link_scorer"


def attach_scorer(model: nn.Module, scorer: nn.Module) -> nn.Module:
    """``model`` with ``scorer`` as its submodule ``link_scorer`` (the module docstring)."""
    model.add_module(SCORER, scorer)
    return model


class RankPositives:
    """The positive edges of a rank's parts (docs/linkpred.md#across-processes-every-engine).

    Args:
        parts: the parts the rank holds; directed: whether the graph is directed;
        rank: the rank (its shuffles get their own stream); target: a typed store's target
            relation (only its edges are positives; None: every edge); within_part: only
            edges whose two ends are core nodes of the same part (default False);
            chunk_edges: neighbour-list entries per shuffled chunk (default 65536; memory is
            one chunk).
    """

    def __init__(
        self,
        parts: Sequence[Partition],
        *,
        directed: bool,
        rank: int = 0,
        target: int | None = None,
        within_part: bool = False,
        chunk_edges: int = 1 << 16,
    ) -> None:
        self.parts, self.directed, self.rank = list(parts), directed, rank
        self.target, self.within_part = target, within_part
        self._halo = [np.asarray(p.halo_ids, dtype=np.int64) for p in self.parts]
        self.chunks = [
            (k, s, min(s + chunk_edges, int(p.indptr[-1])))
            for k, p in enumerate(self.parts)
            for s in range(0, int(p.indptr[-1]), chunk_edges)
        ]
        self.count = sum(len(self._chunk(c)) for c in range(len(self.chunks)))

    def _chunk(self, c: int) -> np.ndarray:
        """``(k, 2)`` global positives of chunk ``c`` in file order."""
        k, s, e = self.chunks[c]
        p = self.parts[k]
        indptr = np.asarray(p.indptr)
        dst = np.searchsorted(indptr, np.arange(s, e), side="right") - 1 + p.start
        local = np.asarray(p.indices[s:e], dtype=np.int64)
        src, halo = local + p.start, local >= p.num_core  # local index -> global id
        src[halo] = self._halo[k][local[halo] - p.num_core]
        keep = src < dst if not self.directed else src != dst
        if self.within_part:
            keep &= local < p.num_core
        if self.target is not None:
            keep &= np.asarray(p.edge_types[s:e]) == self.target
        return np.stack([src[keep], dst[keep]], axis=1)

    def epoch(self, seed: int, epoch: int, num_batches: int) -> Iterator[np.ndarray]:
        """Exactly ``num_batches`` ``(B, 2)`` batches (the last ones smaller, maybe empty)."""
        size = max(1, math.ceil(self.count / max(num_batches, 1)))
        rng = np.random.default_rng([seed, epoch, 0x11C, self.rank])
        buf, done = np.zeros((0, 2), np.int64), 0
        for c in rng.permutation(len(self.chunks)):
            e = self._chunk(int(c))
            if not self.directed:
                flip_random(e, rng)
            buf = np.concatenate([buf, e[rng.permutation(len(e))]])
            while len(buf) >= size and done < num_batches:
                yield buf[:size]
                buf, done = buf[size:], done + 1
        while done < num_batches:
            yield buf[:size]
            buf, done = buf[size:], done + 1


class NegativeRanges:
    """Uniform draws over the union of id ranges ``[starts[i], starts[i] + sizes[i])``."""

    def __init__(self, starts: np.ndarray, sizes: np.ndarray) -> None:
        self.starts = np.asarray(starts, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.ends = np.cumsum(self.sizes)
        self.total = int(self.ends[-1]) if len(self.ends) else 0

    def draw(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        if self.total == 0:
            raise ShoalInputError(
                "no node to draw a negative from (the rank holds no node of the target's "
                "destination type)",
                fix="use --negatives uniform, or fewer processes",
            )
        j = rng.integers(0, self.total, size=shape, dtype=np.int64)
        which = np.searchsorted(self.ends, j, side="right")
        return self.starts[which] + j - (self.ends - self.sizes)[which]


@dataclass
class LinkStep:
    """A rank's batch: positives, negative destinations, the end nodes (sorted), its seed."""

    pos: np.ndarray
    neg: np.ndarray
    nodes: np.ndarray
    seed: int

    @property
    def exclude(self) -> np.ndarray:
        """The edges message passing must not use: the positives and their reverses."""
        return np.concatenate([self.pos, self.pos[:, ::-1]])

    def __len__(self) -> int:
        return len(self.pos)


class DistLinkTask:
    """The link task of an engine (module docstring; built collectively by ``Engine``)."""

    name = "link"
    metric = "mrr"

    def __init__(self, engine: Any) -> None:
        store, cfg = engine.store, engine.train_config
        self.store, self.config, self.link, self.ctx = store, cfg, cfg.link, engine.ctx
        self.parts, self.part_to_rank = engine.parts, engine.part_to_rank
        self._check_inputs()
        split = store.link_split
        self.target: int | None = None
        self.dst_type: int | None = None
        directed = bool(store.meta["directed"])
        if store.schema is not None:
            self.target = int(split["target_relation_index"])
            names = [t.name for t in store.schema.node_types]
            self.dst_type = names.index(store.schema.edge_types[self.target].dst)
            # a relation holding both directions of its pairs: each pair once
            directed = not str(split.get("pairs", "")).startswith("unordered")
        #: "graph" (default): any positive and negative; "part": an engine whose step computes
        #: only its own part's nodes (``Engine.link_scope``) trains on the edges inside each
        #: part, with negatives from the positive's part
        self.scope = getattr(engine, "link_scope", "graph")
        self.positives = RankPositives(
            self.parts,
            directed=directed,
            rank=self.ctx.rank,
            target=self.target,
            within_part=self.scope == "part",
        )
        most = torch.tensor([self.positives.count], dtype=torch.int64)
        total = most.clone()
        if self.ctx.world_size > 1:
            dist.all_reduce(most, op=dist.ReduceOp.MAX)
            dist.all_reduce(total)
        self.num_batches = max(1, math.ceil(int(most) / cfg.sampling.batch_size))
        self.total_positives = int(total)
        self.everywhere = self._ranges(range(store.num_parts))
        self.own = self._ranges(p.index for p in self.parts)
        self.of_part = {p.index: self._ranges([p.index]) for p in self.parts}

    def _check_inputs(self) -> None:
        store = self.store
        if store.link_edges("val") is None or store.link_edges("test") is None:
            raise ShoalInputError(
                "--task link needs held-out edges in the store (link_val.npy, link_test.npy)",
                path=store.path,
                fix="split the edges first (shoal data split-edges G --out G-link), then "
                "partition G-link and build the store from it",
            )
        if store.schema is not None and "target_relation_index" not in store.link_split:
            raise ShoalInputError(
                "the typed store names no target relation (meta.json has no link_split: its "
                "graph was not split with one, or the store was built before stores kept it)",
                path=store.path,
                fix="build the store again from the split graph (shoal data split-edges "
                "--target-relation NAME, then shoal store build SPLIT ASSIGNMENT)",
            )
        if store.schema is None and store.feature_dim is None and not self.link.embedding_dim:
            raise ShoalInputError(
                "the store has no features",
                path=store.path,
                fix="learn an embedding per node instead: --embedding-dim 64 (--engine minibatch)",
            )

    def _ranges(self, parts: Any) -> NegativeRanges:
        """The ids negatives are drawn from in ``parts`` (a typed target's destination type)."""
        parts = list(parts)
        off = np.asarray(self.store.part_offsets, dtype=np.int64)
        if self.dst_type is None:
            starts, ends = off[parts], off[np.asarray(parts, dtype=np.int64) + 1]
        else:
            b = self.store.type_bounds
            starts, ends = b[parts, self.dst_type], b[parts, self.dst_type + 1]
        return NegativeRanges(starts, np.asarray(ends) - np.asarray(starts))

    def head(self) -> nn.Module:
        """The edge scorer (built after the encoder from the same seed on every rank)."""
        cfg = self.config
        return build_scorer(self.link.scorer, cfg.model.hidden, dropout=cfg.model.dropout)

    def negatives(self, pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(B, K)`` negative destinations for this rank's positives ``pos``."""
        k, how = self.link.num_neg, self.link.negatives
        if self.scope == "part" and (how != "in-batch" or len(pos) < 2):  # the positive's part
            out = np.empty((len(pos), k), np.int64)
            part = self.store.owner(pos[:, 1]) if len(pos) else pos[:, 1]
            for i in np.unique(part):
                sel = np.flatnonzero(part == i)
                out[sel] = self.of_part[int(i)].draw((len(sel), k), rng)
            return out
        if how == "in-batch" and len(pos) >= 2:
            j = rng.integers(0, len(pos) - 1, size=(len(pos), k))
            j += j >= np.arange(len(pos))[:, None]  # any other positive, never itself
            return pos[j, 1]
        ranges = self.own if how == "owner-local" else self.everywhere
        return ranges.draw((len(pos), k), rng)

    def steps(self, epoch: int) -> Iterator[LinkStep]:
        """This rank's :attr:`num_batches` steps of ``epoch`` (the same when drawn again)."""
        seed0, rank = self.config.run.seed, self.ctx.rank
        for step, pos in enumerate(self.positives.epoch(seed0, epoch, self.num_batches)):
            yield self.step(pos, batch_seed(seed0, epoch, step) + rank)

    def step(self, pos: np.ndarray, seed: int) -> LinkStep:
        """The step of positives ``pos`` and batch seed ``seed`` (its negatives drawn)."""
        neg = self.negatives(pos, np.random.default_rng(seed))
        nodes = unique_sorted(np.concatenate([pos.ravel(), neg.ravel()]))
        return LinkStep(pos, neg, nodes, seed)

    def part_positives(self, part: Partition) -> RankPositives:
        """One part's positives, shuffled by the part's own stream (a per-part model)."""
        return RankPositives(
            [part],
            directed=self.positives.directed,
            rank=part.index,
            target=self.target,
            within_part=self.scope == "part",
        )

    def loss(self, model: nn.Module, h: torch.Tensor, step: LinkStep) -> torch.Tensor:
        """The link loss of ``step`` from ``h``, the outputs of ``step.nodes`` (in order),
        scored by ``model``'s scorer; a step without positives gives a zero that still
        reaches every weight (its rank takes part in the all-reduce)."""
        scorer = getattr(model, SCORER)
        if not len(step):
            return h.sum() * 0.0 + sum(p.sum() * 0.0 for p in scorer.parameters())
        at = lambda a: torch.from_numpy(np.searchsorted(step.nodes, a)).to(h.device)  # noqa: E731
        u, k = step.pos[:, 0], step.neg.shape[1]
        sp = scorer(h[at(u)], h[at(step.pos[:, 1])])
        sn = scorer(h[at(np.repeat(u, k))], h[at(step.neg.ravel())])
        return link_loss(self.link.loss, sp, sn.view(len(step), k), margin=self.link.margin)

    def evaluate(
        self,
        model: nn.Module,
        tables: Any,
        splits: tuple[str, ...],
        *,
        device: torch.device | None = None,
        budget: int | None = None,
        inputs: dict[int, np.ndarray] | None = None,
    ) -> dict[str, float]:
        """MRR per split (and ``<split>_hits@K``) from exact distributed embeddings of
        ``model`` computed on ``device`` (default the host; collective) within ``budget``
        bytes (default :data:`~shoal.training.inference.BLOCKED_BUDGET`). ``inputs``: learned
        layer-0 rows per part (default the store's)."""
        device = device or torch.device("cpu")
        scorer = on_device(getattr(model, SCORER), device)
        out: dict[str, float] = {}
        with Scratch(self.config.memory.scratch_dir, beside=self.store.path) as scratch:
            budget = budget or BLOCKED_BUDGET
            model = on_device(model, device)
            emb = dist_node_embeddings(self, model, tables, scratch, budget, inputs=inputs)
            for s in splits:
                mrr, hits = dist_link_metrics(self, scorer, emb, s)
                out[s], out[f"{s}_hits@{self.link.hits_k}"] = mrr, hits
        return out

    def eval_work_ratio(self) -> float:
        """An exact evaluation's work over an epoch's (seeds: every positive's ends, negatives)."""
        return eval_work_ratio(
            num_nodes=self.store.num_nodes,
            num_edges=self.store.num_edges,
            num_seeds=self.total_positives * (2 + self.link.num_neg),
            fanouts=self.config.sampling.fanouts,
        )

    def settings(self) -> dict[str, Any]:
        return {"task": "link", **{f"link_{k}": v for k, v in vars(self.link).items()}}


@torch.no_grad()
def dist_node_embeddings(
    task: DistLinkTask,
    model: nn.Module,
    tables: Any,
    scratch: Scratch,
    budget: int,
    *,
    inputs: dict[int, np.ndarray] | None = None,
    stats: CommStats | None = None,
) -> dict[int, np.ndarray]:
    """Part -> ``(num_core, hidden)`` exact outputs of ``model`` for the core nodes of
    ``task``'s parts (its store, placement and run's options; collective; the same rows as
    :func:`shoal.training.inference.layerwise_inference` on the unpartitioned graph). A model whose layers sum messages runs the blocked layer-wise inference with halo
    exchanges (:func:`~shoal.distributed.blocked.blocked_dist_outputs`); any other model with
    ``layer_forward`` (GAT, the relational models) the layer loop over batches of targets,
    remote rows pulled from their owners (:func:`~shoal.training.inference.run_layers`).
    ``inputs``: layer-0 rows per part (default the store's features, normalized as
    configured)."""
    store, parts, part_to_rank, ctx = task.store, task.parts, task.part_to_rank, task.ctx
    cfg = task.config
    width, threads = cfg.model.hidden, cfg.memory.io_threads
    normalize = bool(cfg.model.normalize_features) and inputs is None
    if not hasattr(model, "layer_forward"):
        raise ShoalInputError(
            "distributed link evaluation runs the model layer by layer (layer_forward)",
            fix="use one of shoal's models (--model), or train link prediction in one process",
        )
    model.eval()
    out = {p.index: scratch.array(p.num_core, width) for p in parts}
    layers = sum_layers(model)
    if layers is not None:

        def keep(part: int):
            def put(pos: np.ndarray, h: np.ndarray, todo: np.ndarray) -> None:
                out[part][todo[pos]] = h

            return put

        blocked_dist_outputs(
            layers,
            store,
            parts,
            part_to_rank,
            ctx,
            tables,
            {p.index: np.arange(p.num_core, dtype=np.int64) for p in parts},
            {p.index: keep(p.index) for p in parts},
            scratch=scratch,
            budget=budget,
            normalize=normalize,
            stats=stats,
            threads=threads,
            inputs=inputs,
        )
        return out
    if inputs is not None:
        raise ShoalInputError(
            "learned input rows (--embedding-dim) are evaluated by models whose layers sum "
            "messages",
            fix="use --model sage, gcn, gin or sgc with --embedding-dim",
        )
    segments = [
        target_segment(p, tables, np.arange(p.num_core, dtype=np.int64), threads) for p in parts
    ]

    def put(seg: Any, rows: np.ndarray, h: np.ndarray) -> None:
        out[seg.key][seg.targets[rows]] = h

    provider = PullRows(store, part_to_rank, ctx, stats if stats is not None else CommStats())
    run_layers(
        model,
        segments,
        put,
        provider=provider,
        normalize_features=normalize,
        batch_size=cfg.eval.batch_size,
        scratch=scratch,
        show_progress=False,
    )
    return out


@torch.no_grad()
def dist_link_metrics(
    task: DistLinkTask,
    scorer: nn.Module,
    emb: dict[int, np.ndarray],
    split: str,
    *,
    stats: CommStats | None = None,
) -> tuple[float, float]:
    """(MRR, Hits@K) of ``split``'s held-out positives (collective; ``task``'s store,
    placement, seed and evaluation negatives). The positives are read
    in blocks of :data:`~shoal.training.linkdata.EVAL_CHUNK`; each block's negatives are a
    typed split's fixed ones (``link_<split>_neg.npy``), else the single-process trainer's
    (:func:`~shoal.training.linkdata.eval_negative_chunk`, drawn in original ids and mapped
    to new ones). The owner of a positive's source scores it, pulling the other rows from
    their owners (one collective pull per block; every rank reads every block, so the pulls
    stay paired). Reciprocal-rank and hit sums are all-reduced."""
    store, part_to_rank, ctx = task.store, task.part_to_rank, task.ctx
    seed, num_neg, hits_k = task.config.run.seed, task.link.eval_negatives, task.link.hits_k
    edges, fixed = store.link_edges(split), store.link_negatives(split)
    if edges is None:
        raise ShoalInputError(
            f"the store has no held-out {split} edges (link_{split}.npy)",
            path=store.path,
            fix="split the graph's edges (shoal data split-edges), then partition and build "
            "the store from the split graph",
        )
    rows = DistFeatureStore(
        **placement(store, part_to_rank, ctx),
        local_parts=emb,
        feature_dim=task.config.model.hidden,
        stats=stats,
    )
    sums = np.zeros(3, np.float64)  # reciprocal ranks, hits, positives
    scorer.eval()
    for c in range(math.ceil(len(edges) / EVAL_CHUNK)):
        at = slice(c * EVAL_CHUNK, (c + 1) * EVAL_CHUNK)
        pos = np.asarray(edges[at], dtype=np.int64)
        if fixed is not None:
            neg = np.asarray(fixed[at], dtype=np.int64)
        else:
            neg = store.to_new(
                eval_negative_chunk(seed, split, c, len(pos), store.num_nodes, num_neg)
            )
        mine = part_to_rank[owner_of(store.part_offsets, pos[:, 0])] == ctx.rank
        pos, neg = pos[mine], neg[mine]
        ids = unique_sorted(np.concatenate([pos.ravel(), neg.ravel()]))
        h = rows.pull(ids)
        if not len(pos):
            continue
        hu, hv, hq = (
            h[torch.from_numpy(np.searchsorted(ids, a))]
            for a in (pos[:, 0], pos[:, 1], neg.ravel())
        )
        k = neg.shape[1]
        sp = scorer(hu, hv)
        sq = scorer(hu.repeat_interleave(k, 0), hq).view(len(pos), k)
        r = link_ranks(sp, sq)
        sums += (float(np.sum(1.0 / r)), float(np.sum(r <= hits_k)), float(len(r)))
    t = torch.from_numpy(sums)
    if ctx.world_size > 1:
        dist.all_reduce(t)
    n = float(t[2])
    return (float(t[0]) / n, float(t[1]) / n) if n else (math.nan, math.nan)
