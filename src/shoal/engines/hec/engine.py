"""``hec``: local mini-batches with a historical embedding cache and delayed pushes (DistGNN-MB).

Vasimuddin et al., "DistGNN-MB: Distributed Large-Scale Graph Neural Network Training on x86
via Minibatch Sampling" (2022), Sections 3.1-3.2, Algorithms 1-2, Figure 1. Every rank
samples locally only (halo vertices are leaves, Sec. 3.3), keeps one
:class:`~shoal.engines.hec.cache.HistoricalCache` per layer and, per step ``k`` and layer
``l`` (Algorithm 2), stores what was pushed at step ``k - d`` (lines 7-9), drops a miss's
edges (lines 10-12) and, while ``k < M - d``, pushes at most ``nc`` solid vertices to each
peer (lines 14-24); gradients are all-reduced every step (Sec. 4.2). Every rank runs the same
number of steps ``M`` per epoch. ``hec_cache`` False is the ablation (``minibatch``'s sampling
and pulls). Checkpoints hold the caches' clock and lines. The mechanism, options, typed
stores, one process and measurements: docs/distributed.md#hec-distgnn-mb.

The link task (``--task link``): a step's end nodes (``step.nodes``) are the batch's seeds,
mapped to solid ids, its positive edges and their reverses excluded at every hop (the paper
trains node classification only); the named deviation (``link_scope = "part"``, the edge
cut's halo ends served from the caches): docs/linkpred.md#across-processes-every-engine.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from shoal.distributed.rankgraph import rank_graph
from shoal.engines.base import Engine
from shoal.engines.hec.cache import (
    DelayedPush,
    HistoricalCache,
    drop_sources,
    halo_database,
    select_push,
)
from shoal.engines.linktask import LinkStep
from shoal.engines.minibatch.engine import dist_pulls, dist_sampler
from shoal.errors import ShoalInputError
from shoal.graph.blocks import Block, MiniBatch
from shoal.nn.base import keyed_dropout, layer_widths
from shoal.rows.parts import part_rows
from shoal.sample.sampler import NeighborSampler
from shoal.training import batch_seed
from shoal.training.meter import EpochMeter

__all__ = ["HecEngine"]

log = logging.getLogger(__name__)


class HecEngine(Engine):
    """DistGNN-MB-style training with historical embedding caches (module docstring)."""

    name = "hec"
    global_batch = True  # synchronous SGD: the step's batch is every rank's
    tables_scope = "local"  # trains on its parts and their halos
    link_scope = "part"  # samples locally: a link step's ends are its solid nodes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg, ctx, store = self.train_config, self.ctx, self.store
        self.typed = store.schema is not None
        if self.typed and cfg.model.factory:
            raise ShoalInputError(
                "the hec engine runs its model layer by layer, replacing halo rows with cached "
                "ones between layers: it cannot run a --model-factory model on a typed store",
                path=store.path,
                fix="use --model rgcn or rgat with hec, or an engine that takes any model "
                "(minibatch, averaging)",
            )
        self.model = self.build_model()
        self.require_block_model("replaces halo rows between layers")
        s_rows = sum(p.num_core for p in self.parts)
        # its sampler draws from the rank's CSR in memory (it reads no entries from disk): the
        # parts' CSRs are held in the process's own memory and counted, and so is the rank's
        # merged copy of several parts (int64 entries and row offsets), or the budget is refused
        merged = 0
        if len(self.parts) > 1:
            merged = sum(8 * (len(p.indices) + p.num_core) for p in self.parts)
        plan = self.plan_memory(
            feature_bytes=s_rows * self.row_bytes,
            num_rows=max(s_rows, 1),
            extra_bytes=16 * s_rows + merged,
            structure="memory",
        )
        g = rank_graph(self.parts, self.part_to_rank, ctx.rank, store.owner, store)
        self.graph = g
        self.cached = bool(self.options.hec_cache)
        local_ids = np.concatenate([g.solid, g.halo])
        self.local_ids = local_ids
        self.degrees = self.tables.degrees[local_ids] if len(local_ids) else np.zeros(0, np.float32)
        self.sampler = NeighborSampler(
            g.indptr,
            g.indices,
            cfg.sampling.fanouts,
            num_nodes=len(local_ids),
            degrees=self.degrees,
            # a typed store: fanouts per relation, blocks labelled (None: untyped)
            schema=store.schema,
            node_type=g.node_type,
            edge_types=g.edge_types,
        )
        dim = int(store.feature_dim)
        #: per local id, whether its layer-0 input is a row (False: a featureless type's
        #: embedding row, held by the model: never looked up, pushed or dropped at L0)
        self.has_row: np.ndarray | None = None
        if self.typed:
            featured = np.array([bool(t.feature_dim) for t in store.schema.node_types])
            self.has_row = featured[g.node_type]
        self.features = self.cached_rows(
            plan, show_progress=cfg.run.progress if ctx.is_rank0 else False
        )
        if self.link is None:
            train = np.concatenate(
                [
                    np.flatnonzero(np.asarray(p.train_mask)) + o
                    for p, o in zip(self.parts, np.cumsum([0] + [p.num_core for p in self.parts]))
                ]
                or [np.empty(0, np.int64)]
            ).astype(np.int64)
            self.seeds = train
            self.labels = self.tables.labels[g.solid] if len(g.solid) else np.empty(0, np.int32)
            steps = torch.tensor(
                [math.ceil(len(train) / cfg.sampling.batch_size)], dtype=torch.int64
            )
            if ctx.world_size > 1:
                dist.all_reduce(steps, op=dist.ReduceOp.MAX)
            self.num_batches = int(steps.item())
        else:  # the link task's steps: the same number on every rank
            self.labels, self.num_batches = None, self.link.num_batches
        self.dims = layer_widths(self.model, dim)[:-1]  # every layer's input
        self.caches: list[HistoricalCache] = []
        self.push: DelayedPush | None = None
        if self.cached:
            # Algorithm 1: db_halo and one cache per layer
            owner_rank = self.part_to_rank[store.owner(g.halo)] if len(g.halo) else g.halo
            self.db = halo_database(g.halo, owner_rank, ctx.world_size, self.stats)
            self.caches = [
                HistoricalCache(
                    universe=g.halo,
                    dim=w,
                    size=self.options.hec_size,
                    lifespan=self.options.hec_lifespan,
                )
                for w in self.dims
            ]
            self.push = DelayedPush(self.dims, ctx.world_size, self.options.hec_delay, self.stats)
        else:
            # the ablation: the same batches sampled over the whole graph (remote frontier
            # nodes sampled by their owners) and every remote input row pulled, as the
            # ``minibatch`` engine does; no historical embedding anywhere
            self.dsampler = dist_sampler(self, cfg.sampling.fanouts)
            self.pull = dist_pulls(
                self, {p.index: part_rows(p) if self.typed else p.features for p in self.parts}
            )
        self.now = 0  # mini-batch steps since the start: the caches' clock
        self.optimizer = self.adam(self.model)
        self.param_bytes = 4 * sum(p.numel() for p in self.model.parameters())
        if ctx.is_rank0:
            log.info(
                "hec: rank 0 has %d solid and %d halo nodes, %d steps per epoch; caches of "
                "%s lines",
                g.num_solid,
                len(g.halo),
                self.num_batches,
                [c.capacity for c in self.caches],
            )

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.train_config
        self.stats.reset()
        for c in self.caches:
            c.stats.reset()
        self.model.train()
        meter = EpochMeter(
            epoch,
            self.num_batches,
            enable=cfg.run.progress if self.ctx.is_rank0 else False,
            phases=("sampling", "gather", "forward_backward", "communication"),
            device=self.device,  # (on a GPU: CUDA events, no wait a step)
        )
        m, d = self.num_batches, self.options.hec_delay
        batches = self.epoch_batches(epoch) if self.link is None else self.link.steps(epoch)
        for k, seeds in enumerate(batches):
            if not self.cached:
                meter.step(*self._step_uncached(epoch, k, seeds, meter.phases))
                self.now += 1
                continue
            with meter.time("communication"):
                got = self.push.receive(k) if k >= d else None  # lines 7-9
                if got is not None:
                    for layer, per_rank in enumerate(got):
                        for ids, rows in per_rank:
                            self.caches[layer].stats.received += len(ids)
                            self.caches[layer].store(ids, rows, self.now)
            loss, ok, n, pushes = self._step(epoch, k, seeds, meter.phases, send=k < m - d)
            if pushes is not None:
                with meter.time("communication"):
                    self.push.send(k, pushes)  # lines 14-24
            meter.step(loss, ok, n)
            self.now += 1
        if self.push is not None:
            self.push.drain()
        rec = self.epoch_record(**meter.close(), hec=self._hec_record())
        if self.link is not None:  # no accuracy: the loss is over positive edges
            rec["train_accuracy"] = None
        return rec

    def _step(self, epoch: int, k: int, seeds: np.ndarray | LinkStep, timer: dict, *, send: bool):
        """One mini-batch (training nodes, or a link step): lookup, forward with cached halo
        rows, backward, all-reduce; returns (loss, correct, seeds or positives, the pushes to
        send or None)."""
        g = self.graph
        s = g.num_solid
        self.optimizer.zero_grad(set_to_none=True)
        loss_v, ok, rows_of = 0.0, 0, None
        if len(seeds):
            t0 = time.perf_counter()
            mb = self._sample_local(epoch, k, seeds)
            t1 = time.perf_counter()
            solid = mb.n_id < s
            x = torch.zeros((len(mb.n_id), self.dims[0]), dtype=torch.float32)
            if solid.any():
                x[torch.from_numpy(solid)] = self.features.gather(mb.n_id[solid])
            t2 = time.perf_counter()
            blocks, inject = self._lookup(mb.n_id, solid, self._blocks(mb, self.local_ids))
            dev = self.device  # the caches stay on the host; the layers run on the device
            h, rows_of = x.to(dev, non_blocking=True), []
            with self._dropout(epoch, k):
                for layer, block in enumerate(blocks):
                    pos, lines = inject[layer]
                    if len(pos):  # line 12: cached rows replace the halo rows
                        h = h.index_put(
                            (torch.from_numpy(pos).to(dev),),
                            self.caches[layer].load(lines).to(dev),
                        )
                    rows_of.append(h)
                    h = self.model.layer_forward(layer, h, block.to(dev))
            loss_v, ok = self._backward(h, seeds, self.labels, mb.seeds)
            timer["sampling"] += t1 - t0
            timer["gather"] += t2 - t1
            timer["forward_backward"] += time.perf_counter() - t2
        self._update(timer)
        pushes = None
        if send:
            pushes = self._pushes(epoch, k, mb if len(seeds) else None, rows_of)
        return loss_v, ok, len(seeds), pushes

    def _sample_local(self, epoch: int, k: int, seeds: np.ndarray | LinkStep) -> MiniBatch:
        """The batch's blocks sampled over the rank graph: training nodes (solid ids) from the
        batch seed, or a link step's end nodes from its seed with its positive edges (and their
        reverses) excluded, both mapped to solid ids (the seeds' outputs come out in
        ``step.nodes``' order: the map keeps it)."""
        if isinstance(seeds, LinkStep):
            solid = self._solid_ids
            return self.sampler.sample(solid(seeds.nodes), seeds.seed, exclude=solid(seeds.exclude))
        return self.sampler.sample(
            seeds, batch_seed(self.train_config.run.seed, epoch, k) + self.ctx.rank
        )

    def _solid_ids(self, ids: np.ndarray) -> np.ndarray:
        """Solid (rank-local) ids of global ids of this rank's core nodes (``g.solid`` is
        sorted: the rank's parts in order, each a range of ids); every end of a link step is
        one (``link_scope = "part"``)."""
        solid = self.graph.solid
        out = np.searchsorted(solid, ids)
        if out.size and not np.array_equal(solid[np.minimum(out, len(solid) - 1)], ids):
            raise ValueError("a link step's node is not a core node of this rank")
        return out

    def _backward(self, h: torch.Tensor, seeds, labels, at: np.ndarray) -> tuple[float, int]:
        """The batch's loss, backpropagated: a link step's (``seeds``; ``h``: the outputs of
        ``step.nodes``, in order; the scorer is the model's), else the cross-entropy against
        ``labels[at]``; returns (loss, correct predictions: 0 for a link step)."""
        if isinstance(seeds, LinkStep):
            loss = self.link.loss(self.model, h, seeds)
            loss.backward()
            return float(loss.detach()), 0
        y = torch.from_numpy(labels[at].astype(np.int64)).to(self.device)
        loss = F.cross_entropy(h, y)
        loss.backward()
        return float(loss.detach()), int((h.detach().argmax(1) == y).sum())

    def _blocks(self, mb: MiniBatch, to_global: np.ndarray | None) -> list[Block]:
        """The batch's blocks; on a typed store each with its sources' original ids
        (``to_global``: the global id of every id of ``mb.n_id``, None: they are global)."""
        if not self.typed:
            return list(mb.blocks)
        ids = mb.n_id if to_global is None else to_global[mb.n_id]
        return mb.with_node_ids(self.store.to_orig(ids))

    def _dropout(self, epoch: int, k: int):
        """On a typed store, dropout keyed by (seed, epoch, step, rank, original id) as the
        ``minibatch`` engine's; untyped, torch's stream as ever."""
        if not self.typed:
            return contextlib.nullcontext()
        world, rank = self.ctx.world_size, self.ctx.rank
        return keyed_dropout(self.model, self.train_config.run.seed, epoch, k * world + rank)

    def _update(self, timer: dict) -> None:
        """The gradients averaged over the ranks (collective), then the optimizer's step."""
        t0 = time.perf_counter()
        if self.typed:
            self._all_reduce_typed()
        else:
            self.all_reduce_gradients(average=True)
        timer["communication"] += time.perf_counter() - t0
        self.optimizer.step()

    def _all_reduce_typed(self) -> None:
        """The gradients averaged over the ranks in one flattened all-reduce, with one more
        word per parameter counting the ranks that have its gradient: a relation absent from
        every rank's batch leaves its weights without a gradient (Adam skips them, as it
        does in one process and under DistributedDataParallel); absent on some ranks only,
        those contribute zeros."""
        if self.ctx.world_size == 1:
            return
        params = list(self.model.parameters())
        dev = params[0].device if params else torch.device("cpu")
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev)
        flat = torch.cat(
            [
                p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=dev)
                for p in params
            ]
            + [has]
        )
        dist.all_reduce(flat, group=self.ctx.model_group)
        flat /= self.ctx.world_size
        self.stats.allreduce_bytes += flat.numel() * 4
        off, used = 0, flat[-len(params) :] if params else flat[:0]
        for p, u in zip(params, used.tolist(), strict=True):
            n = p.numel()
            p.grad = flat[off : off + n].view_as(p).clone() if u > 0 else None
            off += n

    def _step_uncached(self, epoch: int, k: int, seeds: np.ndarray | LinkStep, timer: dict):
        """One mini-batch with the cache off (``hec_cache=False``): the batch's blocks sampled
        over the whole graph (a link step's: its end nodes with its exclusions, global ids),
        remote input rows pulled from their owners, no halo row replaced or dropped
        (collective: run on empty steps too); returns (loss, correct, seeds or positives)."""
        cfg, g = self.train_config, self.graph
        self.optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        if isinstance(seeds, LinkStep):
            mb = self.dsampler.sample(seeds.nodes, seeds.seed, exclude=seeds.exclude)
        else:
            mb = self.dsampler.sample(
                g.solid[seeds], batch_seed(cfg.run.seed, epoch, k) + self.ctx.rank
            )
        t1 = time.perf_counter()
        x = self.pull.pull(mb.n_id).clone()
        if cfg.model.normalize_features:
            s = x.sum(1, keepdim=True)
            x = torch.where(s != 0, x / torch.where(s != 0, s, 1.0), x)
        t2 = time.perf_counter()
        loss_v, ok = 0.0, 0
        if len(seeds):
            dev = self.device
            h = x.to(dev, non_blocking=True)
            with self._dropout(epoch, k):
                for layer, block in enumerate(self._blocks(mb, None)):
                    h = self.model.layer_forward(layer, h, block.to(dev))
            loss_v, ok = self._backward(h, seeds, self.tables.labels, mb.seeds)
        timer["sampling"] += t1 - t0
        timer["gather"] += t2 - t1
        timer["forward_backward"] += time.perf_counter() - t2
        self._update(timer)
        return loss_v, ok, len(seeds)

    def _lookup(self, n_id: np.ndarray, solid: np.ndarray, blocks: list[Block]):
        """Lines 10-11 per layer: the halo sources of each block found in that layer's cache
        (positions, lines); misses lose their edges in that block. At layer 0 of a typed store
        a featureless type's halo node is not looked up (its input is in the model)."""
        g, inject = self.graph, []
        for layer, block in enumerate(blocks):
            need = ~solid[: block.num_src]
            if layer == 0 and self.has_row is not None:  # a featureless type's: in the model
                need &= self.has_row[n_id[: block.num_src]]
            hpos = np.flatnonzero(need)
            cache = self.caches[layer]
            tags = g.halo[n_id[hpos] - g.num_solid]
            hit, lines = cache.lookup(tags, self.now)
            cache.stats.lookups += len(hpos)
            cache.stats.hits += int(hit.sum())
            miss = hpos[~hit]
            cache.stats.dropped += len(miss)
            if len(miss):
                blocks[layer] = drop_sources(block, miss)
            inject.append((hpos[hit], lines))
        return blocks, inject

    def _pushes(self, epoch: int, k: int, mb, rows_of) -> list:
        """Lines 15-22: per layer and peer, the batch's solid nodes that are halo there (at
        most ``nc``, by degree) and their rows at that layer."""
        cfg, g, world = self.train_config, self.graph, self.ctx.world_size
        limit = None if self.options.hec_push < 0 else self.options.hec_push
        rng = np.random.default_rng([cfg.run.seed, epoch, k, self.ctx.rank, 12])
        out = []
        for layer, dim in enumerate(self.dims):
            per = [(np.empty(0, np.int64), torch.empty(0, dim)) for _ in range(world)]
            if mb is not None:
                nsrc = mb.blocks[layer].num_src
                push = mb.n_id[:nsrc] < g.num_solid
                if layer == 0 and self.has_row is not None:  # no row: nothing to push
                    push &= self.has_row[mb.n_id[:nsrc]]
                pos = np.flatnonzero(push)
                local = mb.n_id[pos]
                glob = g.solid[local]
                for r in range(world):
                    if r == self.ctx.rank or not len(self.db[r]):
                        continue
                    chosen = select_push(glob, self.db[r], self.degrees[local], limit, rng)
                    if len(chosen):
                        at = pos[np.isin(glob, chosen, assume_unique=True)]
                        rows = rows_of[layer]
                        per[r] = (chosen, rows[torch.from_numpy(at).to(rows.device)].detach().cpu())
                        self.caches[layer].stats.pushed += len(chosen)
            out.append(per)
        return out

    def _hec_record(self) -> list[dict[str, Any]]:
        """Per layer, summed over ranks (collective): lookups, hits, hit rate, lines valid at
        the epoch's end, rows pushed, received, dropped."""
        keys = ("lookups", "hits", "pushed", "received", "dropped")
        if not self.caches:  # the cache is off (on every rank alike)
            return []
        t = torch.tensor(
            [[getattr(c.stats, k) for k in keys] + [c.valid_lines(self.now)] for c in self.caches],
            dtype=torch.float64,
        )
        if self.ctx.world_size > 1:
            dist.all_reduce(t)
        out = []
        for layer, row in enumerate(t.tolist()):
            rec = {"layer": layer, **{k: int(v) for k, v in zip(keys, row[:5], strict=True)}}
            rec["valid_lines"] = int(row[5])
            rec["hit_rate"] = rec["hits"] / rec["lookups"] if rec["lookups"] else None
            out.append(rec)
        return out

    def state(self) -> dict[str, Any]:
        """The base checkpoint plus the caches' clock and lines (module docstring)."""
        return {
            **super().state(),
            "hec_now": self.now,
            "hec_caches": [c.state(self.now) for c in self.caches],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """:meth:`state`'s output; saved by another number of processes (whose halos differ),
        the caches start empty."""
        super().load_state(state)
        self.now = int(state.get("hec_now", 0))
        if state.get("resharded_from"):
            return
        for cache, saved in zip(self.caches, state.get("hec_caches") or [], strict=False):
            cache.restore(saved)

    def close_io(self) -> None:
        if self.push is not None:
            self.push.close()
        self.features.close()

    def settings(self) -> dict[str, Any]:
        return {
            "hec_cache": self.cached,
            "hec_size": self.options.hec_size,
            "hec_push": self.options.hec_push,
            "hec_lifespan": self.options.hec_lifespan,
            "hec_delay": self.options.hec_delay,
            "hec_lines": [c.capacity for c in self.caches],
        }
