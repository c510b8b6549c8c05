"""``averaging``: local training on parts + weighted model averaging (SDT-GNN).

SDT-GNN (the seed paper's Section on "sub-graph data-parallel training"): every worker trains
its own copy of the model on its parts *alone* (a store built with ``--halo-features``), and
every ``k`` epochs (``average_every``) the models are averaged, each weighted by the number
of training nodes its worker trained on::

    theta <- sum_r (n_r / sum_s n_s) * theta_r          (one all-reduce of all parameters)

By default every part trains its own model and optimizer (Section III-C,
:class:`~shoal.engines.averaging.average.PartModels`; ``--no-part-models``: the ablation).
Named deviation: Adam's moments are averaged too (the paper averages the weights only, Sec.
III-D: ``--local-optimizer-state``). Both, and the measurements:
docs/distributed.md#averaging-sdt-gnn. With one process and a one-part store the batches
equal :class:`shoal.training.Trainer`'s. Typed stores and ``--halo-hops H``
(:mod:`shoal.engines.averaging.halo_hops`): docs/distributed.md#typed-stores-every-engine.

The link task (``--task link``): each part's model learns from the part alone, the models
averaged weighted by the parts' positive edges
(:class:`~shoal.engines.averaging.links.PartLinks`), sampled by the part's local sampler
(the structure in memory, the rows through the part's cache, no windows read ahead); the named
deviation (``link_scope = "part"``): docs/linkpred.md#across-processes-every-engine.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shoal.engines.averaging.average import (
    PartModels,
    _init_adam_state,
    average_optimizer_state_,
    average_saved_ranks,
    weighted_average_,
)
from shoal.engines.averaging.halo_hops import GrownPart, grow_parts
from shoal.engines.averaging.links import PartLinks
from shoal.engines.base import Engine
from shoal.engines.minibatch.engine import dist_pulls, dist_sampler
from shoal.errors import ShoalInputError
from shoal.graph.blocks import Batch
from shoal.nn.base import keyed_dropout
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.direct import load_array
from shoal.rows.featstore import DiskFeatures
from shoal.rows.parts import part_rows
from shoal.rows.source import RowSource
from shoal.sample.features import PartGatherer
from shoal.sample.sampler import NeighborSampler
from shoal.store.reader import Partition
from shoal.training import BatchLoader, Timer, train_step
from shoal.training.data import structure_on_disk
from shoal.training.device import DeviceFeed
from shoal.training.meter import EpochMeter
from shoal.utils.io import scratch_space

__all__ = ["AveragingEngine", "PartGatherer", "average_optimizer_state_", "weighted_average_"]

log = logging.getLogger(__name__)


def stored_rows(part: Partition, threads: int = 8) -> list[np.ndarray] | RowSource:
    """A stored part's input rows in its local index space: core rows, then halo rows. An
    untyped part's two arrays (stacked by :class:`~shoal.rows.featstore.DiskFeatures`), a
    typed part's every node type's rows in one source padded to the widest type
    (:func:`~shoal.rows.parts.part_rows`). Raises ShoalInputError when the part has halo
    nodes but the store holds no halo features, or the store has no features."""
    if part.store.schema is not None:
        src = part_rows(part, halo=True, threads=threads)  # refuses missing halo rows itself
        if src is None:
            raise ShoalInputError(
                "no node type of the typed store has features",
                path=part.store.path,
                fix="build it from a typed graph with the features of at least one type",
            )
        return src
    if part.features is None or (part.num_halo and part.halo_features is None):
        raise ShoalInputError(
            "the averaging engine needs every part's halo features",
            path=part.path,
            fix="rebuild the store with `shoal store build ... --halo-features`",
        )
    return [part.features] + ([part.halo_features] if part.num_halo else [])


class AveragingEngine(Engine):
    """SDT-GNN-style local training with weighted model averaging (see the module docstring)."""

    name = "averaging"
    tables_scope = "local"  # trains on its parts and their halos
    link_scope = "part"  # a part's model computes its own core nodes only

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a rank trains its parts alone (nothing collective while a batch is made): on a GPU
        # the next batch is sampled, gathered and staged in a background thread meanwhile
        self.feed = DeviceFeed(self.device, background=True)
        cfg, store = self.train_config, self.store
        typed = store.schema is not None
        if store.num_parts > 1 and not store.halo_features:
            raise ShoalInputError(
                "the averaging engine trains parts locally and needs their halo features",
                path=store.path,
                fix="rebuild the store with `shoal store build ... --halo-features`",
            )
        #: the hops of halo the parts are grown by (``--halo-hops``, "auto" resolved)
        self.halo_hops = self.options.resolve_halo_hops(typed=typed, num_layers=cfg.num_layers)
        self.model = self.build_model()
        self.optimizer = self.adam(self.model)
        self.timer = Timer()
        self._scratch: contextlib.ExitStack | None = None
        #: per part, the part grown by ``halo_hops - 1`` hops (None: the stored part)
        self.grown: list[GrownPart | None] = (
            self._grow() if self.halo_hops > 1 else [None] * len(self.parts)
        )
        rows = [
            p.num_core + (p.num_halo if store.halo_features else 0) if g is None else g.num_nodes
            for p, g in zip(self.parts, self.grown, strict=True)
        ]
        # per local row: the sampler's id map and degrees (8 B), the cache's slot map (4 B),
        # the windows' marks (2 B); on a typed store its type and original id (16 B); the
        # grown parts' row pointers (in memory)
        per_row = 14 + (16 if typed else 0)
        grown_index = sum(int(g.indptr.nbytes) for g in self.grown if g is not None)
        plan = self.plan_memory(
            feature_bytes=sum(rows) * self.row_bytes,
            num_rows=max(rows or [1]),
            extra_bytes=per_row * sum(rows) + grown_index,
            # the link task excludes a batch's edges from its rows: the structure in memory
            structure="memory" if self.link is not None else cfg.memory.structure,
        )
        fits = []
        self.features: list[DiskFeatures] = []
        #: per part, its node loader, or its link batches (the link task)
        self.loaders: list[BatchLoader | PartLinks] = []
        #: per part, the original id of every local node (a typed store's blocks carry them)
        self.orig_ids: list[np.ndarray | None] = []
        for part, g, n in zip(self.parts, self.grown, rows, strict=True):
            share = n / max(sum(rows), 1)  # the rank's parts share the cache and the windows
            if g is None:
                local_ids = np.concatenate(
                    [part.core_ids, np.asarray(part.halo_ids, dtype=np.int64)]
                )
                src: Any = part
            else:  # the grown CSR read as the stored one is: in memory when the plan says so
                local_ids, src = g.ids, g
                if plan.structure_in_memory:
                    g.indices = load_array(g.indices)
                    g.edge_types = None if g.edge_types is None else load_array(g.edge_types)
            deg = self.tables.degrees[local_ids]
            direct = not plan.structure_in_memory and structure_on_disk(src.indices)
            sampler = NeighborSampler(
                src.indptr,
                src.indices,
                cfg.sampling.fanouts,
                num_nodes=src.num_nodes,
                degrees=deg,
                direct_indices=direct,
                io_threads=cfg.memory.io_threads,
                # the plan's neighbour-list memory: half a block cache, half a group's passes
                neighbor_cache_bytes=int(plan.neighbor_cache * share) // 2,
                group_bytes=int(plan.neighbor_cache * share) // 2,
                # a typed part: every local node's type, every in-edge's relation
                schema=store.schema,
                node_type=store.type_of(local_ids) if typed else None,
                edge_types=np.asarray(src.edge_types) if typed else None,
            )
            threads = cfg.memory.io_threads
            budgeted = BudgetedStore(
                stored_rows(part, threads) if g is None else g.rows(threads),
                plan,
                share=share,
                degrees=deg,
                normalize=cfg.model.normalize_features,
                threads=threads,
                show_progress=cfg.run.progress if self.ctx.is_rank0 else False,
                read_ahead=self.link is None,  # link batches read their rows as they come
            )
            feats = budgeted.features
            self.features.append(feats)
            self.orig_ids.append(store.to_orig(local_ids) if typed else None)
            if self.link is not None:
                self.loaders.append(
                    PartLinks(
                        self.link,
                        part,
                        sampler,
                        feats,
                        batch_size=cfg.sampling.batch_size,
                        seed=cfg.run.seed + 1_000_003 * part.index,
                        timer=self.timer,
                    )
                )
                continue
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
            self.loaders.append(loader)
        plan.use_fit(fits)
        if self.ctx.is_rank0:
            log.info("rank 0 %s", plan.describe())
        #: each part's training nodes, or positive edges (its model's weight in the average)
        self.part_weights = [
            float(ld.count if isinstance(ld, PartLinks) else len(ld.seeds)) for ld in self.loaders
        ]
        self.weight = float(sum(self.part_weights))
        self.num_batches = sum(len(ld) for ld in self.loaders)
        # one model and optimizer per part (--part-models), else the one model for every part
        self.part_models = PartModels(
            self.model,
            self.optimizer,
            len(self.loaders),
            per_part=self.options.part_models,
            make_optimizer=self.adam,
        )
        if typed:  # a relation absent from every batch of a part leaves weights without a
            # gradient, and Adam without their state: every state from the start (Adam's
            # own first step makes the same), so the ranks' and parts' states line up
            for o in self.part_models.optimizers:
                _init_adam_state(o)

    def _grow(self) -> list[GrownPart]:
        """This rank's parts grown by ``halo_hops - 1`` hops of halo (collective: the
        in-edges through a distributed sampler with fanout -1, the rows pulled from their
        owners; written to a scratch directory beside the store, or in ``--scratch-dir``,
        removed when training ends)."""
        cfg, store, ctx = self.train_config, self.store, self.ctx
        sampler = dist_sampler(self, [-1])  # one hop, every in-edge (of every relation)
        threads = cfg.memory.io_threads
        local = {p.index: part_rows(p, threads=threads) for p in self.parts}
        dtype = next((np.dtype(s.dtype) for s in local.values() if s is not None), np.float32)
        pulls = dist_pulls(self, local) if store.feature_dim is not None else None
        self._scratch = contextlib.ExitStack()
        work = self._scratch.enter_context(
            scratch_space(cfg.memory.scratch_dir, beside=store.path, prefix="shoal-halo")
        )
        try:
            t0 = time.perf_counter()
            grown = grow_parts(
                self.parts,
                self.halo_hops,
                sampler=sampler,
                pulls=pulls,
                tables=self.tables,
                work=work,
                world_size=ctx.world_size,
                dtype=dtype,
            )
        finally:
            for s in local.values():
                if s is not None:
                    s.close()
        if ctx.is_rank0:
            log.info(
                "halo hops %d: rank 0's parts grew by %s nodes and %s in-edges in %.2fs",
                self.halo_hops,
                f"{sum(g.num_grown for g in grown):,}",
                f"{sum(len(g.indices) - int(g.part.indptr[-1]) for g in grown):,}",
                time.perf_counter() - t0,
            )
        self.stats.reset()  # the growth is not an epoch's communication
        return grown

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.train_config
        self.stats.reset()
        stats0 = [f.stats.snapshot() for f in self.features]
        meter = EpochMeter(
            epoch,
            self.num_batches,
            enable=cfg.run.progress if self.ctx.is_rank0 else False,
            timer=self.timer,
            device=self.device,  # (on a GPU: CUDA events, no wait a step)
        )
        for i, loader in enumerate(self.loaders):  # p > N: this rank's parts in turn
            if isinstance(loader, PartLinks):
                self._link_epoch(i, epoch, meter)
                continue
            model, optimizer = self.part_models[i]
            orig = self.orig_ids[i]
            lazy = self.device.type == "cuda"  # (the loss read at the epoch's end)
            for step, batch in enumerate(self.feed.iterate(loader.epoch(epoch))):
                with meter.time("forward_backward"):
                    if orig is None:
                        loss, ok = train_step(model, optimizer, batch, lazy=lazy)
                    else:  # a part's steps keyed apart from every other part's
                        key = step * self.store.num_parts + self.parts[i].index
                        loss, ok = self._typed_step(model, optimizer, batch, orig, (epoch, key))
                meter.step(loss, ok, len(batch.y))
        averaged = (epoch + 1) % self.options.average_every == 0 or epoch + 1 == cfg.optim.epochs
        if averaged:
            t0 = time.perf_counter()
            nbytes = self.part_models.average(
                self.part_weights,
                self.weight,
                group=self.ctx.model_group,
                moments=self.options.average_optimizer,
            )
            self.timer.add("averaging", time.perf_counter() - t0)
            self.stats.allreduce_bytes += nbytes if self.ctx.world_size > 1 else 0
            self.stats.rounds += 1 if self.ctx.world_size > 1 else 0
        rec = self.epoch_record(
            **meter.close(),
            averaged=averaged,
            evaluable=averaged,
            io=self.io_record(self._io(stats0)),
        )
        if self.link is not None:  # no accuracy of edges
            rec["train_accuracy"] = None
        return rec

    def _link_epoch(self, i: int, epoch: int, meter: EpochMeter) -> None:
        """Part ``i``'s link steps of ``epoch`` on its own model (:mod:`.links`): its
        outputs of the step's end nodes, the link task's loss, one local Adam step."""
        model, optimizer = self.part_models[i]
        model.train()
        orig = self.orig_ids[i]
        for step, host in enumerate(self.loaders[i].epoch(epoch)):
            batch = self.feed.to_device(host)  # (the device's copy does not carry the step)
            with meter.time("forward_backward"):
                optimizer.zero_grad(set_to_none=True)
                if orig is None:
                    h = model(batch.x, batch.mb.blocks)
                else:
                    key = step * self.store.num_parts + self.parts[i].index
                    h = self._typed_forward(model, batch, orig, (epoch, key))
                loss = self.link.loss(model, h, host.step)
                loss.backward()
                optimizer.step()
            n = len(host.step)
            meter.step_sums(float(loss.detach()) * n, 0, n)

    def _typed_step(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: Batch,
        orig: np.ndarray,
        key: tuple[int, int],
    ) -> tuple[float, int]:
        """One step on a typed part's batch: its blocks with their sources' original ids
        (``orig`` of the local ids), dropout keyed by (seed, epoch, ``key``) and the node (as
        the single-process trainer's :func:`~shoal.training.train_step`)."""
        model.train()
        optimizer.zero_grad(set_to_none=True)
        out = self._typed_forward(model, batch, orig, key)
        loss = F.cross_entropy(out, batch.y)
        loss.backward()
        optimizer.step()
        return float(loss.detach()), int((out.detach().argmax(1) == batch.y).sum())

    def _typed_forward(
        self, model: torch.nn.Module, batch: Batch, orig: np.ndarray, key: tuple[int, int]
    ) -> torch.Tensor:
        """``model``'s outputs of a typed part's batch: its blocks with their sources'
        original ids (``orig`` of the local ids), dropout keyed by (seed, epoch, ``key``)
        and the node."""
        blocks = batch.mb.with_node_ids(orig[np.asarray(batch.mb.n_id)])
        with keyed_dropout(model, self.train_config.run.seed, *key):
            return model(batch.x, blocks)

    def state(self) -> dict[str, Any]:
        st = super().state()
        st["weight"] = self.weight
        st["part_models"] = self.part_models.state()
        st["part_weights"] = self.part_models.weights(self.part_weights)
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
        if self._scratch is not None:  # no step follows: the grown parts' files go
            for f in self.features:
                f.close()
            self.loaders, self.features, self.grown = [], [], []  # their maps first
            self._scratch.close()
            self._scratch = None

    def feature_stores(self) -> list:
        return list(self.features)

    def settings(self) -> dict[str, Any]:
        out = {
            "average_every": self.options.average_every,
            "average_optimizer": self.options.average_optimizer,
            "local_optimizer_state": not self.options.average_optimizer,
            "part_models": self.options.part_models,
            "halo_hops": self.halo_hops,
        }
        s = self.store.schema
        if s is not None:
            out["typed"] = {"node_types": len(s.node_types), "relations": len(s.edge_types)}
        return out
