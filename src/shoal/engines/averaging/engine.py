"""``averaging``: local training on parts + weighted model averaging (SDT-GNN).

SDT-GNN (the seed paper's Section on "sub-graph data-parallel training"): every worker trains
its own copy of the model on its parts *alone* -- core nodes with their full in-neighbourhoods
and the halo nodes' features replicated in the part (a store built with ``--halo-features``),
so nothing is communicated during an epoch. Every ``k`` epochs (``average_every``) the models
are averaged, each weighted by the number of training nodes its worker trained on::

    theta <- sum_r (n_r / sum_s n_s) * theta_r          (one all-reduce of all parameters)

With more parts than workers (``p > N``) a worker trains its parts in turn within each epoch
(the plan's cyclic assignment). By default (``part_models``, ``--part-models``) every part
trains its own model and optimizer, as the paper's Section III-C describes ("each GPU ...
trains floor(p/q) or ceil(p/q) local models independently and sequentially. Once all p local
models are trained, they are synchronized and updated via model averaging"), and each
averaging round averages all ``p`` models, weighted by their parts' training nodes (first
within the rank, then across ranks: the same weighted mean), after which every part restarts
from it (:class:`~shoal.engines.averaging.average.PartModels`). ``--no-part-models`` carries
one model through a rank's parts instead (the ablation; docs/distributed.md#averaging-sdt-gnn).

Optimizer state: by default the Adam moments (``exp_avg``, ``exp_avg_sq``) are averaged with
the same weights at every averaging round, so every part restarts the next local round from
the same model *and* the same optimizer state (the step counters are left as they are: each
rank counts its own local steps). The paper averages the weights only (Sec. III-D); that is
``average_optimizer=False`` (``--local-optimizer-state``), where each model keeps its own
moments, which measured worse (docs/distributed.md#averaging-sdt-gnn): the ranks' sign-like
Adam steps partly cancel in the average when their moments disagree. Resetting the
moments each round would re-run Adam's bias-corrected warm-up after every round, so it is
not offered.

With one process and a one-part store the batches equal :class:`shoal.training.Trainer`'s (same
sampler, shuffling and batch seeds), so the accuracy is the single-process one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch

from shoal.engines.averaging.average import (
    PartModels,
    average_optimizer_state_,
    average_saved_ranks,
    weighted_average_,
)
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.base import Engine
from shoal.errors import ShoalInputError
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.featstore import DiskFeatures
from shoal.sample.features import PartGatherer, part_rows
from shoal.sample.sampler import NeighborSampler
from shoal.training import BatchLoader, Timer, train_step
from shoal.training.data import structure_on_disk
from shoal.training.meter import EpochMeter

__all__ = ["AveragingEngine", "PartGatherer", "average_optimizer_state_", "weighted_average_"]

log = logging.getLogger(__name__)


class AveragingEngine(Engine):
    """SDT-GNN-style local training with weighted model averaging (see the module docstring)."""

    name = "averaging"
    options_class = AveragingConfig
    tables_scope = "local"  # trains on its parts and their halos

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.train_config
        if self.store.num_parts > 1 and not self.store.halo_features:
            raise ShoalInputError(
                "the averaging engine trains parts locally and needs their halo features",
                path=self.store.path,
                fix="rebuild the store with `shoal store build ... --halo-features`",
            )
        hops = self.options.resolve_halo_hops(typed=False, num_layers=self.config.num_layers)
        if hops > 1:
            raise ShoalInputError(
                f"--halo-hops {hops} is implemented for typed stores only",
                path=self.store.path,
                fix="drop --halo-hops (the parts train as stored), or use --engine minibatch "
                "to sample the graph's neighbourhoods",
            )
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )
        self.timer = Timer()
        rows = [p.num_core + (p.num_halo if self.store.halo_features else 0) for p in self.parts]
        # per local row: the sampler's id map and degrees (8 B), the cache's slot map (4 B),
        # the windows' marks (2 B)
        plan = self.plan_memory(
            feature_bytes=sum(rows) * self.row_bytes,
            num_rows=max(rows or [1]),
            extra_bytes=14 * sum(rows),
            structure=cfg.memory.structure,
        )
        fits = []
        self.features: list[DiskFeatures] = []
        self.loaders: list[BatchLoader] = []
        for part, n in zip(self.parts, rows, strict=True):
            share = n / max(sum(rows), 1)  # the rank's parts share the cache and the windows
            local_ids = np.concatenate([part.core_ids, np.asarray(part.halo_ids, dtype=np.int64)])
            deg = self.tables.degrees[local_ids]
            direct = not plan.structure_in_memory and structure_on_disk(part.indices)
            sampler = NeighborSampler(
                part.indptr,
                part.indices,
                cfg.sampling.fanouts,
                num_nodes=part.num_nodes,
                degrees=deg,
                direct_indices=direct,
                io_threads=cfg.memory.io_threads,
                neighbor_cache_bytes=int(plan.neighbor_cache * share),
            )
            budgeted = BudgetedStore(
                part_rows(part),
                plan,
                share=share,
                degrees=deg,
                normalize=cfg.model.normalize_features,
                threads=cfg.memory.io_threads,
                show_progress=cfg.run.progress if self.ctx.is_rank0 else False,
            )
            feats = budgeted.features
            loader = BatchLoader(
                sampler,
                feats,
                part.labels,
                np.flatnonzero(np.asarray(part.train_mask)),
                batch_size=cfg.sampling.batch_size,
                seed=cfg.run.seed + 1_000_003 * part.index,
                timer=self.timer,
            )
            fit = budgeted.read_ahead(  # cache and windows sized from the first sampled epoch
                loader,
                last_epoch=cfg.optim.epochs - 1,
                pack_epochs=cfg.memory.pack_epochs,
                scratch_dir=cfg.memory.scratch_dir,
                cache_policy=cfg.memory.cache_policy,
            )
            if fit is not None:
                fits.append(fit)
                if self.ctx.is_rank0:
                    log.info("part %d features: %s", part.index, fits[-1].describe())
            self.features.append(feats)
            self.loaders.append(loader)
        plan.use_fit(fits)
        if self.ctx.is_rank0:
            log.info("rank 0 %s", plan.describe())
        self.weight = float(sum(len(ld.seeds) for ld in self.loaders))
        self.num_batches = sum(len(ld) for ld in self.loaders)
        # one model and optimizer per part (--part-models), else the one model for every part
        self.part_models = PartModels(
            self.model,
            self.optimizer,
            len(self.loaders),
            per_part=self.options.part_models,
            make_optimizer=lambda m: torch.optim.Adam(
                m.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
            ),
        )

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.train_config
        self.stats.reset()
        stats0 = [f.stats.snapshot() for f in self.features]
        meter = EpochMeter(
            epoch,
            self.num_batches,
            enable=cfg.run.progress if self.ctx.is_rank0 else False,
            timer=self.timer,
        )
        for i, loader in enumerate(self.loaders):  # p > N: this rank's parts in turn
            model, optimizer = self.part_models[i]
            for batch in self.feed.iterate(loader.epoch(epoch)):
                with meter.time("forward_backward"):
                    loss, ok = train_step(model, optimizer, batch)
                meter.step(loss, ok, len(batch.y))
        averaged = (epoch + 1) % self.options.average_every == 0 or epoch + 1 == cfg.optim.epochs
        if averaged:
            t0 = time.perf_counter()
            nbytes = self.part_models.average(
                [float(len(ld.seeds)) for ld in self.loaders],
                self.weight,
                group=self.ctx.model_group,
                moments=self.options.average_optimizer,
            )
            self.timer.add("averaging", time.perf_counter() - t0)
            self.stats.allreduce_bytes += nbytes if self.ctx.world_size > 1 else 0
            self.stats.rounds += 1 if self.ctx.world_size > 1 else 0
        return self.epoch_record(
            **meter.close(),
            averaged=averaged,
            evaluable=averaged,
            io=self.io_record(self._io(stats0)),
        )

    def state(self) -> dict[str, Any]:
        st = super().state()
        st["weight"] = self.weight
        st["part_models"] = self.part_models.state()
        st["part_weights"] = self.part_models.weights([float(len(ld.seeds)) for ld in self.loaders])
        return st

    def load_state(self, state: dict[str, Any]) -> None:
        """:meth:`state`'s output; one saved by another number of processes continues from
        the saved ranks' weighted average (:func:`average_saved_ranks`)."""
        resharded = bool(state.get("resharded_from"))
        if resharded:
            state = average_saved_ranks(state, moments=self.options.average_optimizer)
        super().load_state(state)
        self.part_models.load(
            state.get("part_models", []),
            resharded=resharded,
            moments=self.options.average_optimizer,
        )

    def _io(self, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for ld, f, b in zip(self.loaders, self.features, before, strict=True):
            if ld.prefetcher is not None:
                out.append(dict(ld.prefetcher.last_epoch_io))
            else:
                now = f.stats.snapshot()
                out.append({k: now[k] - b[k] for k in now})
        return out

    def pause_io(self) -> int:
        return sum(ld.prefetcher.pause() for ld in self.loaders if ld.prefetcher is not None)

    def resume_io(self) -> None:
        for ld in self.loaders:
            if ld.prefetcher is not None:
                ld.prefetcher.resume()

    def close_io(self) -> None:
        for ld in self.loaders:
            if ld.prefetcher is not None:
                ld.prefetcher.close()

    def feature_stores(self) -> list:
        return list(self.features)

    def settings(self) -> dict[str, Any]:
        return {
            "average_every": self.options.average_every,
            "average_optimizer": self.options.average_optimizer,
            "local_optimizer_state": not self.options.average_optimizer,
            "part_models": self.options.part_models,
        }
