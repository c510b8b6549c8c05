"""The ``disagg`` engine's batch worker: parts in, sampled and loaded global batches out.

Armada (Waleffe et al., 2025), Section 3 "Mini Batch Preparation Layer" and Section 5: a batch
worker loads the partitions the coordinator gives it (:mod:`~shoal.engines.disagg.bucketparts`),
samples mini-batches of the training nodes it holds (or its link steps' end nodes), loads
their feature rows, and pushes them to its compute worker as grouped global batches
(:mod:`~shoal.engines.disagg.msg`), omitting the rows its view of the compute worker's cache
holds (:mod:`~shoal.engines.disagg.rowcache`). Distributed sampling (default,
:class:`~shoal.engines.disagg.sampling.BatchSampler`) or local (``local_sampling``); at most
``queue`` global batches in flight (docs/distributed.md#disagg-armada).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.feature_store import DistFeatureStore, owner_of
from shoal.engines.disagg.bucketparts import ResidentParts, part_bytes
from shoal.engines.disagg.msg import (
    TAG_INTS,
    TAG_META,
    TAG_ROWS,
    TAG_UPDATE,
    group_union,
    pack_batch,
    recv_update,
)
from shoal.engines.disagg.plan import EpochSchedule, parts_in_order, phases
from shoal.engines.disagg.rowcache import CacheView
from shoal.engines.disagg.sampling import BatchSampler, Replica, replica_count
from shoal.engines.linktask import LinkStep
from shoal.rows.gather import read_rows, source_rows
from shoal.rows.parts import part_rows
from shoal.rows.source import RowSource
from shoal.training.batches import batch_seed

__all__ = ["BatchWorker"]

log = logging.getLogger(__name__)

#: a link step without positives: a worker's batches beyond its steps, and its joins
NO_STEP = LinkStep(np.zeros((0, 2), np.int64), np.zeros((0, 0), np.int64), np.zeros(0, np.int64), 0)


class BatchWorker:
    """One batch worker of ``engine`` (a :class:`~shoal.engines.disagg.engine.DisaggEngine`:
    its store, roles, rank, per-node tables, sampling options, the batch workers' group, the
    counters and :class:`~shoal.engines.disagg.config.DisaggConfig`'s options); see the module
    docstring. ``budget``: bytes of parts (and the replica of the ``replicate_top`` nodes,
    remote sampling only) it may hold together; ``resident_parts`` caps the parts.
    """

    def __init__(self, engine: Any, *, budget: int) -> None:
        cfg, opts, store, roles = engine.train_config, engine.options, engine.store, engine.roles
        local_sampling, degrees = opts.local_sampling, engine.tables.degrees
        self.store, self.roles, self.rank = store, roles, engine.ctx.rank
        self.b = roles.batch_index(self.rank)
        self.dst = roles.compute_of(self.b)
        self.train = engine.tables.train
        self.G, self.batch_size, self.seed = opts.replicas, cfg.sampling.batch_size, cfg.run.seed
        replicate = replica_count(opts.replicate_top, store.num_nodes)
        self.replica = (
            Replica.build(store, degrees, replicate) if replicate and not local_sampling else None
        )
        self.budget, self.max_parts = budget, opts.resident_parts
        if self.replica is not None:  # kept in memory all epoch: the parts get the rest
            self.budget = max(budget - self.replica.nbytes, 0)
            log.debug(
                "batch worker %d: %d replicated nodes, %d bytes (%d read)",
                self.b,
                len(self.replica.ids),
                self.replica.nbytes,
                self.replica.bytes_read,
            )
        self.local, self.grouping, self.queue_len = local_sampling, opts.grouping, opts.batch_queue
        self.group, self.stats = engine.batch_group, engine.stats
        self.offsets = np.asarray(store.part_offsets, np.int64)
        self.part_bytes = part_bytes(store, local=local_sampling)
        self.resident = ResidentParts(store, local=local_sampling)
        self.view = CacheView(store.num_nodes, engine.capacity > 0)
        world = 1 if local_sampling else roles.batch_workers
        self.sampler = BatchSampler(
            store=store,
            replica=self.replica,
            swapped=opts.swapped_neighbours,
            parts=[],
            part_offsets=self.offsets,
            part_to_rank=np.zeros(store.num_parts, np.int64),
            rank=0 if local_sampling else self.b,
            world_size=world,
            fanouts=cfg.sampling.fanouts,
            degrees=degrees,
            stats=self.stats,
            group=None if local_sampling else self.group,
            # a typed store: fanouts per relation, blocks with their relations and types
            schema=store.schema,
            type_of=store.type_of if store.schema is not None else None,
        )
        self.typed = store.schema is not None
        self._sources: dict[int, RowSource] = {}  # a typed part's rows, opened once
        self.queue: deque = deque()
        self._update_head: tuple | None = None
        self.expected = 0
        self.per_round = 1
        self.dim = int(store.feature_dim)
        self.record: dict[str, float] = {}

    # ---------------------------------------------------------------- the epoch's plan
    def phases(self, part_to_bw: np.ndarray, epoch: int) -> list[list[int]]:
        """This worker's phases: parts loaded together first, then one per swap."""
        order = parts_in_order(part_to_bw, self.b, self.seed, epoch)
        ph = phases(order, self.part_bytes, self.budget, self.max_parts)
        log.debug(
            "batch worker %d, epoch %d: parts %s, resident together %s, then swapped in %s",
            self.b,
            epoch,
            order,
            ph[0] if ph else [],
            ph[1:],
        )
        return ph

    def phase_seeds(self, ph: list[list[int]]) -> list[np.ndarray]:
        out = []
        for parts in ph:
            ids = [
                np.flatnonzero(self.train[self.offsets[p] : self.offsets[p + 1]]) + self.offsets[p]
                for p in parts
            ]
            out.append(np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64))
        return out

    # ---------------------------------------------------------------- one epoch
    def run_epoch(
        self,
        epoch: int,
        part_to_bw: np.ndarray,
        ph: list[list[int]],
        sched: EpochSchedule,
        steps: Iterator[LinkStep] | None = None,
    ) -> dict[str, float]:
        """Prepare and send this worker's global batches of ``epoch`` (collective among the
        batch workers when sampling is distributed). ``steps``: the link task's steps of
        this worker (``--task link``; :func:`~shoal.engines.disagg.plan.link_schedule`),
        ``G`` consecutive ones per global batch, instead of its phases' training nodes."""
        t0 = time.perf_counter()
        rec = {
            "sampling": 0.0,
            "loading": 0.0,
            "features": 0.0,
            "send_wait": 0.0,
            "batches": 0,
            "rows_sent": 0,
            "rows_omitted": 0,
            "batch_bytes": 0,
            "update_bytes": 0,
            "sample_bytes": 0,
            "pull_bytes": 0,
            "replica_rows": 0,
        }
        for k in self.sampler.counters:
            self.sampler.counters[k] = 0
        self.sampler.unavailable = 0
        self.record = rec
        self.resident.loads, self.resident.bytes_read = [], 0
        self.expected = self.view.version + sched.iterations  # updates of this epoch
        # the update each of this worker's batches causes where its compute worker takes it
        order = sched.order[self.dst]
        self.consumed_at = {
            k: self.view.version + i + 1 for i, (b, k) in enumerate(order) if b == self.b
        }
        self.sampler.set_parts(
            [], part_to_bw if not self.local else np.zeros(len(part_to_bw), np.int64)
        )
        feats = self._feature_store(part_to_bw)
        self.per_round = int(sched.per_round[self.b])
        pb = sched.phase_batches[self.b]
        if steps is None:
            rng = np.random.default_rng([self.seed, epoch, self.b])
            seeds = [rng.permutation(s) for s in self.phase_seeds(ph)]
            chunks = [c for s, k in zip(seeds, pb) if k for c in np.array_split(s, k * self.G)]
        per = int(sched.per_round[self.b])
        most = int(sched.per_round.max(initial=0))
        phase_of = np.repeat(np.arange(len(pb)), pb)
        loaded = -1
        for s in range(sched.rounds):
            for r in range(most):  # every worker makes as many sampling calls per round
                k = s * per + r if r < per else -1
                if k >= 0 and len(phase_of):
                    while loaded < phase_of[k]:
                        loaded += 1
                        self._load_phase(ph, loaded, rec)
                if steps is not None:  # the link task: the next G steps, in order
                    batch = [next(steps, NO_STEP) if k >= 0 else NO_STEP for _ in range(self.G)]
                else:
                    batch = [
                        chunks[k * self.G + g]
                        if k >= 0 and k * self.G + g < len(chunks)
                        else np.zeros(0, np.int64)
                        for g in range(self.G)
                    ]
                self._step(epoch, k, batch, feats, rec)
        while loaded + 1 < len(ph):  # every part is read once per epoch
            loaded += 1
            self._load_phase(ph, loaded, rec)
        self._drain(rec)
        self.resident.clear()
        rec["seconds"] = time.perf_counter() - t0
        rec["parts_loaded"] = list(self.resident.loads)
        rec["unavailable"] = self.sampler.unavailable
        rec.update(self.sampler.counters)
        rec["disk_bytes"] = self.sampler.disk_bytes
        rec["replica_bytes"] = self.replica.nbytes if self.replica is not None else 0
        self.sampler.close()
        return rec

    def _load_phase(self, ph: list[list[int]], k: int, rec: dict) -> None:
        t = time.perf_counter()
        if k > 0 and self.resident.parts:  # swap: the oldest part goes
            self.resident.evict(next(iter(self.resident.parts)))
        for p in ph[k]:
            self.resident.load(p)
        self.sampler.set_parts(list(self.resident.parts.values()), self.sampler.part_to_rank)
        rec["loading"] += time.perf_counter() - t

    def _step(
        self,
        epoch: int,
        k: int,
        batch: list[np.ndarray] | list[LinkStep],
        feats: DistFeatureStore | None,
        rec: dict,
    ) -> None:
        """Prepare and send this worker's batch ``k`` (``-1``: join the collectives only):
        ``G`` arrays of seeds, or ``G`` link steps (their end nodes sampled without their
        positive edges, which travel with the batch)."""
        mine = k >= 0
        t = time.perf_counter()
        sent0 = self.stats.bytes_sent
        link = bool(batch) and isinstance(batch[0], LinkStep)
        if link:
            mbs = [self.sampler.sample(st.nodes, st.seed, exclude=st.exclude) for st in batch]
        else:
            mbs = [
                self.sampler.sample(
                    seeds, batch_seed(self.seed, epoch, max(k, 0) * self.G + g) + self.b
                )
                for g, seeds in enumerate(batch)
            ]
        rec["sampling"] += time.perf_counter() - t
        rec["sample_bytes"] += self.stats.bytes_sent - sent0
        t = time.perf_counter()
        self._poll_updates(rec)
        ids, pos = group_union(mbs, self.grouping)
        sent = self.view.plan(ids, self.consumed_at[k]) if mine else np.zeros(0, np.int64)
        want = ids[sent] if mine else np.zeros(0, np.int64)
        if feats is not None:  # distributed: a collective among batch workers
            sent0 = self.stats.bytes_sent
            rows = self._pull(feats, want, rec)
            rec["pull_bytes"] += self.stats.bytes_sent - sent0
        else:
            rows = self.resident.rows(want, np.empty((len(want), self.dim), np.float32))
        rec["features"] += time.perf_counter() - t
        if not mine:
            return
        # a typed store's nodes travel with their types and original ids
        typed = (self.store.type_of(ids), self.store.to_orig(ids)) if self.typed else None
        links = [(st.pos, st.neg) for st in batch] if link else None
        tensors = pack_batch(self.view.version, mbs, ids, pos, sent, rows, typed, links)
        t = time.perf_counter()
        while len(self.queue) >= max(self.queue_len, self.per_round):
            for w in self.queue.popleft()[0]:
                w.wait()
        rec["send_wait"] += time.perf_counter() - t
        dst = self.roles.compute_ranks[self.dst]
        works = [
            dist.isend(tensors[0], dst, tag=TAG_META),
            dist.isend(tensors[1], dst, tag=TAG_INTS),
        ]
        if tensors[2].numel():
            works.append(dist.isend(tensors[2], dst, tag=TAG_ROWS))
        self.queue.append((works, tensors))
        nbytes = 32 + tensors[1].numel() * 8 + tensors[2].numel() * 4
        self.stats.bytes_sent += nbytes
        self.stats.messages_sent += len(works)
        rec["batches"] += 1
        rec["rows_sent"] += len(sent)
        rec["rows_omitted"] += len(ids) - len(sent)
        rec["batch_bytes"] += nbytes

    def _pull(self, feats: DistFeatureStore, want: np.ndarray, rec: dict) -> np.ndarray:
        """Rows of ``want``: replicated ones from the replica, the others pulled from their
        batch workers (collective); ``replica_rows`` counts the replicated rows another
        worker would have sent."""
        if self.replica is None:
            return feats.pull(want).numpy().copy()
        rpos = self.replica.positions(want)
        hit = rpos >= 0
        out = np.empty((len(want), self.dim), np.float32)
        out[hit] = self.replica.features[rpos[hit]]
        out[~hit] = feats.pull(want[~hit]).numpy()
        owners = feats.owner_rank(want[hit])
        rec["replica_rows"] += int(np.count_nonzero(owners != self.b))
        return out

    def _feature_store(self, part_to_bw: np.ndarray) -> DistFeatureStore | None:
        if self.local:
            return None
        mine = {int(p): self._rows_of(int(p)) for p in np.flatnonzero(part_to_bw == self.b)}
        return DistFeatureStore(
            part_offsets=self.offsets,
            part_to_rank=part_to_bw,
            rank=self.b,
            world_size=self.roles.batch_workers,
            local_parts=mine,
            feature_dim=self.dim,
            stats=self.stats,
            serve=self._serve,
            group=self.group,
        )

    def _serve(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Rows of assigned parts: from memory when resident, else read from the store."""
        part = owner_of(self.offsets, ids)
        res = np.isin(part, list(self.resident.parts))
        if res.all():
            return self.resident.rows(ids, out)
        out[res] = self.resident.rows(ids[res], np.empty((int(res.sum()), self.dim), np.float32))
        for p in np.unique(part[~res]):
            sel = np.flatnonzero(part == p)
            src = self._rows_of(int(p))
            if isinstance(src, RowSource):  # a typed part: one planned read
                out[sel] = source_rows(src, ids[sel] - self.offsets[p])
            else:
                out[sel] = read_rows(src, ids[sel] - self.offsets[p])
        return out

    def _rows_of(self, p: int):
        """Part ``p``'s core rows in the store: an untyped part's ``features`` (a memory
        map), a typed part's every type's rows padded to the widest type (a row source,
        opened once)."""
        if not self.typed:
            return self.store.part(p).features
        src = self._sources.get(p)
        if src is None:
            src = self._sources[p] = part_rows(self.store.part(p))
        return src

    def close(self) -> None:
        """Close the typed parts' row sources."""
        for src in self._sources.values():
            src.close()
        self._sources.clear()

    # ---------------------------------------------------------------- cache updates
    def _poll_updates(self, rec: dict, wait: bool = False) -> None:
        """Apply the updates that have arrived, without waiting (``wait``: every update of
        the epoch, waiting for each)."""
        while self.view.enabled and self.view.version < self.expected:
            if self._update_head is None:
                head = torch.empty(3, dtype=torch.int64)
                src = self.roles.compute_ranks[self.dst]
                self._update_head = (dist.irecv(head, src, tag=TAG_UPDATE), head)
            work, head = self._update_head
            if not wait and not work.is_completed():
                return
            work.wait()
            self._update_head = None
            self._apply(head, rec)

    def _apply(self, head: torch.Tensor, rec: dict) -> None:
        v, ins, ev, nbytes = recv_update(self.roles.compute_ranks[self.dst], head)
        self.view.apply(v, ins, ev)
        rec["update_bytes"] += nbytes

    def _drain(self, rec: dict) -> None:
        """Wait for the sends, then for every update of the epoch (the view is exact again)."""
        t = time.perf_counter()
        while self.queue:
            for w in self.queue.popleft()[0]:
                w.wait()
        rec["send_wait"] += time.perf_counter() - t
        self._poll_updates(rec, wait=True)
