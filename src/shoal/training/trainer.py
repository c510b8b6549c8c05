"""``Trainer``: single-process mini-batch training on a graph directory.

The trainer supplies the :class:`~shoal.training.loop.Trainable` interface (one epoch of
mini-batches, exact evaluation, its optimizer and random state) and runs the shared
:class:`~shoal.training.loop.EpochLoop`, exactly as every engine does. A typed graph's featureless node types may keep their
embeddings on disk (:class:`~shoal.training.embedding.TypeTables`: the batches', the
evaluation's and the checkpoints' side of them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from shoal.graph.blocks import Batch
from shoal.rows.budget import PeakFootprint, bytes_freed_by
from shoal.sample.device import DeviceSampler
from shoal.sample.sampler import HeldLists, NeighborSampler
from shoal.training.batches import BatchLoader, Timer
from shoal.training.config import TrainConfig
from shoal.training.data import TrainData, open_features, structure_on_disk
from shoal.training.device import DeviceFeed
from shoal.training.devicebatches import DeviceBatches, DeviceRows, device_memory_budget
from shoal.training.embedding import TypeTables
from shoal.training.footprint import (
    StepShape,
    eval_working_memory,
    measured_eval_budget,
    step_activations,
    training_reserve,
)
from shoal.training.inference import evaluation_bytes
from shoal.training.linkdata import LinkData
from shoal.training.loop import EpochLoop
from shoal.training.meter import EpochMeter
from shoal.training.model import model_from_config
from shoal.training.presets import resolve_for_data
from shoal.training.result import RunResult
from shoal.training.tasks import Task, make_task
from shoal.utils.device import get_rng_states, set_rng_states, use_device
from shoal.utils.memory import trim_freed_memory
from shoal.utils.threads import set_threads

__all__ = ["Trainer"]

log = logging.getLogger(__name__)


def _typed(schema, tables: TypeTables | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A typed graph's part of a run's identity (what a resumed run must match) and of its
    recorded settings."""
    if schema is None:
        return {}, {}
    disk = {} if tables is None else {"embeddings_on_disk": tables.names}
    typed = {"node_types": len(schema.node_types), "relations": len(schema.edge_types), **disk}
    return {"relations": len(schema.edge_types), **disk}, {"typed": typed}


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

    def __init__(
        self,
        config: TrainConfig,
        data: TrainData | LinkData,
        model: nn.Module | None = None,
        *,
        task: Task | None = None,
    ):
        features = data.features  # (a task with learned input rows replaces them)
        task = task or make_task(config, data)
        config = resolve_for_data(config, train_nodes=task.num_seeds, features=features)
        task.config = config
        self.config = config
        self.data = data
        #: what the run learns: its seeds, its loss and its evaluation
        self.task = task
        set_threads(config.run.threads)
        self.device = use_device(config.run.device)
        # a typed graph's featureless types with their embeddings on disk (None: in the model)
        disk = None if data.schema is None else TypeTables.planned(config, data.schema, data.path)
        # the model's input width: the tables' rows come in x (at least hidden wide)
        in_dim = task.in_dim() or data.feature_dim
        in_dim = in_dim if disk is None else disk.width(in_dim)
        torch.manual_seed(config.run.seed)
        if model is None:  # built on the host: the same initial weights on every device
            model = model_from_config(
                config,
                in_dim=in_dim,
                out_dim=task.out_dim(),
                schema=data.schema,
                given=None if disk is None else disk.given,
            )
        self.model = model.to(self.device)
        head = task.head()  # (after the model: its initial weights come next)
        #: what best-validation selection keeps and restores: the model (and the task's head)
        self.selected_module = None
        params = list(model.parameters())
        if head is not None:
            head.to(self.device)
            self.selected_module = nn.ModuleDict({"encoder": self.model, "scorer": head})
            params += list(head.parameters())
        # on a GPU, the next batch is sampled, gathered and staged while the step computes
        self.feed = DeviceFeed(self.device, background=True)
        self.optimizer = torch.optim.Adam(
            params, lr=config.optim.lr, weight_decay=config.optim.weight_decay
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
            structure=task.structure or config.memory.structure,
        )
        self.features, self.budget = self.store.features, self.store.plan
        #: the on-disk tables (made once the memory plan stands; None: none)
        self.tables: TypeTables | None = None if disk is None else disk.open()
        # the activations in the reserve: refitted to the sampled batches, free in evaluation
        self.budget.activations, self.budget.activation_row_bytes = step_activations(shape)
        direct = not self.budget.structure_in_memory and structure_on_disk(data.indices)
        half = self.budget.neighbor_cache // 2
        held = _held_rows(config, data, half) if direct else None
        self.sampler = NeighborSampler(
            data.indptr,
            data.indices,
            config.sampling.fanouts,
            num_nodes=data.num_nodes,
            degrees=data.degrees,
            direct_indices=direct,
            io_threads=config.memory.io_threads,
            # the plan's neighbour-list memory: half a group's passes, half the training
            # seeds' lists held (every batch's hop 0) or else a block cache
            neighbor_cache_bytes=half if held is None else 0,
            group_bytes=half,
            schema=data.schema,
        )
        if held is not None and self.sampler.hold_rows(held, half):
            # the group's passes get what the held lists leave of the plan's memory
            self.sampler.group_bytes = self.budget.neighbor_cache - self.sampler.held_bytes
        #: neighbour-list bytes read from disk already counted in a record (epochs, and
        #: evaluations, whose reads no epoch record counts)
        self._structure_counted = 0
        #: whether an epoch record holds the cache's load yet (every row cached, no windows)
        self._start_counted = False
        self._lent = 0  # bytes of the feature cache lent to evaluation (end_training)
        self.timer = Timer()
        self.loader = task.loader(self)
        #: batches sampled and gathered on the model's device (None: on the host)
        self.device_batches = self._device_batches(config, data)
        if isinstance(self.loader, BatchLoader) and self.device_batches is None:
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
        self.num_batches = len(self.loader) if hasattr(self.loader, "__len__") else 0
        typed_identity, typed_settings = _typed(data.schema, self.tables)
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
                **task.identity(),
                **typed_identity,
            },
            settings={
                "memory_plan": self.budget.to_dict(),
                **task.settings(),
                **typed_settings,
            },
        )
        if self.tables is not None:
            log.info(
                "typed graph: embeddings of %s on disk in %s (sparse Adam)",
                ", ".join(self.tables.names),
                self.tables.tables[0][1].dir.parent,
            )

    def _device_batches(self, config: TrainConfig, data: Any) -> DeviceBatches | None:
        """The device's batch producer when ``--sample-on`` puts it there (``auto``: on a GPU,
        for an untyped graph's node task whose CSR fits the device memory budget)."""
        mode = config.run.sample_on
        eligible = type(self.loader) is BatchLoader and data.schema is None
        if mode == "host" or (mode == "auto" and self.device.type != "cuda"):
            return None
        if not eligible:
            if mode == "device":
                raise ValueError(
                    "--sample-on device takes an untyped graph's node classification: use "
                    "--sample-on host (or auto) for typed graphs and link prediction"
                )
            return None
        budget = device_memory_budget(self.device, config.run.device_memory_bytes)
        structure = DeviceSampler.nbytes(len(data.indptr) - 1, len(data.indices), data.num_nodes)
        if mode == "auto" and structure > budget:
            log.info(
                "batches sampled on the host: the CSR's device copy (%.1f MiB) exceeds the "
                "device memory budget (%.1f MiB; --device-memory)",
                structure / 2**20,
                budget / 2**20,
            )
            return None
        sampler = DeviceSampler(
            data.indptr,
            data.indices,
            config.sampling.fanouts,
            num_nodes=data.num_nodes,
            degrees=data.degrees,
            device=self.device,
        )
        rows = DeviceRows(
            self.features,
            num_rows=data.num_nodes,
            dim=data.feature_dim,
            degrees=sampler.degrees.cpu().numpy(),  # (data.degrees may be None: not read)
            device=self.device,
            budget=max(budget - structure, 0),
        )
        log.info(
            "batches sampled and gathered on %s: the CSR's copy %.1f MiB, %d of %d rows "
            "cached there (%.1f MiB; the rest from the host's store)",
            self.device,
            structure / 2**20,
            rows.cached,
            data.num_nodes,
            rows.nbytes / 2**20,
        )
        return DeviceBatches(self.loader, sampler, rows, timer=self.timer)

    def batches(self, epoch: int) -> Iterator[Batch]:
        """``epoch``'s training batches on the model's device: produced there
        (:attr:`device_batches`) or by the host loader and copied (:attr:`feed`)."""
        if self.device_batches is not None:
            return self.device_batches.epoch(epoch)
        return self.feed.iterate(self.loader.epoch(epoch))

    @property
    def _prefetcher(self) -> Any:
        """The loader's windows read ahead (None: none, or the loader is gone)."""
        return getattr(self.loader, "prefetcher", None)

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
            **self.task.state(),
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
        self.task.load_state(state)
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
        dev0 = {} if self.device_batches is None else self.device_batches.stats()
        meter = EpochMeter(
            epoch,
            self.num_batches or None,
            enable=self.config.run.progress,
            timer=self.timer,
            postfix=True,
            device=self.device,  # (on a GPU the step's phases are the device's time)
        )
        self.task.train_epoch(self, epoch, meter)
        self.num_batches = self.num_batches or meter.steps
        self.loop.state.epoch = epoch + 1
        rec = meter.record()
        if self.task.metric != "accuracy":  # (no class predictions to count)
            rec["train_accuracy"] = None
        structure = self._structure_read() - self._structure_counted
        self._structure_counted += structure
        # batches made on the device: rows served there and from the host's store
        dev = {} if self.device_batches is None else self.device_batches.stats()
        return {
            "epoch": epoch + 1,
            **rec,
            "io": {
                **self._io_record(stats0),
                **{k: v - dev0.get(k, 0) for k, v in dev.items()},
                # neighbour lists read from disk since the last record: the run's start
                # (sampling the first epochs ahead) in the first, a sweep sampling epochs
                # ahead in the epoch it runs beside; never an evaluation's
                "structure_bytes_read": structure,
            },
        }

    def _structure_read(self) -> int:
        """Neighbour-list bytes the sampler has read from disk (0 once it is gone)."""
        return 0 if self.sampler is None else self.sampler.structure_bytes_read

    def _io_record(self, before: dict[str, Any]) -> dict[str, Any]:
        """The epoch's feature I/O: rows asked for and served by the cache, bytes read."""
        pf = self._prefetcher
        if pf is not None:
            rec = dict(pf.last_epoch_io)
        else:
            now = self.features.stats.snapshot()
            rec = {k: now[k] - before[k] for k in now}
            # the cache read when the store opened, in the first record (as the prefetcher's
            # start: the run's reading before its first epoch, for "all reads included" means)
            if not self._start_counted:
                rec["start_seconds"] = float(getattr(self.features, "cache_load_seconds", 0.0))
                self._start_counted = True
        req = rec.get("requested", 0)
        rec["cache_hit_rate"] = rec.get("hits", 0) / req if req else None
        return rec

    def evaluate(
        self, splits: tuple[str, ...] = ("val",), *, fanouts: tuple[int, ...] | None = None
    ) -> dict[str, float]:
        """Exact accuracy on ``splits``, within what the windows read ahead leave free (and,
        after :meth:`end_training`, the feature cache); sampled with ``fanouts`` (one per
        layer; :func:`~shoal.training.inference.sampled_evaluate`) while training runs."""
        pf = self._prefetcher
        held = pf.pause() if pf is not None else 0
        n = self.task.num_targets(splits)
        structure0 = self._structure_read()
        try:
            # no training step runs: its activations are free, and so is a lent cache; what
            # the process holds now, measured, may leave more
            free = self.budget.transient + self.budget.activations + self._lent
            book = evaluation_bytes(n, self.data.num_nodes)
            planned = free - held - book
            measured, footprint = measured_eval_budget(
                self.budget.total, book, io_threads=self.config.memory.io_threads
            )
            work = eval_working_memory(planned, measured, footprint, self.budget.window)
            level = logging.INFO if self._lent else logging.DEBUG  # the final one at INFO
            log.log(
                level,
                "evaluating %s (%d nodes): %.0f MiB of working memory (the budget %.0f MiB "
                "less the footprint measured now %.0f beside mapped data, books %.0f, staging "
                "and slack; planned: %.0f%s)",
                "+".join(splits),
                n,
                work / (1 << 20),
                self.budget.total / (1 << 20),
                footprint / (1 << 20),
                book / (1 << 20),
                planned / (1 << 20),
                f", {self._lent / (1 << 20):.0f} MiB lent by training" if self._lent else "",
            )
            with PeakFootprint() as peak:
                result = self._evaluate(splits, work, fanouts)
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
            self._structure_counted += self._structure_read() - structure0  # not an epoch's
            trim_freed_memory()  # the evaluation's buffers leave before training resumes
            if pf is not None:
                pf.resume()

    @property
    def kept_step_memory(self) -> int:
        """Freed memory the allocator keeps between training steps (bytes; the loop's
        ``Trainable.kept_step_memory``): :attr:`~shoal.rows.budget.BudgetPlan.kept_step_memory`
        for steps on the host, 0 on a GPU (its activations are not the host's)."""
        return self.budget.kept_step_memory if self.device.type == "cpu" else 0

    def end_training(self) -> None:
        """No training step follows (the loop's final evaluation comes next; the trainer
        only evaluates from now on): the read-ahead stops and its windows, packs and spooled
        samples go, and so do the sampler (its per-node arrays and neighbour-block cache) and
        a feature cache of some rows, whose memory, measured, is lent to the evaluation (its
        blocks read every row they need once per block: the cache would save a few of those
        rows for the memory of many targets); a cache of every row stays (nothing to read)."""
        if self.loader is not None:
            self._lent += bytes_freed_by(self._drop_training_state)

    def eval_sampler(self, fanouts: tuple[int, ...]) -> NeighborSampler | None:
        """The sampler of a sampled evaluation with ``fanouts``: the training sampler, whose
        draws take any fanouts, or on a typed graph (whose draws are per relation) one over
        the same structure with ``fanouts`` for every relation (kept for the next
        evaluation); None after :meth:`end_training`."""
        s = self.sampler
        if s is None or s.relations is None or not s.relations.per_relation:
            return s
        if getattr(self, "_eval_sampler", (None, None))[0] != fanouts:
            sampler = NeighborSampler(
                s.indptr,
                s.indices,
                fanouts,
                num_nodes=s.num_nodes,
                degrees=s.degrees,
                direct_indices=s._reader is not None,
                io_threads=self.config.memory.io_threads,
                schema=self.data.schema,
            )
            self._eval_sampler = (fanouts, sampler)
        return self._eval_sampler[1]

    def _drop_training_state(self) -> int:
        if self._prefetcher is not None:
            self._prefetcher.close()
        # a cache of every row stays (the evaluation then reads nothing); a partial one is
        # lent: the rows it lacks are spread over the file, whose pages a block reads anyway
        f = self.features
        whole = getattr(f, "cached_rows", 0) >= getattr(f, "num_rows", 1) > 0
        cache = 0 if whole else f.release_cache()
        self.sampler.close()
        if getattr(self, "_eval_sampler", None) is not None:
            self._eval_sampler[1].close()
            self._eval_sampler = None
        self.loader = self.sampler = None  # (the prefetcher and the loader refer to each other)
        self.device_batches = None  # (its device copies go with it)
        return cache

    def _evaluate(self, splits: tuple[str, ...], budget: int, fanouts=None) -> dict[str, float]:
        return self.task.evaluate(self, splits, budget, fanouts)

    @property
    def metric(self) -> str:
        """The selection metric (the task's)."""
        return self.task.metric

    # ---------------------------------------------------------------- run
    def eval_work_ratio(self) -> float:
        """Estimated work of an exact evaluation over an epoch's (``--eval-every auto``)."""
        return self.task.eval_work_ratio()

    def fit(self) -> RunResult:
        """Train until ``epochs`` or early stopping; test the best-validation model."""
        if self._prefetcher is not None:
            self._prefetcher.start(self.epoch)  # the first window read as the run starts
        try:
            return self.task.finish(self.loop.fit())
        finally:  # (not held meanwhile: end_training lets the loader and sampler go)
            if self._prefetcher is not None:
                self._prefetcher.close()
            if self.tables is not None:
                self.tables.flush()


def _held_rows(config: TrainConfig, data: Any, max_bytes: int) -> np.ndarray | None:
    """The rows whose neighbour lists a sampler reading them from disk holds in memory
    (:meth:`~shoal.sample.NeighborSampler.hold_rows`): the node task's training seeds on an
    untyped graph, when their lists fit ``max_bytes``; else None (a block cache instead)."""
    if config.task != "node" or data.schema is not None or getattr(data, "train_idx", None) is None:
        return None
    rows = np.asarray(data.train_idx, np.int64)
    return rows if HeldLists.nbytes(data.indptr, rows) <= max_bytes else None
