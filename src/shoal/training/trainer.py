"""``Trainer``: single-process mini-batch training on a graph directory.

The trainer supplies the :class:`~shoal.training.loop.Trainable` interface (one epoch of
mini-batches, exact evaluation, its optimizer and random state) and runs the shared
:class:`~shoal.training.loop.EpochLoop`, exactly as every engine does.

On a typed graph whose featureless node types keep their embeddings on disk
(``--type-embeddings disk``, or ``auto`` when they would take over a quarter of the memory
limit: :class:`~shoal.training.embedding.TypeTables`), the model takes those types as
``given``: each batch's rows of them are the tables' (written into its ``x``, widened to the
hidden width when narrower), a sparse Adam step updates them after the dense one, exact
evaluation reads them as layer-0 rows (:class:`~shoal.training.embedding.TableRows`), and
checkpoints, the best epoch and a resume carry them (``embedding_<type>/``,
``embedding_<type>_best/`` beside the checkpoint).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from shoal.nn.ondevice import on_device
from shoal.rows.budget import PeakFootprint, bytes_freed_by
from shoal.sample.sampler import NeighborSampler
from shoal.training.batches import BatchLoader, Timer, train_step
from shoal.training.config import TrainConfig
from shoal.training.data import TrainData, open_features, structure_on_disk
from shoal.training.device import DeviceFeed
from shoal.training.embedding import TableRows, TypeTables
from shoal.training.footprint import (
    StepShape,
    measured_eval_budget,
    step_activations,
    training_reserve,
)
from shoal.training.inference import evaluate, evaluation_bytes
from shoal.training.loop import EpochLoop, eval_work_ratio
from shoal.training.meter import EpochMeter
from shoal.training.model import model_from_config
from shoal.training.presets import resolve_for_data
from shoal.training.result import RunResult
from shoal.utils.device import get_rng_states, set_rng_states, use_device
from shoal.utils.memory import trim_freed_memory
from shoal.utils.threads import set_threads

__all__ = ["Trainer"]

log = logging.getLogger(__name__)


def _typed_identity(schema, tables: TypeTables | None) -> dict[str, Any]:
    """A typed graph's part of a run's identity (what a resumed run must match)."""
    if schema is None:
        return {}
    disk = {} if tables is None else {"embeddings_on_disk": tables.names}
    return {"relations": len(schema.edge_types), **disk}


def _typed_settings(schema, tables: TypeTables | None) -> dict[str, Any]:
    if schema is None:
        return {}
    typed = {"node_types": len(schema.node_types), "relations": len(schema.edge_types)}
    if tables is not None:
        typed["embeddings_on_disk"] = tables.names
    return {"typed": typed}


class Trainer:
    """Single-process mini-batch trainer with best-validation model selection.

    Args:
        config: a :class:`TrainConfig`.
        data: a :class:`TrainData`.
        model: any ``nn.Module`` called as ``model(x, blocks)`` (default: built from
            ``config.model.name`` by :func:`~shoal.training.model.model_from_config`); with
            a typed graph's tables on disk (:attr:`tables`) it must take their types'
            rows from ``x`` (``given``) and accept ``x`` at least ``hidden`` wide.
    """

    def __init__(self, config: TrainConfig, data: TrainData, model: nn.Module | None = None):
        config = resolve_for_data(config, train_nodes=len(data.train_idx), features=data.features)
        self.config = config
        self.data = data
        set_threads(config.run.threads)
        self.device = use_device(config.run.device)
        # a typed graph's featureless types with their embeddings on disk (None: in the model)
        disk = (
            TypeTables.planned(config, data.schema, data.path) if data.schema is not None else None
        )
        # the model's input width: the tables' rows come in x (at least hidden wide)
        in_dim = data.feature_dim if disk is None else disk.width(data.feature_dim)
        torch.manual_seed(config.run.seed)
        if model is None:  # built on the host: the same initial weights on every device
            model = model_from_config(
                config,
                in_dim=in_dim,
                out_dim=data.num_classes,
                schema=data.schema,
                given=None if disk is None else disk.given,
            )
        self.model = model.to(self.device)
        # on a GPU, the next batch is sampled, gathered and staged while the step computes
        self.feed = DeviceFeed(self.device, background=True)
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        shape = StepShape.of(config, num_nodes=data.num_nodes, in_dim=in_dim)
        reserve = training_reserve(model, shape, io_threads=config.memory.io_threads)
        self.store = open_features(
            data,
            reserve=reserve,
            memory=config.memory.limit_bytes,
            fanouts=config.sampling.fanouts,
            batch_size=config.sampling.batch_size,
            normalize=config.model.normalize_features,
            io_threads=config.memory.io_threads,
            show_progress=config.run.progress,
            structure=config.memory.structure,
        )
        self.features, self.budget = self.store.features, self.store.plan
        #: the on-disk tables (made once the memory plan stands; None: none)
        self.tables: TypeTables | None = None if disk is None else disk.open()
        # the activations in the reserve: refitted to the sampled batches, free in evaluation
        self.budget.activations, self.budget.activation_row_bytes = step_activations(shape)
        self.sampler = NeighborSampler(
            data.indptr,
            data.indices,
            config.sampling.fanouts,
            num_nodes=data.num_nodes,
            degrees=data.degrees,
            direct_indices=not self.budget.structure_in_memory and structure_on_disk(data.indices),
            io_threads=config.memory.io_threads,
            neighbor_cache_bytes=self.budget.neighbor_cache,
            schema=data.schema,
        )
        self._lent = 0  # bytes of the feature cache lent to evaluation (end_training)
        self.timer = Timer()
        self.loader = BatchLoader(
            self.sampler,
            self.features,
            data.labels,
            data.train_idx,
            batch_size=config.sampling.batch_size,
            seed=config.run.seed,
            timer=self.timer,
        )
        # windows when the cache lacks rows: cache and windows sized from the first epoch
        fit = self.store.read_ahead(
            self.loader,
            last_epoch=config.optim.epochs - 1,
            pack_epochs=config.memory.pack_epochs,
            scratch_dir=config.memory.scratch_dir,
            cache_policy=config.memory.cache_policy,
        )
        if fit is not None:
            self.budget.use_fit(fit)
            log.info("features: %s", fit.describe())
        log.info("%s", self.budget.describe())
        self.num_batches = len(self.loader)
        self.loop = EpochLoop(
            self,
            config,
            identity={
                "model": config.model.name,
                "hidden": config.model.hidden,
                "num_layers": config.num_layers,
                "heads": config.model.heads,
                "num_nodes": data.num_nodes,
                "feature_dim": data.feature_dim,
                "num_classes": data.num_classes,
                **_typed_identity(data.schema, self.tables),
            },
            settings={
                "memory_plan": self.budget.to_dict(),
                **_typed_settings(data.schema, self.tables),
            },
        )
        if self.tables is not None:
            log.info(
                "typed graph: embeddings of %s on disk in %s (sparse Adam)",
                ", ".join(self.tables.names),
                self.tables.tables[0][1].dir.parent,
            )

    @property
    def epoch(self) -> int:
        """Epochs completed."""
        return self.loop.state.epoch

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.loop.state.history

    # ---------------------------------------------------------------- Trainable
    def state(self) -> dict[str, Any]:
        """Model, optimizer, torch RNG and the loop's counters (a checkpoint); on-disk
        embedding tables (and their Adam state) are copied into the checkpoint directory
        (``embedding_<type>/``) beside them."""
        out = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": get_rng_states(self.device),
            **self.loop.state.to_dict(),
            "config": self.config.to_dict(),
        }
        if self.tables is not None:
            snap = bool(self.config.checkpoint.dir)
            if snap:
                self.tables.save(self.config.checkpoint.dir)
            out["embedding_snapshot"] = snap
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_rng_states(state["torch_rng"], self.device)
        self.loop.state.load(state)
        if self.tables is not None and state.get("embedding_snapshot"):
            self.tables.load(self.config.checkpoint.dir)

    def keep_best(self) -> None:
        """At a new best validation score: the on-disk tables kept as they are now
        (:meth:`TypeTables.keep_best <shoal.training.embedding.TypeTables.keep_best>`;
        ``embedding_<type>_best/`` beside the checkpoint is what ``shoal embed`` reads)."""
        if self.tables is not None:
            self.tables.keep_best(self.config.checkpoint.dir)

    def restore_best(self) -> None:
        """The on-disk tables as they were at the best validation score."""
        if self.tables is not None:
            self.tables.restore_best()

    def train_epoch(self, epoch: int | None = None) -> dict[str, Any]:
        """Train one epoch (default: the next one); returns its metrics."""
        if self.loader is None:
            raise RuntimeError("end_training() was called: this trainer only evaluates now")
        epoch = self.epoch if epoch is None else epoch
        stats0 = self.features.stats.snapshot()
        structure0 = self.sampler.structure_bytes_read
        meter = EpochMeter(
            epoch, len(self.loader), enable=self.config.run.progress, timer=self.timer, postfix=True
        )
        key = self.config.run.seed
        for step, batch in enumerate(self.feed.iterate(self.loader.epoch(epoch))):
            # masks keyed by (seed, epoch, step, node): one batch per epoch is full-graph
            # training, the same model as the fullgraph engine's on any number of processes
            if self.tables is not None:
                with meter.time("embedding"):
                    batch = self.tables.embed(batch)
            with meter.time("forward_backward"):
                loss, ok = train_step(
                    self.model, self.optimizer, batch, dropout_key=(key, epoch, step)
                )
            if self.tables is not None:
                with meter.time("embedding"):
                    self.tables.step()
            meter.step(loss, ok, len(batch.y))
        self.loop.state.epoch = epoch + 1
        return {
            "epoch": epoch + 1,
            **meter.record(),
            "io": {
                **self._io_record(stats0),
                # neighbour lists read from disk (sampled ahead: counted when trained)
                "structure_bytes_read": self.sampler.structure_bytes_read - structure0,
            },
        }

    def _io_record(self, before: dict[str, Any]) -> dict[str, Any]:
        """The epoch's feature I/O: rows asked for and served by the cache, bytes read."""
        pf = self.loader.prefetcher
        if pf is not None:
            rec = dict(pf.last_epoch_io)
        else:
            now = self.features.stats.snapshot()
            rec = {k: now[k] - before[k] for k in now}
        req = rec.get("requested", 0)
        rec["cache_hit_rate"] = rec.get("hits", 0) / req if req else None
        return rec

    def evaluate(self, splits: tuple[str, ...] = ("val",)) -> dict[str, float]:
        """Exact accuracy on ``splits``, within what the windows read ahead leave free (and,
        after :meth:`end_training`, the feature cache)."""
        pf = self.loader.prefetcher if self.loader is not None else None
        held = pf.pause() if pf is not None else 0
        n = sum(len(self.data.split(s)) for s in splits)
        try:
            # no training step runs: its activations are free, and so is a lent cache; what
            # the process holds now, measured, may leave more
            free = self.budget.transient + self.budget.activations + self._lent
            book = evaluation_bytes(n, self.data.num_nodes)
            planned = free - held - book
            measured, footprint = measured_eval_budget(
                self.budget.total, book, io_threads=self.config.memory.io_threads
            )
            work = max(planned, measured)
            level = logging.INFO if self._lent else logging.DEBUG  # the final one at INFO
            log.log(
                level,
                "evaluating %s (%d nodes): %.0f MiB of working memory (the budget %.0f MiB "
                "less the footprint measured now %.0f beside mapped data, books %.0f, staging "
                "and slack; planned: %.0f%s)",
                "+".join(splits),
                n,
                max(work, self.budget.window) / (1 << 20),
                self.budget.total / (1 << 20),
                footprint / (1 << 20),
                book / (1 << 20),
                planned / (1 << 20),
                f", {self._lent / (1 << 20):.0f} MiB lent by training" if self._lent else "",
            )
            with PeakFootprint() as peak:
                result = self._evaluate(splits, work)
            if peak.peak >= 0:
                log.log(
                    level,
                    "evaluated: peak footprint %.0f MiB (anonymous %.0f MiB) of a %.0f MiB budget",
                    peak.peak / (1 << 20),
                    peak.peak_anon / (1 << 20),
                    self.budget.total / (1 << 20),
                )
            return result
        finally:
            trim_freed_memory()  # the evaluation's buffers leave before training resumes
            if pf is not None:
                pf.resume()

    def end_training(self) -> None:
        """No training step follows (the loop's final evaluation comes next; the trainer
        only evaluates from now on): the read-ahead stops and its windows, packs and spooled
        samples go, and so do the sampler (its per-node arrays and neighbour-block cache) and
        the feature cache, whose memory, measured, is lent to the evaluation (its blocks read
        every row they need once per block: the cache would save a few of those rows for the
        memory of many targets)."""
        if self.loader is not None:
            self._lent += bytes_freed_by(self._drop_training_state)

    def _drop_training_state(self) -> int:
        if self.loader.prefetcher is not None:
            self.loader.prefetcher.close()
        cache = self.features.release_cache()
        self.sampler.close()
        self.loader = self.sampler = None  # (the prefetcher and the loader refer to each other)
        return cache

    def _evaluate(self, splits: tuple[str, ...], budget: int) -> dict[str, float]:
        data, features, normalize = self.data, self.features, self.config.model.normalize_features
        if self.tables is not None:  # layer 0 reads the tables' rows (as they are now)
            rows = TableRows(data.features, self.tables, normalize=bool(normalize))
            data, features, normalize = replace(data, features=rows), None, False
        model = on_device(self.model, self.device)
        budget = max(budget, self.budget.window)
        return evaluate(
            model,
            data,
            splits,
            sampler=self.sampler,
            normalize_features=normalize,
            batch_size=self.config.eval.batch_size,
            show_progress=self.config.run.progress,
            scratch_dir=self.config.memory.scratch_dir,
            features=features,
            memory_budget=budget,
        )

    # ---------------------------------------------------------------- run
    def eval_work_ratio(self) -> float:
        """Estimated work of an exact evaluation over an epoch's (``--eval-every auto``)."""
        return eval_work_ratio(
            num_nodes=self.data.num_nodes,
            num_edges=int(self.data.indptr[-1]),
            num_seeds=len(self.data.train_idx),
            fanouts=self.config.sampling.fanouts,
        )

    def fit(self) -> RunResult:
        """Train until ``epochs`` or early stopping; test the best-validation model."""
        if self.loader is not None and self.loader.prefetcher is not None:
            self.loader.prefetcher.start(self.epoch)  # the first window read as the run starts
        try:
            return self.loop.fit()
        finally:  # (not held meanwhile: end_training lets the loader and sampler go)
            if self.loader is not None and self.loader.prefetcher is not None:
                self.loader.prefetcher.close()
            if self.tables is not None:
                self.tables.flush()
