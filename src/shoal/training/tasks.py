"""What a run learns, as a seam of the one trainer: node classification and link prediction.

A task says what its seeds are, how a batch's output becomes a loss, and how evaluation
scores (as GraphBolt and GraphStorm keep tasks apart from their training infrastructure); the
:class:`~shoal.training.trainer.Trainer` owns everything else. :class:`NodeTask` (``--task
node``): the training nodes' cross entropy, exact layer-wise accuracy. :class:`LinkTask`
(``--task link``, a graph split by ``shoal data split-edges``): positive edges and their
negatives (:class:`~shoal.training.linkbatches.LinkBatchLoader`), an edge scorer trained
beside the encoder, OGB's MRR and Hits@K, a heuristic baseline after the run
(docs/linkpred.md#the-pieces).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from shoal.errors import ShoalInputError
from shoal.nn.linkpred import build_scorer, link_loss
from shoal.nn.ondevice import on_device
from shoal.training.batches import BatchLoader, train_step
from shoal.training.config import TrainConfig
from shoal.training.embedding import (
    NodeEmbedding,
    SparseAdagrad,
    SparseAdam,
    TableRows,
    load_tables,
    save_tables,
    table_dir,
)
from shoal.training.inference import evaluate, layerwise_inference, sampled_evaluate
from shoal.training.link_config import LinkConfig
from shoal.training.linkbatches import LinkBatchLoader
from shoal.training.linkdata import LinkData, eval_negatives, score_held_out
from shoal.training.linkheuristics import heuristic_ranking_scores
from shoal.training.linkmetrics import mrr_hits
from shoal.training.loop import eval_work_ratio
from shoal.training.meter import EpochMeter
from shoal.training.result import RunResult
from shoal.utils.arrays import unique_sorted

#: the trainer a task serves (:class:`~shoal.training.trainer.Trainer`, which imports this
#: module: the hooks read its ``model``, ``optimizer``, ``features``, ``sampler``, ``loader``,
#: ``feed``, ``tables``, ``timer`` and ``device``)
Trainer = Any

__all__ = ["LinkTask", "NodeTask", "Task", "make_task"]

log = logging.getLogger("shoal.training")


class Task(ABC):
    """One task of the trainer (module docstring); a subclass fills its hooks."""

    #: ``--task``'s name
    name: str = "node"
    #: the selection metric (validation), reported as ``val_<metric>``/``test_<metric>``
    metric: str = "accuracy"
    #: where the trainer keeps the graph's neighbour lists: ``None`` (the memory plan's
    #: choice) or ``"memory"`` (a task that excludes edges needs the rows in memory)
    structure: str | None = None

    def __init__(self, config: TrainConfig, data: Any) -> None:
        self.config, self.data = config, data

    @property
    @abstractmethod
    def num_seeds(self) -> int:
        """An epoch's seeds (what ``min_steps`` counts steps by)."""

    @abstractmethod
    def out_dim(self) -> int:
        """The model's output width."""

    def in_dim(self) -> int | None:
        """The model's input width when it is not the features' (default None)."""
        return None

    def head(self) -> nn.Module | None:
        """A module trained beside the model (default None)."""
        return None

    @abstractmethod
    def loader(self, trainer: Trainer) -> Any:
        """The epochs' batches (``.epoch(e)``; the trainer reads ahead for it when it can)."""

    @abstractmethod
    def train_epoch(self, trainer: Trainer, epoch: int, meter: EpochMeter) -> None:
        """One epoch's steps on ``trainer.loader``, counted on ``meter``."""

    @abstractmethod
    def num_targets(self, splits: tuple[str, ...]) -> int:
        """Nodes an evaluation of ``splits`` holds per-target books for."""

    @abstractmethod
    def evaluate(
        self,
        trainer: Trainer,
        splits: tuple[str, ...],
        budget: int,
        fanouts: tuple[int, ...] | None = None,
    ) -> dict[str, float]:
        """The metric on ``splits`` within ``budget`` bytes of working memory; sampled with
        ``fanouts`` (``--eval-fanouts``) where the task supports it, else exact."""

    @abstractmethod
    def eval_work_ratio(self) -> float:
        """An exact evaluation's work over an epoch's (``--eval-every auto``)."""

    def identity(self) -> dict[str, Any]:
        """What a resumed run must match beside the trainer's own keys."""
        return {}

    def settings(self) -> dict[str, Any]:
        """Recorded in the result beside the trainer's."""
        return {}

    def state(self) -> dict[str, Any]:
        """The task's part of a checkpoint."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        return None

    def finish(self, result: RunResult) -> RunResult:
        """The result after the loop (a task adds its own figures)."""
        return result


class NodeTask(Task):
    """Node classification: the training nodes, the cross entropy, exact accuracy."""

    @property
    def num_seeds(self) -> int:
        return len(self.data.train_idx)

    def out_dim(self) -> int:
        return int(self.data.num_classes)

    def loader(self, trainer: Trainer) -> BatchLoader:
        data = self.data
        return BatchLoader(
            trainer.sampler,
            trainer.features,
            data.labels,
            data.train_idx,
            batch_size=self.config.sampling.batch_size,
            seed=self.config.run.seed,
            timer=trainer.timer,
        )

    def train_epoch(self, trainer: Trainer, epoch: int, meter: EpochMeter) -> None:
        key, tables = self.config.run.seed, trainer.tables
        lazy = trainer.device.type == "cuda"  # (the loss read at the epoch's end: no waits)
        for step, batch in enumerate(trainer.batches(epoch)):
            # masks keyed by (seed, epoch, step, node): one batch per epoch is full-graph
            # training, the same model as the fullgraph engine's on any number of processes
            if tables is not None:
                with meter.time("embedding"):
                    batch = tables.embed(batch)
            with meter.time("forward_backward"):
                loss, ok = train_step(
                    trainer.model,
                    trainer.optimizer,
                    batch,
                    dropout_key=(key, epoch, step),
                    lazy=lazy,
                )
            if tables is not None:
                with meter.time("embedding"):
                    tables.step()
            meter.step(loss, ok, len(batch.y))

    def num_targets(self, splits: tuple[str, ...]) -> int:
        return sum(len(self.data.split(s)) for s in splits)

    def evaluate(
        self,
        trainer: Trainer,
        splits: tuple[str, ...],
        budget: int,
        fanouts: tuple[int, ...] | None = None,
    ) -> dict[str, float]:
        data, features = self.data, trainer.features
        normalize = self.config.model.normalize_features
        if trainer.tables is not None:  # layer 0 reads the tables' rows (as they are now)
            rows = TableRows(data.features, trainer.tables, normalize=bool(normalize))
            data, features, normalize = replace(data, features=rows), None, False
        sampler = trainer.eval_sampler(fanouts) if fanouts is not None else None
        if sampler is not None:
            return sampled_evaluate(
                on_device(trainer.model, trainer.device),
                data,
                splits,
                sampler=sampler,
                fanouts=fanouts,
                seed=self.config.run.seed,
                normalize_features=bool(normalize),
                batch_size=self.config.eval.batch_size,
                memory_budget=budget,
            )
        return evaluate(
            on_device(trainer.model, trainer.device),
            data,
            splits,
            sampler=trainer.sampler,
            normalize_features=normalize,
            batch_size=self.config.eval.batch_size,
            show_progress=self.config.run.progress,
            scratch_dir=self.config.memory.scratch_dir,
            features=features,
            memory_budget=budget,
        )

    def eval_work_ratio(self) -> float:
        return eval_work_ratio(
            num_nodes=self.data.num_nodes,
            num_edges=int(self.data.indptr[-1]),
            num_seeds=len(self.data.train_idx),
            fanouts=self.config.sampling.fanouts,
        )

    def identity(self) -> dict[str, Any]:
        return {"num_classes": self.data.num_classes}


class LinkTask(Task):
    """Link prediction on a split graph (module docstring). ``link``: its options
    (default ``config.link``)."""

    name = "link"
    metric = "mrr"
    structure = "memory"  # a batch's edges are excluded from its rows: the CSR in memory

    def __init__(self, config: TrainConfig, data: LinkData, link: LinkConfig | None = None):
        super().__init__(config, data)
        self.link = link or config.link
        self._eval_neg: dict[str, np.ndarray] = {}
        self.embedding, self.embedding_opt = self._embedding()
        self.scorer: nn.Module | None = None

    @property
    def num_seeds(self) -> int:
        return len(self.data.edges)

    def out_dim(self) -> int:
        return int(self.config.model.hidden)

    def in_dim(self) -> int | None:
        return self.link.embedding_dim or None

    def head(self) -> nn.Module:
        cfg = self.config
        self.scorer = build_scorer(self.link.scorer, cfg.model.hidden, dropout=cfg.model.dropout)
        return self.scorer

    def _embedding(self) -> tuple[NodeEmbedding | None, Any]:
        """The learnable input table and its sparse optimizer (``embedding_dim > 0``); its
        rows become ``data.features`` for evaluation."""
        config, link, data = self.config, self.link, self.data
        if link.embedding_dim and data.schema is not None:
            raise ShoalInputError(
                "--embedding-dim on a typed graph: a featureless node type learns its rows "
                "in the model already",
                path=data.path,
                fix="drop --embedding-dim (--type-embeddings disk keeps them on disk)",
            )
        if not link.embedding_dim:
            if data.features is None:
                raise ShoalInputError(
                    "the graph has no features.npy",
                    path=data.path,
                    fix="learn an embedding per node instead: --embedding-dim 64",
                )
            return None, None
        where = table_dir(link.embedding_dir, data.path, resume=config.checkpoint.resume)
        emb = NodeEmbedding(where, data.num_nodes, link.embedding_dim, seed=config.run.seed)
        lr = link.embedding_lr or config.optim.lr
        opt = (SparseAdam if link.embedding_optimizer == "adam" else SparseAdagrad)(emb, lr=lr)
        data.features = emb.weight
        return emb, opt

    def loader(self, trainer: Trainer) -> LinkBatchLoader:
        data, cfg, link = self.data, self.config, self.link
        # the budgeted store's rows (cache, planned reads), or the learned table's
        gatherer = self.embedding if self.embedding is not None else trainer.features
        return LinkBatchLoader(
            trainer.sampler,
            gatherer,
            data.edges,
            directed=data.directed,
            num_nodes=data.num_nodes,
            batch_size=cfg.sampling.batch_size,
            num_neg=link.num_neg,
            negatives=link.negatives,
            seed=cfg.run.seed,
            timer=trainer.timer,
            relations=data.relations,
            target=data.target,
            neg_range=data.neg_range,
        )

    def train_epoch(self, trainer: Trainer, epoch: int, meter: EpochMeter) -> None:
        model, scorer, opt = trainer.model, self.scorer, trainer.optimizer
        model.train()
        scorer.train()
        for b in trainer.loader.epoch(epoch):
            with meter.time("forward_backward"):
                opt.zero_grad(set_to_none=True)
                x, blocks, bp, bn = self._on_device(b, trainer.device)
                h = model(x, blocks)
                pos = scorer(h[bp[0]], h[bp[1]])
                neg = scorer(h[bn[0]], h[bn[1]]).view(len(pos), b.num_neg)
                loss = link_loss(self.link.loss, pos, neg, margin=self.link.margin)
                loss.backward()
                opt.step()
                if self.embedding_opt is not None:
                    self.embedding_opt.step(b.mb.n_id, x.grad.cpu())
            meter.step_sums(float(loss.detach()) * len(pos), 0, len(pos))
        if self.embedding_opt is not None:
            self.embedding_opt.flush()

    @staticmethod
    def _on_device(b, device: torch.device):
        """The batch's inputs, blocks and positions on the model's device (the learned
        rows as a leaf there, whose gradient the sparse optimizer reads back); a typed
        graph's blocks carry their sources' ids (a featureless type's rows)."""
        blocks = b.mb.with_node_ids() if b.mb.typed else b.mb.blocks
        if device.type == "cpu":
            return b.x, blocks, b.pos, b.neg
        x = b.x.detach().to(device).requires_grad_(b.x.requires_grad)
        return (
            x,
            [blk.to(device) for blk in blocks],
            b.pos.to(device),
            b.neg.to(device),
        )

    def num_targets(self, splits: tuple[str, ...]) -> int:
        return sum(len(self._held(s)) for s in splits)

    def _held(self, split: str) -> np.ndarray:
        return np.asarray(
            self.data.val_edges if split == "val" else self.data.test_edges, dtype=np.int64
        )

    def negatives(self, split: str, pos: np.ndarray) -> np.ndarray:
        """The ``(n, K)`` negative destinations ranked against ``split``'s positives: a
        typed split's fixed ones, else drawn once per split from the run's seed."""
        if self.data.eval_neg and split in self.data.eval_neg:
            return np.asarray(self.data.eval_neg[split], np.int64)
        if split not in self._eval_neg:  # drawn once per split: the same at every evaluation
            self._eval_neg[split] = eval_negatives(
                self.config.run.seed, split, len(pos), self.data.num_nodes, self.link.eval_negatives
            )
        return self._eval_neg[split]

    def evaluate(
        self,
        trainer: Trainer,
        splits: tuple[str, ...],
        budget: int,
        fanouts: tuple[int, ...] | None = None,
    ) -> dict[str, float]:
        """MRR per split (and ``<split>_hits@K``) from exact layer-wise embeddings."""
        out: dict[str, float] = {}
        for s, (sp, sq) in self.scores(trainer, splits).items():
            m = mrr_hits(sp, sq, ks=(self.link.hits_k,))
            out[s] = m["mrr"]
            out[f"{s}_hits@{self.link.hits_k}"] = m[f"hits@{self.link.hits_k}"]
        return out

    @torch.no_grad()
    def scores(
        self, trainer: Trainer, splits: tuple[str, ...]
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split, the scores of its held-out positives ``(n,)`` and of each one's
        negatives ``(n, K)`` from exact layer-wise embeddings (what :meth:`evaluate` ranks)."""
        self.scorer.eval()
        held = {s: self._held(s) for s in splits}
        negs = {s: self.negatives(s, held[s]) for s in splits}
        nodes = unique_sorted(
            np.concatenate([x.ravel() for s in splits for x in (held[s], negs[s])])
        )
        scorer = on_device(self.scorer, trainer.device)
        if not len(nodes):
            return {s: (torch.empty(0), torch.empty((0, negs[s].shape[1]))) for s in splits}
        emb = torch.from_numpy(
            layerwise_inference(
                on_device(trainer.model, trainer.device),
                self.data,
                nodes,
                normalize_features=self.config.model.normalize_features and self.embedding is None,
                batch_size=self.config.eval.batch_size,
                scratch_dir=self.config.memory.scratch_dir,
            )
        )
        return {s: score_held_out(scorer, emb, nodes, held[s], negs[s]) for s in splits}

    def eval_work_ratio(self) -> float:
        """An epoch's seeds are every positive's two ends and its negatives."""
        edges = len(self.data.edges)
        if self.data.relations is not None:  # the target relation's edges only
            edges = int(self.data.schema.edge_types[self.data.target].count or edges)
        pos = edges // (1 if self.data.directed else 2)
        return eval_work_ratio(
            num_nodes=self.data.num_nodes,
            num_edges=len(self.data.edges),
            num_seeds=pos * (2 + self.link.num_neg),
            fanouts=self.config.sampling.fanouts,
        )

    def identity(self) -> dict[str, Any]:
        return {"task": "link"}

    def settings(self) -> dict[str, Any]:
        return {"task": "link", **{f"link_{k}": v for k, v in vars(self.link).items()}}

    def state(self) -> dict[str, Any]:
        """The scorer; a learned table is copied into the checkpoint directory
        (``embedding/``) beside it."""
        snap = self.embedding_opt is not None and bool(self.config.checkpoint.dir)
        if snap:
            save_tables(self.embedding_opt.tables(), Path(self.config.checkpoint.dir) / "embedding")
        return {"scorer": self.scorer.state_dict(), "embedding_snapshot": snap}

    def load_state(self, state: dict[str, Any]) -> None:
        self.scorer.load_state_dict(state["scorer"])
        if state.get("embedding_snapshot") and self.embedding_opt is not None:
            load_tables(self.embedding_opt.tables(), Path(self.config.checkpoint.dir) / "embedding")

    def finish(self, result: RunResult) -> RunResult:
        """Score the ``baseline`` heuristic on the test edges and their negatives
        (``metrics["baseline_test_mrr"]`` and its Hits@K)."""
        if self.link.baseline == "none":
            return result
        t0 = time.perf_counter()
        pos = self._held("test")
        sp, sq = heuristic_ranking_scores(
            self.data.indptr,
            self.data.indices,
            pos,
            self.negatives("test", pos),
            self.link.baseline,
        )
        m = mrr_hits(sp, sq, ks=(self.link.hits_k,))
        result.metrics["baseline_test_mrr"] = m["mrr"]
        result.metrics[f"baseline_test_hits@{self.link.hits_k}"] = m[f"hits@{self.link.hits_k}"]
        log.info(
            "%s on the test edges: MRR %.4f (%.1fs)",
            self.link.baseline,
            m["mrr"],
            time.perf_counter() - t0,
        )
        return result


def make_task(config: TrainConfig, data: Any) -> Task:
    """The task ``config.task`` names, over ``data`` (a :class:`~shoal.training.data.
    TrainData` for ``node``, a :class:`~shoal.training.linkdata.LinkData` for ``link``)."""
    if config.task == "link":
        if not isinstance(data, LinkData):
            raise ShoalInputError(
                "--task link trains on a split graph",
                path=getattr(data, "path", None),
                fix="split the edges first: shoal data split-edges GRAPH --out DIR",
            )
        return LinkTask(config, data)
    return NodeTask(config, data)
