"""``disagg``: batch preparation disaggregated from model computation (Armada).

Waleffe et al., "Armada: Memory-Efficient Distributed Training of Large-Scale Graph Neural
Networks" (2025), Sections 3, 5 and 6.1. One torchrun job, two roles
(:class:`~shoal.engines.disagg.plan.Roles`): ranks ``0 .. C-1`` are compute workers, ranks
``C .. W-1`` batch workers (:class:`~shoal.engines.disagg.worker.BatchWorker`, CPU only).
The epoch (coordinator, schedule, global batches, cache, weights broadcast), typed stores,
options and measurements: docs/distributed.md#disagg-armada.

The link task (``--task link``, :mod:`shoal.engines.linktask`; the paper describes node
classification only): a batch worker draws the link steps of its own parts' positives (part
``p`` to batch worker ``p mod B``), ``G`` consecutive steps per global batch, excluding their
edges and reverses at every hop (``link_scope`` stays ``"graph"``); the phases spread evenly
over its batches (:func:`~shoal.engines.disagg.plan.link_schedule`; a worker with more
batches than steps sends empty ones); the update is the mean over every compute worker's
positives of the iteration (docs/linkpred.md#across-processes-every-engine).

Named deviations of the link task: ``--local-sampling`` is refused (a link batch's nodes lie
in every part), and so is ``--embedding-dim`` (batch workers send the store's rows); a
swapped-out part's rows with an excluded edge are read whole from the store, to draw what a
resident part draws.
"""

from __future__ import annotations

import copy
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from shoal.distributed.runtime import local_peers, nccl_group
from shoal.engines.base import ENGINE_RESERVE, Engine
from shoal.engines.disagg.msg import recv_batch, send_update
from shoal.engines.disagg.plan import (
    Roles,
    assign_parts,
    default_batch_workers,
    epoch_schedule,
    link_schedule,
)
from shoal.engines.disagg.rowcache import ComputeCache
from shoal.engines.disagg.sampling import replica_count
from shoal.engines.disagg.worker import BatchWorker
from shoal.engines.linktask import LinkStep
from shoal.errors import ShoalInputError
from shoal.graph.blocks import Batch, MiniBatch
from shoal.rows.budget import memory_limit, reserve_for
from shoal.training.device import DeviceFeed
from shoal.training.meter import EpochMeter
from shoal.utils.io import parse_size

__all__ = ["DisaggEngine", "cache_rows", "default_batch_workers"]

log = logging.getLogger(__name__)

COUNTERS = tuple(
    "batches rows_sent rows_omitted batch_bytes update_bytes hits redundant "
    "peak_pending unavailable bytes_read sample_bytes pull_bytes remote_requests "
    "replica_sampled replica_saved_bytes replica_rows replica_bytes disk_sampled "
    "disk_bytes".split()
)


def cache_rows(spec: str | int | float, num_nodes: int, row_bytes: int) -> int:
    """Rows of the compute-worker cache: an int (rows), ``"5%"`` (of the nodes) or a size."""
    if isinstance(spec, int | np.integer):
        return int(spec)
    text = str(spec).strip()
    if text.endswith("%"):
        return int(num_nodes * float(text[:-1]) / 100)
    if text.isdigit():
        return int(text)
    return int(parse_size(text)) // row_bytes


class DisaggEngine(Engine):
    """Armada-style disaggregated training (see the module docstring)."""

    name = "disagg"

    def rank_of_parts(self) -> np.ndarray:
        """Evaluation spreads the parts over the batch workers (compute workers hold none)."""
        roles = self._roles()
        p = self.store.num_parts
        if p < roles.batch_workers:
            raise ShoalInputError(
                f"the store has {p} parts, fewer than the {roles.batch_workers} batch workers",
                fix=f"use --batch-workers {p} or fewer, or build a store with more parts",
            )
        return roles.compute_workers + np.arange(p, dtype=np.int64) % roles.batch_workers

    def _roles(self) -> Roles:
        world = self.ctx.world_size
        try:
            return Roles(world, self.options.batch_workers or default_batch_workers(world))
        except ValueError as e:
            raise ShoalInputError(
                str(e),
                fix="start at least 2 processes (--nproc) and give "
                "--batch-workers B with C <= B < world (C = world - B)",
            ) from None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg, ctx, store = self.train_config, self.ctx, self.store
        self.roles = roles = self._roles()
        if self.link is not None:
            self._check_link()
        if roles.is_batch(ctx.rank):  # batch workers sample and read rows on the host
            self.device = torch.device("cpu")
            self.feed = DeviceFeed(self.device)
        self.model = self.build_model()
        self.optimizer = self.adam(self.model)
        # every rank creates every group, in the same order
        self.compute_group = dist.new_group(roles.compute_ranks)
        self.batch_group = dist.new_group(roles.batch_ranks)
        # the compute workers' gradients: over NCCL when each has its own GPU (the same
        # --device on every rank, so every rank takes the same branch)
        self.grad_group = self.compute_group
        if ctx.device.type == "cuda":
            self.grad_group = (
                nccl_group(self.device, roles.compute_ranks, timeout_s=ctx.timeout_s)
                or self.compute_group
            )
        self.capacity = cache_rows(self.options.disagg_cache, store.num_nodes, self.row_bytes)
        self.dim = int(store.feature_dim)
        self.is_batch = roles.is_batch(ctx.rank)
        peers = local_peers(ctx)  # collective: every rank
        if self.is_batch:
            total = cfg.memory.limit_bytes or memory_limit(peers[0], cgroup_processes=peers[1])[0]
            self.worker = BatchWorker(
                self, budget=max((total - reserve_for(ENGINE_RESERVE)) // 2, 0)
            )
        else:
            feeders = roles.feeders(ctx.rank)
            self.cache = ComputeCache(store.num_nodes, self.dim, self.capacity, feeders)
        self._pool: ThreadPoolExecutor | None = None
        if self.options.replica_exec == "threads" and self.options.replicas > 1:
            # a persistent buffer is state the replicas would update at once; a relational
            # model's non-persistent ones are constants (its relations' destination types)
            state = self.model.state_dict()
            if any(n in state for n, _ in self.model.named_buffers()):
                raise ShoalInputError(
                    "--replica-exec threads shares one set of weights between the replicas; "
                    "this model has buffers (e.g. batch-norm statistics) they would update "
                    "at once",
                    fix="use --replica-exec sequential",
                )
            if not self.is_batch:
                self._pool = ThreadPoolExecutor(
                    self.options.replicas - 1, thread_name_prefix="shoal-replica"
                )
                # a module object per replica: functional_call swaps a module's parameters
                # while it runs, so two threads must never run the same module object
                self._modules = [self.model] + [
                    copy.deepcopy(self.model) for _ in range(self.options.replicas - 1)
                ]
        self.last: dict[str, Any] = {}
        if ctx.is_rank0:
            log.info(
                "disagg: compute ranks %s, batch ranks %s (batch worker j feeds compute "
                "rank j mod %d), %d replica(s) (%s), cache %d rows, queue %d, %s sampling%s, "
                "%d replicated nodes",
                roles.compute_ranks,
                roles.batch_ranks,
                roles.compute_workers,
                self.options.replicas,
                self.options.replica_exec,
                self.capacity,
                self.options.batch_queue,
                "local" if self.options.local_sampling else "remote",
                "" if self.options.grouping else ", no grouping",
                0
                if self.options.local_sampling
                else replica_count(self.options.replicate_top, store.num_nodes),
            )

    # ---------------------------------------------------------------- the epoch
    def _plan(self, epoch: int):
        """Steps 1-2 (collective): the mapping from the coordinator, every batch worker's
        phases, the schedule."""
        cfg, roles, p = self.train_config, self.roles, self.store.num_parts
        m = (
            torch.from_numpy(assign_parts(p, roles.batch_workers, cfg.run.seed, epoch))
            if self.ctx.rank == roles.coordinator
            else torch.empty(p, dtype=torch.int64)
        )
        dist.broadcast(m, src=roles.coordinator)
        part_to_bw = m.numpy().copy()
        vec = torch.zeros(p + 2, dtype=torch.int64)
        ph = []
        if self.is_batch:
            ph = self.worker.phases(part_to_bw, epoch)
            seeds = [len(s) for s in self.worker.phase_seeds(ph)]
            vec[0] = len(seeds)
            vec[1 : 1 + len(seeds)] = torch.tensor(seeds, dtype=torch.int64)
        every = [torch.empty_like(vec) for _ in range(self.ctx.world_size)]
        dist.all_gather(every, vec)
        phase_seeds = [every[r][1 : 1 + int(every[r][0])].tolist() for r in roles.batch_ranks]
        if self.link is not None:  # every batch worker: the task's steps, G per batch
            phases = [len(s) for s in phase_seeds]
            sched = link_schedule(
                self.link.num_batches, phases, roles, replicas=self.options.replicas
            )
            return part_to_bw, ph, sched
        sched = epoch_schedule(
            phase_seeds, roles, batch_size=cfg.sampling.batch_size, replicas=self.options.replicas
        )
        return part_to_bw, ph, sched

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        self.stats.reset()
        part_to_bw, ph, sched = self._plan(epoch)
        self.num_batches = sched.iterations
        meter = EpochMeter(
            epoch,
            sched.iterations,
            enable=self.train_config.run.progress if self.ctx.is_rank0 else False,
            device=self.device,  # (on a GPU: CUDA events, no wait a step)
        )
        if self.is_batch:
            steps = self.link.steps(epoch) if self.link is not None else None
            rec = self.worker.run_epoch(epoch, part_to_bw, ph, sched, steps)
            for k in ("sampling", "loading", "features", "send_wait"):
                meter.add(k, rec[k])
            rec["bytes_read"] = self.worker.resident.bytes_read
        else:
            rec = self._compute_epoch(sched, meter)
        self.last = rec
        self._share_weights()
        counters = torch.tensor([float(rec.get(k, 0)) for k in COUNTERS], dtype=torch.float64)
        dist.all_reduce(counters)
        d = dict(zip(COUNTERS, counters.tolist()))
        looked = d["rows_sent"] + d["rows_omitted"]
        d["hit_rate"] = d["rows_omitted"] / looked if looked else 0.0
        if d["unavailable"] and self.ctx.is_rank0:
            log.warning(
                "disagg: %d frontier nodes of swapped-out parts got no neighbours this epoch "
                "(--swapped-neighbours skip, the paper's footnote 1); --swapped-neighbours "
                "read samples them from the store",
                int(d["unavailable"]),
            )
        d.update(
            iterations=sched.iterations,
            cache_rows=self.capacity,
            batch_workers=self.roles.batch_workers,
            replicas=self.options.replicas,
        )
        return self.epoch_record(**meter.close(), disagg=d)

    def _compute_epoch(self, sched, meter: EpochMeter) -> dict[str, Any]:
        """A compute worker's epoch: receive each global batch, assemble its rows from the
        cache, train the replicas' mini-batches, all-reduce (books kept in ``meter``)."""
        roles, rank = self.roles, self.ctx.rank
        for k in ("receive_wait", "assemble", "forward_backward", "allreduce"):
            meter.phases.setdefault(k, 0.0)
        rec = {k: 0 for k in COUNTERS}
        feeders = [roles.batch_ranks[b] for b in roles.feeders(rank)]
        sends: list = []
        self.model.train()
        for i, (b, _) in enumerate(sched.order[rank]):
            with meter.time("receive_wait"):
                typed, link = self.store.schema is not None, self.link is not None
                gb, nbytes = recv_batch(roles.batch_ranks[b], self.dim, typed, link)
            self.stats.bytes_received += nbytes
            with meter.time("assemble"):
                self.cache.acknowledge(b, gb.ack)
                x_all, (v, ins, ev) = self.cache.consume(gb.ids, gb.sent, gb.rows)
                if self.capacity:
                    for f in feeders:
                        sends.append(send_update(f, v, ins, ev))
                        self.stats.bytes_sent += 24 + 8 * (len(ins) + len(ev))
            loss_sum, correct, seen = 0.0, 0, 0
            with meter.time("forward_backward"):
                total = max(sched.iteration_seeds(i), 1)
                self.optimizer.zero_grad(set_to_none=True)
                if self._pool is not None:
                    loss_sum, correct, seen = self._replicas_in_threads(gb, x_all, total)
                else:
                    for g in range(len(gb.minibatches)):
                        ls, c, n = self._replica_step(gb, g, x_all, total)
                        loss_sum, correct, seen = loss_sum + ls, correct + c, seen + n
            with meter.time("allreduce"):
                self._all_reduce(seen if link else None)
                self.optimizer.step()
            meter.step_sums(loss_sum, correct, seen)
        self.cache.end_epoch()
        for works, *_ in sends:
            for w in works:
                w.wait()
        st = self.cache.stats
        rec.update(hits=st["hits"], redundant=st["redundant"], peak_pending=st["peak_pending"])
        for k in ("hits", "sent", "redundant"):
            st[k] = 0
        return rec

    def _replica_inputs(self, gb, g: int, x_all: np.ndarray):
        """Replica ``g``'s features, labels, blocks and seed count (on the device)."""
        cfg = self.train_config
        pos, blocks = gb.blocks(g, self.tables.degrees)
        seeds = gb.minibatches[g][0]
        x = torch.from_numpy(x_all[pos])
        if cfg.model.normalize_features:
            s = x.sum(1, keepdim=True)
            x = torch.where(s != 0, x / torch.where(s != 0, s, 1.0), x)
        if self.link is None:
            y = torch.from_numpy(self.tables.labels[gb.ids[pos[:seeds]]].astype(np.int64))
        else:  # the link task: no labels (its step travels with the batch)
            y = torch.zeros(0, dtype=torch.int64)
        if self.device.type != "cpu":
            b = self.feed.to_device(Batch(MiniBatch(gb.ids[pos], blocks, seeds), x, y))
            x, y, blocks = b.x, b.y, b.mb.blocks
        return x, y, blocks, seeds

    def _replica_step(self, gb, g: int, x_all: np.ndarray, total: int) -> tuple[float, int, int]:
        """One replica's forward and backward; the loss is scaled so that the all-reduced
        mean over compute workers is the mean over the iteration's seeds (a link step's is
        summed over its positives: :meth:`_all_reduce` divides by the iteration's)."""
        x, y, blocks, seeds = self._replica_inputs(gb, g, x_all)
        out = self.model(x, blocks)
        if self.link is not None:
            step = self._link_of(gb, g)
            loss = self.link.loss(self.model, out, step)
            (loss * len(step)).backward()
            return float(loss.detach()) * len(step), 0, len(step)
        if seeds:
            loss = F.cross_entropy(out, y, reduction="sum")
            (loss * self.roles.compute_workers / total).backward()
            return float(loss.detach()), int((out.detach().argmax(1) == y).sum()), seeds
        (out.sum() * 0.0).backward()
        return 0.0, 0, 0

    def _replica_grads(self, gb, g: int, x_all: np.ndarray, total: int):
        """Replica ``g``'s :meth:`_replica_step` (a link step's encoder and scorer in one
        functional call) in its thread, on its own module object: its
        parameters are views of the weights (shared storage, its own autograd leaves), so
        its gradients stay its own; returns ``(loss, correct, seen, gradients)``."""
        params = {n: p.detach().requires_grad_(True) for n, p in self.model.named_parameters()}
        leaves = list(params.values())
        x, y, blocks, seeds = self._replica_inputs(gb, g, x_all)
        module = self._modules[g]
        module.train(self.model.training)
        if self.link is not None:
            step = self._link_of(gb, g)
            wrapped = {f"model.{n}": p for n, p in params.items()}
            loss = torch.func.functional_call(
                _LinkLoss(module, self.link), wrapped, (x, blocks, step)
            )
            scaled = loss * len(step)
            sums = (float(loss.detach()) * len(step), 0, len(step))
        else:
            out = torch.func.functional_call(module, params, (x, blocks))
            if not seeds:
                return 0.0, 0, 0, [torch.zeros_like(p) for p in leaves]
            loss = F.cross_entropy(out, y, reduction="sum")
            scaled = loss * self.roles.compute_workers / total
            sums = (float(loss.detach()), int((out.detach().argmax(1) == y).sum()), seeds)
        grads = torch.autograd.grad(scaled, leaves, allow_unused=True)
        return *sums, [torch.zeros_like(p) if gr is None else gr for p, gr in zip(leaves, grads)]

    # ---------------------------------------------------------------- the link task
    def _check_link(self) -> None:
        """What the link task needs of this engine (module docstring, the link task)."""
        if self.options.local_sampling:
            raise ShoalInputError(
                "--local-sampling samples only the parts a batch worker holds; a link batch's "
                "nodes (positives' ends, negatives) lie in every part",
                fix="drop --local-sampling (batch workers sample each other's parts)",
            )

    def _link_of(self, gb, g: int) -> LinkStep:
        """Replica ``g``'s link step: its positives and negatives from the batch, its end
        nodes (sorted) the mini-batch's seeds."""
        seeds, pos, _ = gb.minibatches[g]
        return LinkStep(*gb.links[g], gb.ids[pos[:seeds]], 0)

    def _replicas_in_threads(self, gb, x_all: np.ndarray, total: int) -> tuple[float, int, int]:
        """The ``G`` replicas at once (:meth:`_replica_grads`; replica 0 in this thread),
        torch's intra-op threads split between them; gradients summed in replica order into
        the weights' ``grad``."""
        grads = self._replica_grads
        G = len(gb.minibatches)
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, threads // G))
        try:
            futures = [self._pool.submit(grads, gb, g, x_all, total) for g in range(1, G)]
            results = [grads(gb, 0, x_all, total)]
            results += [f.result() for f in futures]
        finally:
            torch.set_num_threads(threads)
        for k, p in enumerate(self.model.parameters()):
            acc = results[0][3][k]
            for r in results[1:]:
                acc = acc + r[3][k]
            p.grad = acc
        return (
            sum(r[0] for r in results),
            sum(r[1] for r in results),
            sum(r[2] for r in results),
        )

    def _all_reduce(self, positives: int | None = None) -> None:
        """The compute workers' mean gradient; the link task's (``positives``: this worker's
        positives of the iteration, its gradients sums over them) goes with the positives,
        and the sum is divided by all of them: the mean over the iteration's positives."""
        if self.roles.compute_workers == 1 and positives is None:
            return
        params = list(self.model.parameters())
        grads = [
            p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=p.device)
            for p in params
        ]
        if positives is not None:
            grads.append(torch.tensor([float(positives)], device=grads[0].device))
        flat = torch.cat(grads)
        if self.roles.compute_workers > 1:
            dist.all_reduce(flat, group=self.grad_group)
        if positives is None:
            flat /= self.roles.compute_workers
        else:
            flat = flat[:-1] / flat[-1].clamp(min=1.0)
        self.stats.allreduce_bytes += flat.numel() * 4
        off = 0
        for p in params:
            p.grad = flat[off : off + p.numel()].view_as(p).clone()
            off += p.numel()

    def _share_weights(self) -> None:
        """Compute rank 0's weights (and optimizer state shape-free: weights only) to every
        rank, so evaluation and checkpoints see the trained model everywhere."""
        flat = torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).cpu()
        dist.broadcast(flat, src=0)  # host tensors: batch workers hold theirs on the host
        off = 0
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(flat[off : off + p.numel()].view_as(p))
                off += p.numel()

    def close_io(self) -> None:
        super().close_io()
        if getattr(self, "worker", None) is not None:
            self.worker.close()

    def settings(self) -> dict[str, Any]:
        return {
            "batch_workers": self.roles.batch_workers,
            "compute_workers": self.roles.compute_workers,
            "replicas": self.options.replicas,
            "cache_rows": self.capacity,
            "grouping": self.options.grouping,
            "local_sampling": self.options.local_sampling,
            "batch_queue": self.options.batch_queue,
            "resident_parts": self.options.resident_parts,
            "replicate_top": self.options.replicate_top,
            "swapped_neighbours": self.options.swapped_neighbours,
            "replica_exec": self.options.replica_exec,
        }


class _LinkLoss(torch.nn.Module):
    """A replica's link loss as one module call (``torch.func.functional_call`` swaps the
    encoder's and the attached scorer's parameters for the call)."""

    def __init__(self, model: torch.nn.Module, task: Any) -> None:
        super().__init__()
        self.model, self.task = model, task

    def forward(self, x: torch.Tensor, blocks: list, step: LinkStep) -> torch.Tensor:
        return self.task.loss(self.model, self.model(x, blocks), step)
