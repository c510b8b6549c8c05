"""``minibatch``: synchronous mini-batch SGD over a partitioned store (DistDGL).

Zheng et al., "DistDGL: Distributed Graph Neural Network Training for Billion-Scale Graphs"
(IA3 2020), Section 3: every trainer owns the training nodes of its parts, split two-level
(Section 3.4, :func:`split_training_nodes`, whose rule differs from DistDGL's), samples each
batch where the data lives (:class:`shoal.distributed.DistNeighborSampler`), pulls the
non-local input rows from their owners (:class:`shoal.distributed.DistFeatureStore`) and
all-reduces the gradients (``DistributedDataParallel``, Section 3.1). The next batches are
sampled and pulled in a background thread (Section III-D, ``--prefetch-batches``,
:class:`~shoal.engines.minibatch.pipeline.BatchPipeline`), with the batches of inline
sampling. All of it: docs/distributed.md#minibatch-distdgl.

The link task (``--task link``) and learned input rows (``--embedding-dim``,
:class:`~shoal.engines.minibatch.embedding.DistEmbedding`, DistDGL's ``DistEmbedding``):
docs/linkpred.md#across-processes-every-engine.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from shoal.distributed import DistFeatureStore, DistNeighborSampler
from shoal.distributed.evaluate import reads_node_tables
from shoal.distributed.feature_store import placement
from shoal.distributed.windows import DistWindows
from shoal.engines.base import Engine
from shoal.engines.minibatch.config import DEFAULT_PREFETCH_BATCHES
from shoal.engines.minibatch.embedding import DistEmbedding
from shoal.engines.minibatch.pipeline import BatchPipeline
from shoal.graph.blocks import Batch, MiniBatch
from shoal.nn.base import keyed_dropout
from shoal.rows.budget import batch_rows
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.packing import default_pack_epochs
from shoal.rows.parts import part_rows
from shoal.sample.sampler import HeldLists
from shoal.training import batch_seed
from shoal.training.embedding import load_tables, save_tables, table_dir
from shoal.training.meter import EpochMeter

__all__ = ["MinibatchEngine", "dist_pulls", "dist_sampler", "rank_share", "split_training_nodes"]

log = logging.getLogger(__name__)


def split_training_nodes(owned: list[np.ndarray]) -> list[np.ndarray]:
    """Two-level split: rank ``r`` keeps its own training nodes ``owned[r]`` (sorted IDs) up to
    an equal share; the surplus of every rank is handed, in rank and ID order, to the ranks
    short of their share. Shares differ by at most one (the first ``T mod N`` ranks get one
    more). Every rank computes the same answer from the same input."""
    n = len(owned)
    total = sum(len(a) for a in owned)
    share = [total // n + (1 if r < total % n else 0) for r in range(n)]
    keep = [a[: share[r]] for r, a in enumerate(owned)]
    pool = np.concatenate([a[share[r] :] for r, a in enumerate(owned)] or [np.empty(0, np.int64)])
    out, pos = [], 0
    for r in range(n):
        need = share[r] - len(keep[r])
        out.append(np.concatenate([keep[r], pool[pos : pos + need]]).astype(np.int64))
        pos += need
    return out


def rank_share(engine: Engine) -> tuple[np.ndarray, int]:
    """``engine``'s rank's training seeds under the two-level split
    (:func:`split_training_nodes`; their labels held by its node tables) and the batches
    per epoch every rank runs (the largest share's)."""
    splits = split_training_nodes(engine.tables.train_ids_by_rank(engine.part_to_rank))
    seeds = splits[engine.ctx.rank]
    engine.tables.hold(seeds)  # the labels of the seeds given by richer ranks
    most = max(len(s) for s in splits)
    bs = engine.train_config.sampling.batch_size
    return seeds, (max(1, math.ceil(most / bs)) if most else 0)


def dist_sampler(engine: Engine, fanouts: Any, group: Any = None) -> DistNeighborSampler:
    """A sampler of ``engine``'s parts that asks the owners to sample the other nodes (a
    typed store's: fanouts per relation, typed blocks); ``group``: its collectives' group."""
    store, ctx = engine.store, engine.ctx
    return DistNeighborSampler(
        parts=engine.parts,
        **placement(store, engine.part_to_rank, ctx),
        fanouts=fanouts,
        degrees=engine.tables.degrees,
        stats=engine.stats,
        group=group,
        schema=store.schema,
        type_of=store.type_of if store.schema is not None else None,
    )


def dist_pulls(engine: Engine, local_parts: dict, **kwargs: Any) -> DistFeatureStore:
    """Rows pulled from their owners, ``engine``'s own served from ``local_parts``
    (``kwargs``: :class:`~shoal.distributed.DistFeatureStore`'s others)."""
    store, ctx = engine.store, engine.ctx
    return DistFeatureStore(
        **placement(store, engine.part_to_rank, ctx),
        local_parts=local_parts,
        feature_dim=int(store.feature_dim),
        stats=engine.stats,
        **kwargs,
    )


class MinibatchEngine(Engine):
    """DistDGL-style synchronous mini-batch training (see the module docstring)."""

    name = "minibatch"
    global_batch = True  # synchronous SGD: the step's batch is every rank's
    tables_scope = "local"  # own and halo nodes; the sampler asks owners for other degrees
    learned_rows = True  # --embedding-dim: DistEmbedding

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.train_config
        store, ctx = self.store, self.ctx
        if self.link is None:
            self.seeds, self.num_batches = rank_share(self)
        else:  # the link task: the rank's positive edges, as many steps on every rank
            self.seeds, self.num_batches = np.empty(0, np.int64), self.link.num_batches
        #: learned input rows (the link task's ``--embedding-dim``), else None
        self.embedding: DistEmbedding | None = None
        emb_dim = cfg.link.embedding_dim if self.link is not None else 0
        #: batches the sampling thread prepares ahead (0: sampled inline; always with learned
        #: rows, updated every step); a subclass whose options class is not a MinibatchConfig
        #: gets the default
        depth = getattr(self.options, "prefetch_batches", DEFAULT_PREFETCH_BATCHES)
        self.prefetch = 0 if emb_dim else int(depth)
        #: the sampling thread's process group (made by every rank here, in the same order):
        #: its collectives never interleave with the gradient all-reduce (None: the world's)
        self.sample_group = None
        self._seeds: dict[int, np.ndarray] | None = None  # the parts' training seeds' rows
        if self.prefetch and ctx.world_size > 1:
            timeout = datetime.timedelta(seconds=float(self.options.dist_timeout))
            self.sample_group = dist.new_group(backend="gloo", timeout=timeout)
        self.sampler = dist_sampler(self, cfg.sampling.fanouts, self.sample_group)
        self._structure_counted = 0  # neighbour-list bytes read already in a record
        if emb_dim:
            self._open_embedding(emb_dim)
        else:
            self._open_features()
        self.model = self.build_model(in_dim=emb_dim or None)
        self.ddp = DistributedDataParallel(
            self.model,
            process_group=ctx.model_group,
            device_ids=[self.device] if self.device.type == "cuda" else None,
            # a relation absent from a rank's batch leaves its weights without a gradient
            find_unused_parameters=store.schema is not None,
        )
        self.optimizer = self.adam(self.ddp)
        self.param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _open_features(self) -> None:
        """This rank's rows under its memory budget: a static cache of the highest in-degree
        rows of its parts and, when they do not all fit, windows read ahead
        (:class:`~shoal.distributed.windows.DistWindows`), which serve the rows pulled."""
        cfg, store, ctx = self.train_config, self.store, self.ctx
        rows = sum(p.num_core for p in self.parts)
        # the cache's slot map and the windows' cached flags (5 B per local row); the
        # windows' id sets grow with a window's rows, not with the graph; the batches queued
        # by the sampling thread (their pulled rows)
        extra = 5 * rows
        fanouts, bs = tuple(cfg.sampling.fanouts), cfg.sampling.batch_size
        extra += self.prefetch * batch_rows(fanouts, bs, max(rows, 1)) * self.row_bytes
        mode = self._structure_mode()
        plan = self.plan_memory(
            feature_bytes=rows * self.row_bytes,
            num_rows=max(rows, 1),
            extra_bytes=extra,
            structure=mode,
            held_lists=sum(self._seed_lists().values()) if mode != "memory" else 0,
        )
        on_disk = self._sample_from_disk(plan)
        if ctx.is_rank0:
            log.info("rank 0 %s", plan.describe())
        dim = int(store.feature_dim)
        typed = store.schema is not None
        arrays = [p.features for p in self.parts] or [np.empty((0, dim), np.float32)]
        if typed:  # every node type's rows in one source, padded to the widest type
            arrays = part_rows(self.parts, threads=cfg.memory.io_threads) or arrays
        deg = self.tables.degrees[
            np.concatenate([p.core_ids for p in self.parts] or [[]]).astype(np.int64)
        ]
        budgeted = BudgetedStore(
            arrays,
            plan,
            degrees=deg,
            threads=cfg.memory.io_threads,
            show_progress=cfg.run.progress if ctx.is_rank0 else False,
        )
        self.local, windows = budgeted.features, budgeted.windows
        # packing samples each epoch ahead, far less than a sweep of the rank's rows per
        # window (docs/distributed.md#minibatch-distdgl); with the neighbour lists on disk
        # its samples are spooled, so each epoch is sampled once; a round's row sets wait
        # for their sweep on the scratch disk, not in memory (Packs.spill_ids)
        pack = default_pack_epochs(cfg.memory.pack_epochs, not on_disk, spooled=on_disk)
        window = plan.window
        self.windows = DistWindows(
            self.local,
            **placement(store, self.part_to_rank, ctx),
            stats=self.stats,
            # a window's rows take 3/4 of its share of the budget, its sampled batches 1/4
            window_rows=window * 3 // 4 // self.row_bytes if windows else rows + 1,
            sample_bytes=window // 4 if windows else None,
            pack_epochs=pack,
            spool_samples=on_disk,
            last_epoch=cfg.optim.epochs - 1,
            degrees=deg,
            scratch_dir=cfg.memory.scratch_dir,
            group=self.sample_group,
            # the run's first round samples before the cache is read and any step runs
            start_room=plan.cache + plan.activations if windows else 0,
        )
        self.features = dist_pulls(
            self,
            {p.index: part_rows(p) if typed else p.features for p in self.parts},
            serve=self.windows.serve,
            group=self.sample_group,
        )

    def _structure_mode(self) -> str:
        """Where the plan keeps the parts' neighbour lists: ``--structure`` (default
        ``"auto"``: in memory whenever they fit beside two windows); in memory for a typed
        store (its draws per relation) and the link task (its exclusions), which read the
        entries themselves."""
        mode = self.train_config.memory.structure
        if self.store.schema is None and self.link is None:
            return mode
        if mode == "disk":
            raise ValueError(
                "--structure disk: a typed store's or the link task's sampler reads the "
                "parts' neighbour lists in memory; use --structure auto or memory"
            )
        return "memory"

    def _seed_rows(self) -> dict[int, np.ndarray]:
        """Per part, the local rows of its training seeds (hop 0 of every batch)."""
        if self._seeds is None:
            self._seeds = {p.index: np.flatnonzero(np.asarray(p.mask("train"))) for p in self.parts}
        return self._seeds

    def _seed_lists(self) -> dict[int, int]:
        """Per part, the bytes its training seeds' neighbour lists take held in memory
        (:class:`~shoal.sample.sampler.HeldLists`: hop 0 of every batch draws from them):
        planned beside the row index when the structure is on disk."""
        rows = self._seed_rows()
        return {
            p.index: HeldLists.nbytes(p.indptr, rows[p.index], p.indices.dtype.itemsize)
            for p in self.parts
        }

    def _sample_from_disk(self, plan: Any) -> bool:
        """Whether some rank's plan left its parts' neighbour lists on disk (collective):
        then every rank samples in groups of the smallest group memory of those ranks
        (:meth:`~shoal.distributed.DistNeighborSampler.sample_group`: each hop's entries of
        a group read in one sorted pass per part; the group's passes are collective, so
        every rank takes part), the ranks on disk reading their entries with direct reads."""
        mine = not plan.structure_in_memory
        flag = torch.tensor([int(mine)], dtype=torch.int64)
        group = torch.tensor([plan.neighbor_cache if mine else 1 << 62], dtype=torch.int64)
        if self.ctx.world_size > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            dist.all_reduce(group, op=dist.ReduceOp.MIN)
        if not int(flag):
            return False
        # the plan's neighbour-list memory for a group's passes; the lists of the rank's
        # training seeds in its parts (hop 0 of its batches) held in a share of their own
        # when the plan found room for them (plan.held_lists)
        self.structure_group = max(int(group), 1)
        io_threads = self.train_config.memory.io_threads
        hold = self._seed_rows()
        parts = self.sampler.read_from_disk(
            io_threads=io_threads,
            group_bytes=self.structure_group,
            hold=hold,
            hold_bytes=plan.held_lists if mine else 0,
        )
        # hop 0 of the training batches needs no pass when every rank holds its seeds' lists
        held = torch.tensor([int(self.sampler.holds_first_hop)], dtype=torch.int64)
        if self.ctx.world_size > 1:
            dist.all_reduce(held, op=dist.ReduceOp.MIN)
        self.sampler.first_held = bool(int(held))
        log.info(
            "rank %d samples its parts' neighbour lists %s, in groups of %d batches (more "
            "in a packing sweep, in the memory its windows leave idle)",
            self.ctx.rank,
            f"from disk (parts {parts})" if parts else "from memory",
            self.sampler.group_size(self.train_config.sampling.batch_size),
        )
        return True

    def _open_embedding(self, dim: int) -> None:
        """Learned input rows held by their owners instead of the store's features (no
        memory plan for features, no windows)."""
        cfg = self.train_config
        own = tuple(f"part_{p.index}" for p in self.parts)  # each rank its own tables
        resume = cfg.checkpoint.resume
        where = table_dir(cfg.link.embedding_dir, self.store.path, resume=resume, own=own)
        self.embedding = DistEmbedding(where, self, dim=dim)
        self.local = self.windows = self.features = None

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        if self.sampler is None:
            raise RuntimeError("end_training() was called: this engine only evaluates now")
        cfg = self.train_config
        self.stats.reset()
        self.ddp.train()
        phases = ("sampling", "gather", "forward_backward", "io_wait")
        meter = EpochMeter(
            epoch,
            self.num_batches,
            enable=cfg.run.progress if self.ctx.is_rank0 else False,
            phases=phases + (("batch_wait",) if self.prefetch else ()),
            device=self.device,  # (on a GPU: CUDA events, no wait a step)
        )
        world = self.ctx.world_size
        batches: Any = self._batches(epoch, meter.phases)
        pipe = None
        if self.prefetch:  # sampling and pulls in a thread of their own, `prefetch` ahead
            pipe = BatchPipeline(
                batches, depth=self.prefetch, group=self.sample_group, world_size=world
            )
            batches = _waited(pipe, meter.phases)
        try:
            self._train_steps(epoch, self.feed.iterate(batches), meter)
        except BaseException:
            if pipe is not None:  # every rank's thread stops at the same batch
                pipe.close(timeout_s=10.0)
            raise
        if pipe is not None:
            pipe.close(timeout_s=float(self.options.dist_timeout))
        io = [self.windows.io] if self.windows is not None else []
        meter.phases["io_wait"] = sum(r.get("io_wait", 0.0) for r in io)
        read = self.sampler.structure_bytes_read  # neighbour lists, since the last record
        io.append({"structure_bytes_read": read - self._structure_counted})
        self._structure_counted = read
        if self.embedding is not None:
            self.embedding.flush()
        return self.epoch_record(**meter.close(), io=self.io_record(io))

    def _train_steps(self, epoch: int, batches: Iterator[Batch], meter: EpochMeter) -> None:
        """The epoch's steps on ``batches`` (the training thread)."""
        cfg = self.train_config
        world, rank = self.ctx.world_size, self.ctx.rank
        for step, batch in enumerate(batches):
            with meter.time("forward_backward"):
                x, y = batch.x, batch.y
                self.optimizer.zero_grad(set_to_none=True)
                # dropout keyed by (seed, epoch, step and rank, node id: _keyed_ids)
                blocks = batch.mb.with_node_ids(self._keyed_ids(batch.mb.n_id))
                with keyed_dropout(self.model, cfg.run.seed, epoch, step * world + rank):
                    out = self.ddp(x, blocks)
                # DDP averages the ranks' gradients (batches differ in size by at most one
                # seed per rank under the two-level split)
                if self.link is not None:
                    loss = self.link.loss(self.model, out, batch.step)
                else:
                    loss = F.cross_entropy(out, y) if len(y) else out.sum() * 0.0
                loss.backward()
                self.optimizer.step()
                if self.embedding is not None:  # the rows' gradients to their owners
                    self.embedding.push(batch.mb.n_id, x.grad)
                self.stats.allreduce_bytes += self.param_bytes
            if self.link is not None:
                n = len(batch.step)
                meter.step_sums(float(loss.detach()) * n, 0, n)
                continue
            n = len(y)
            ok = int((out.detach().argmax(1) == y).sum()) if n else 0
            meter.step(float(loss.detach()), ok, n)

    def _keyed_ids(self, n_id: np.ndarray) -> np.ndarray:
        """The node ids a batch's dropout masks are keyed by: on a typed store the original
        ids (its learned rows are indexed by them); untyped, the store's own ids, as sampled:
        no lookup in the store's node map, a memory map of 8 bytes per node that a batch
        reads at random (at a quarter of papers100M in 4 GiB its page faults read 110 GB per
        rank in one epoch: docs/measurements.md#distributed-windows-and-the-served-sweep).
        A one-part store in id order (the default) numbers nodes as the graph does, so one
        process on it still draws the single-process trainer's masks."""
        if self.store.schema is not None:
            return self.store.to_orig(n_id)
        return n_id

    def _batches(self, epoch: int, timer: dict[str, float]) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` on the host: sampled blocks, pulled (and
        normalised) rows, labels (collective)."""
        # future epochs, to pack them: their groups also take the windows' idle memory
        room = self.windows.round_room if self.windows is not None else 0
        again = lambda e: self._samples(e, timer, room=room)  # noqa: E731
        samples = self._samples(epoch, timer)
        if self.windows is None:  # learned rows: no windows
            groups: Iterable = (([mb], None) for mb in samples)
        else:
            rounds = None if self.link is not None else self._round_sampler(timer, room)
            groups = self.windows.windows(samples, epoch=epoch, sample=again, rounds=rounds)
        steps = self.link.steps(epoch) if self.link is not None else None
        for mbs, _ in groups:
            for mb in mbs:
                t1 = time.perf_counter()
                x = self._inputs(mb.n_id)
                if steps is None:
                    y, step = torch.from_numpy(self.tables.labels[mb.seeds].astype(np.int64)), None
                else:  # the link step this batch was sampled for (drawn again, in order)
                    y, step = torch.empty(0, dtype=torch.int64), next(steps)
                timer["gather"] += time.perf_counter() - t1
                yield Batch(mb, x, y, step)

    def _inputs(self, n_id: np.ndarray) -> torch.Tensor:
        """The rows of ``n_id``: pulled features (normalised), or learned rows as a leaf."""
        if self.embedding is not None:
            return self.embedding.pull(n_id)
        x = self.features.pull(n_id)
        if self.train_config.model.normalize_features:
            s = x.sum(1, keepdim=True)
            return torch.where(s != 0, x / torch.where(s != 0, s, 1.0), x)
        return x.clone() if self.prefetch else x  # the pull's buffer is reused by the next

    def _samples(self, epoch: int, timer: dict[str, float], room: int = 0):
        """This rank's sampled batches of ``epoch``, in step order (collective); ``room``:
        bytes idle meanwhile that the groups of batches sampled together from neighbour lists
        on disk may take (the same on every rank)."""
        if self.link is not None:
            for b in self.link.steps(epoch):
                t0 = time.perf_counter()  # a link batch's own edges excluded from message passing
                mb = self.sampler.sample(b.nodes, b.seed, exclude=b.exclude)
                timer["sampling"] += time.perf_counter() - t0
                yield mb
            return
        for _, mb in self._samples_of([epoch], timer, room):
            yield mb

    def _samples_of(
        self, epochs: list[int], timer: dict[str, float], room: int = 0
    ) -> Iterator[tuple[int, MiniBatch]]:
        """``(epoch, blocks)`` of this rank's batches of ``epochs``, epoch by epoch in step
        order (collective; node task): with the neighbour lists on disk, sampled in groups
        that may span the epochs' boundaries (a group of several epochs reads each part's
        lists once per hop instead of once per hop and epoch; the same batches)."""
        seed, rank = self.train_config.run.seed, self.ctx.rank
        # the batch seed depends on the rank too, so ranks draw different samples
        steps = [
            (e, (b, batch_seed(seed, e, j) + rank))
            for e in epochs
            for j, b in enumerate(self.epoch_batches(e))
        ]
        size = self.sampler.group_size(self.train_config.sampling.batch_size, room)
        reads = self.sampler.group_reads
        passes, nbytes = reads.passes, reads.bytes
        for a in range(0, len(steps), size):
            group = steps[a : a + size]
            t0 = time.perf_counter()
            made = self.sampler.sample_group([b for _, b in group])
            for (e, _), mb in zip(group, made, strict=True):
                timer["sampling"] += time.perf_counter() - t0
                yield e, mb
                t0 = time.perf_counter()
        if self.sampler.reads_from_disk and len(steps) > 1:
            log.info(
                "rank %d sampled epoch(s) %s: %d batches in groups of %d, %d pass(es) reading "
                "%.2f GB of neighbour lists",
                rank,
                ",".join(str(e + 1) for e in epochs),
                len(steps),
                size,
                reads.passes - passes,
                (reads.bytes - nbytes) / 1e9,
            )

    def _round_sampler(self, timer: dict[str, float], room: int):
        """``rounds(epochs)`` for :meth:`DistWindows.windows`: the epochs a sweep packs,
        sampled together (:meth:`_samples_of`) in the windows' idle ``room``."""
        return lambda epochs: self._samples_of(epochs, timer, room)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "prefetch_batches": self.prefetch}

    def close_io(self) -> None:
        if self.windows is not None:
            self.windows.close()

    def feature_stores(self) -> list:
        return [self.local] if self.local is not None else []

    def learned_inputs(self) -> dict[int, np.ndarray] | None:
        if self.embedding is None:
            return None
        self.embedding.flush()
        return self.embedding.weights

    def state(self) -> dict[str, Any]:
        """The base state; learned rows and their optimizer state are copied into the
        checkpoint directory (``embedding/part_<i>``), each rank its own parts."""
        st = super().state()
        snap = self.embedding is not None and bool(self.train_config.checkpoint.dir)
        if snap:
            self.embedding.flush()
            root = Path(self.train_config.checkpoint.dir) / "embedding"
            for i, tables in self.embedding.state_tables().items():
                save_tables(tables, root / f"part_{i}")
        return {**st, "embedding_snapshot": snap}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        if state.get("embedding_snapshot") and self.embedding is not None:
            root = Path(self.train_config.checkpoint.dir) / "embedding"
            for i, tables in self.embedding.state_tables().items():
                load_tables(tables, root / f"part_{i}")

    def _drop_training_state(self) -> int:
        freed = super()._drop_training_state()
        # training's node-sized arrays go too: the windows' marks (3 B per node), the
        # sampler's id map (4 B per node) and neighbour-block cache; the pulls' store holds
        # the windows. Exact evaluation needs none of them.
        self.windows = self.features = self.sampler = None
        if self._evaluates_without_tables():  # the dense per-node tables (9 B per node)
            freed += self.tables.release("minibatch: training ended")
        return freed

    def _evaluates_without_tables(self) -> bool:
        """Whether the exact evaluations left read no per-node table
        (:func:`~shoal.distributed.evaluate.reads_node_tables`; the link task and typed
        stores read them)."""
        if self.link is not None or self.store.schema is not None:
            return False
        return not reads_node_tables(self.model, self.train_config.eval.halo)


def _waited(batches: Iterable[Batch], timer: dict[str, float]) -> Iterator[Batch]:
    """``batches``, the seconds the training thread waits for each added to
    ``timer["batch_wait"]`` (the sampling and pulls the background thread did not hide)."""
    it = iter(batches)
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        timer["batch_wait"] += time.perf_counter() - t0
        if batch is None:
            return
        yield batch
