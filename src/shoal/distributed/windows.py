"""Windows of feature rows for distributed mini-batch training under a memory budget.

Ginex's window (Park et al., VLDB 2022, Sec. 4-5: sample a window of batches first, then read
the union of their rows in one sorted pass) made distributed: a rank reads its rows for its own
batches and for those the other ranks will pull from it
(:class:`~shoal.distributed.DistFeatureStore`). For a window of steps every rank (1) samples its
batches (collective) and cuts the window when some owner's uncached rows would exceed
``window_rows`` (the counts all-reduced: every rank cuts at the same step), (2) sends each owner
the sorted unique rows its window needs from it (one all-to-all-v of ids) and (3) has its
:class:`~shoal.rows.featstore.DiskFeatures` read the union of its own and the requested uncached
rows in one planned pass. The batches, and so the model, are exactly those of training with
every row in memory. By default (:data:`READ_AHEAD` false) a window takes both slots and is read
before it trains (docs/measurements.md#distributed-windows-and-the-served-sweep). With
``pack_epochs`` = K >= 2 one sweep packs what the rank serves in the next K epochs, one segment
per window (:mod:`shoal.rows.packing`, DiskGNN-style; docs/distributed.md#minibatch-distdgl).
"""

from __future__ import annotations

import itertools
import logging
import operator
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats, exchange
from shoal.distributed.feature_store import owner_of
from shoal.graph.blocks import MiniBatch
from shoal.rows.featstore import DiskFeatures, FeatureStats, Window
from shoal.rows.packing import Packs, compact_ids
from shoal.rows.spool import SampleSpool
from shoal.utils.arrays import union_sorted
from shoal.utils.idset import IdSet

__all__ = ["READ_AHEAD", "ROUND_ROOM", "DistWindows"]

log = logging.getLogger(__name__)

#: read the next window while training on the current one (default false: module docstring).
READ_AHEAD = False
#: a round's sampling takes the window slots' memory for its groups of batches (default
#: true; docs/measurements.md#distributed-windows-and-the-served-sweep).
ROUND_ROOM = True
MIN, MAX = dist.ReduceOp.MIN, dist.ReduceOp.MAX


class DistWindows:
    """Windows of this rank's rows for distributed mini-batches (module docstring).

    Args:
        features: the rank's rows: its parts' core rows stacked in part order (a budgeted
            store, :class:`~shoal.rows.budgeted.BudgetedStore`; its rows come from any
            :class:`~shoal.rows.source.RowSource`: files, memory, another backend).
        part_offsets, part_to_rank, rank, world_size: the layout (as for the feature store).
        window_rows: rows of this rank's window (at least one batch is always taken); a
            window is cut when some owner's rows would exceed that owner's size.
        sample_bytes: bytes the sampled batches of one window may hold (default: no limit);
            a window is also cut there, on every rank at once.
        stats: communication counters (the per-window id exchange is counted).
        read_ahead: windows of ``window_rows`` read in a background thread while the previous
            one trains (default :data:`READ_AHEAD`: false, windows of ``2 * window_rows``
            read when needed).
        pack_epochs, last_epoch, scratch_dir: epochs packed by one sweep (default 0: off),
            the run's last epoch (a round stops there), where the packs go (module docstring).
        start_room: bytes idle until the first window is read and the first step runs (the
            static cache, not read yet, and the step's activations; default 0), lent to the
            run's first round besides the window slots (:attr:`round_room`); the smallest
            rank's figure is taken.
        spool_samples: keep the samples of the epochs a round samples to pack them in a
            private directory of ``scratch_dir`` (:class:`~shoal.rows.spool.SampleSpool`) and
            train each epoch from them instead of sampling it again (default false: for
            neighbour lists on disk, where every sampling reads them; the same on every
            rank: an epoch read back samples nothing, collectively).
        degrees: the full in-degrees of this rank's rows (stacked; default None). When every
            rank's static cache is the top of its rows by in-degree (ties by position, as
            :class:`~shoal.rows.budgeted.BudgetedStore` chooses it), each rank publishes its
            last cached row's (degree, position) once and a batch's rows are classified by
            that rule from the batch's own degrees; otherwise (or without ``degrees``) a
            batch's other rows are asked of their owners, one exchange per batch.
        group: the process group of every collective of the windows (default None: the
            whole world); a pipeline that samples in a background thread passes its own
            group, so that its collectives never interleave with the training thread's.
    """

    def __init__(
        self,
        features: DiskFeatures,
        *,
        part_offsets: np.ndarray,
        part_to_rank: np.ndarray,
        rank: int,
        world_size: int,
        window_rows: int,
        stats: CommStats | None = None,
        read_ahead: bool | None = None,
        sample_bytes: int | None = None,
        pack_epochs: int = 0,
        last_epoch: int | None = None,
        scratch_dir: str | None = None,
        degrees: np.ndarray | None = None,
        group: dist.ProcessGroup | None = None,
        spool_samples: bool = False,
        start_room: int = 0,
    ) -> None:
        self.group = group
        self.features = features
        self.part_offsets = np.asarray(part_offsets, np.int64)
        self.part_to_rank = np.asarray(part_to_rank, np.int64)
        self.rank, self.world_size = rank, world_size
        self.read_ahead = READ_AHEAD if read_ahead is None else bool(read_ahead)
        slots = 1 if self.read_ahead else 2  # a window without read-ahead takes both slots
        rows, limit = self._agree(max(1, int(window_rows)), sample_bytes)
        self.window_rows = rows * slots
        self.sample_bytes = None if limit is None else limit * slots
        self.stats = stats if stats is not None else CommStats()
        mine = np.flatnonzero(self.part_to_rank == rank)
        sizes = self.part_offsets[mine + 1] - self.part_offsets[mine]
        self._mine = mine
        self._stack = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # whether each of this rank's rows is in its static cache (None: all of them), and
        # whether every rank's are; other ranks' rows are asked of their owners per batch
        self._own_cached = None if features.slot is None else features.slot >= 0
        self.all_cached = self._every_rank_cached()
        self._rules = self._cache_rules(degrees)
        self._window = IdSet()  # the uncached rows of the window being grouped
        self._seen = IdSet()  # the rows of the window being grouped (counted: io)
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="shoal-window") if self.read_ahead else None
        )
        self.current: Window | None = None
        self.io: dict = {}
        self.pack_epochs, self.last_epoch = self._agree_packing(int(pack_epochs)), last_epoch
        self.start_room = int(self._reduce([max(int(start_room), 0)], MIN))
        self.packs = Packs(
            features,
            epochs=self.pack_epochs,
            scratch_dir=scratch_dir,
            pool=2 * self.window_rows[rank] * max(features.row_bytes, 1),
            share=4,  # a round's sweep runs while no window is alive: the slots' memory
        )
        self._planned: set[int] = set()  # epochs packed (or planned to be), the same everywhere
        self._epoch: int | None = None
        self.spool: SampleSpool | None = None
        if spool_samples and self.pack_epochs >= 2:
            self.spool = SampleSpool.beside_features(features, scratch_dir)

    def _agree(self, rows: int, sample_bytes: int | None) -> tuple[np.ndarray, int | None]:
        """Every owner's window size, and the smallest sample limit (collective): windows
        must be cut at the same step on every rank, whatever each rank's budget."""
        none = 1 << 62
        vec = np.zeros(self.world_size, np.int64)
        vec[self.rank] = rows
        vec = self._reduce(vec)
        # max of -limit: the smallest limit
        limit = -int(self._reduce([-(none if sample_bytes is None else int(sample_bytes))], MAX))
        return vec.numpy().copy(), (None if limit >= none else limit)

    def _reduce(self, values, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """``values`` as int64 reduced over the ranks by ``op`` (collective)."""
        t = torch.as_tensor(values, dtype=torch.int64)
        if self.world_size > 1:
            dist.all_reduce(t, op=op, group=self.group)
        return t

    def _agree_packing(self, k: int) -> int:
        """The smallest ``pack_epochs`` of all ranks (collective): packing is planned
        collectively, and the default depends on each rank's budget."""
        return int(self._reduce([k], MIN))

    def _every_rank_cached(self) -> bool:
        """Whether every rank's rows are all in its static cache (collective)."""
        mine = self._own_cached is None or bool(self._own_cached.all())
        return bool(self._reduce([int(mine)], MIN))

    def _cache_rules(self, degrees: np.ndarray | None) -> np.ndarray | None:
        """``(world, 3)`` int64 per rank: kind (0 none cached, 1 all, 2 threshold), the last
        cached row's degree and position (collective); None when some rank's cache does not
        follow the in-degree rule (or a rank gave no degrees)."""
        rule = np.zeros(3, np.int64)
        ok = degrees is not None
        if ok and self._own_cached is None:
            rule[0] = 1
        elif ok:
            deg = np.asarray(degrees, np.int64)
            k = int(self._own_cached.sum())
            if k == len(deg):
                rule[0] = 1
            elif k:  # the last cached row in (degree descending, position) order
                t = int(deg[self._own_cached].min())
                last = int(np.flatnonzero(self._own_cached & (deg == t))[-1])
                rule[:] = (2, t, last)
                pos = np.arange(len(deg))
                want = (deg > t) | ((deg == t) & (pos <= last))
                ok = bool(np.array_equal(self._own_cached, want))
        t = torch.from_numpy(rule).reshape(1, 3)
        if self.world_size > 1:
            every = [torch.zeros(1, 3, dtype=torch.int64) for _ in range(self.world_size)]
            dist.all_gather(every, t, group=self.group)
            t = torch.cat(every)
        if not int(self._reduce([int(ok)], MIN)):
            return None
        # each part's first row in its owner's stacked rows
        sizes = np.diff(self.part_offsets)
        self._stack_of_part = np.zeros(len(sizes), np.int64)
        for r in range(self.world_size):
            mine = np.flatnonzero(self.part_to_rank == r)
            self._stack_of_part[mine] = np.concatenate([[0], np.cumsum(sizes[mine])[:-1]])
        return t.numpy()

    def _uncached_by_rule(self, ids: np.ndarray, deg: np.ndarray) -> np.ndarray:
        part = owner_of(self.part_offsets, ids)
        rule = self._rules[self.part_to_rank[part]]
        pos = ids - self.part_offsets[part] + self._stack_of_part[part]
        d = np.asarray(deg, np.int64)
        cached = (rule[:, 0] == 1) | (
            (rule[:, 0] == 2) & ((d > rule[:, 1]) | ((d == rule[:, 1]) & (pos <= rule[:, 2])))
        )
        return ids[~cached]

    def _uncached(self, ids: np.ndarray) -> np.ndarray:
        """The ``ids`` whose rows are not in their owner's static cache (collective: the
        others' rows are asked of their owners, one exchange of ids and one of flags; no
        table over every node)."""
        own = self.owner_rank(ids)
        local = own == self.rank
        keep = np.ones(len(ids), np.bool_)
        if self._own_cached is not None:
            keep[local] = ~self._own_cached[self.local_index(ids[local])]
        else:
            keep[local] = False
        if self.world_size > 1:
            remote = np.flatnonzero(~local)
            order = remote[np.argsort(own[remote], kind="stable")]
            counts = np.bincount(own[remote], minlength=self.world_size).astype(np.int64)
            asked, asked_counts = exchange(ids[order], counts, self.stats, self.group)
            asked = asked.numpy()
            if self._own_cached is None:
                flags = np.zeros(len(asked), np.uint8)
            else:
                flags = (~self._own_cached[self.local_index(asked)]).astype(np.uint8)
            back, _ = exchange(flags, asked_counts, self.stats, self.group, recv_counts=counts)
            keep[order] = back.numpy().astype(np.bool_)
        return ids[keep]

    def local_index(self, ids: np.ndarray) -> np.ndarray:
        """Positions in the stacked local rows of global ``ids`` owned by this rank."""
        part = owner_of(self.part_offsets, ids)
        k = np.searchsorted(self._mine, part)
        return ids - self.part_offsets[part] + self._stack[k]

    def owner_rank(self, ids: np.ndarray) -> np.ndarray:
        return self.part_to_rank[owner_of(self.part_offsets, ids)]

    def serve(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` (global, owned here) from the current window or the cache."""
        if self.current is None:
            raise RuntimeError("no window is being trained on")
        return self.current.gather(self.local_index(ids), out)

    # ---------------------------------------------------------------- windows
    def _new_rows(self, mb: MiniBatch, held: int = 0) -> tuple[np.ndarray, np.ndarray, bool]:
        """``mb``'s rows not cached by their owner and not yet in the window, how many of
        them each owner holds, summed over ranks, and whether some rank's window samples
        (``held`` bytes here) reach ``sample_bytes`` (collective: one all-reduce, the
        samples' bytes each in its rank's slot)."""
        fresh = ~self._window.contains(mb.n_id)
        if self._rules is not None:  # the batch's degrees are its input block's
            deg = mb.blocks[0].deg_src.numpy() if mb.blocks else np.zeros(len(mb.n_id))
            new = self._uncached_by_rule(mb.n_id[fresh], deg[fresh])
        else:
            new = self._uncached(mb.n_id[fresh])
        w = self.world_size
        vec = np.zeros(2 * w, np.int64)
        vec[:w] = np.bincount(self.owner_rank(new), minlength=w)
        vec[w + self.rank] = held
        vec = self._reduce(vec).numpy()
        full = self.sample_bytes is not None and int(vec[w:].max()) >= self.sample_bytes
        return new, vec[:w].copy(), full

    def _needed(self) -> np.ndarray:
        """Stacked local positions (sorted) of the uncached rows this rank reads for the
        window: its own batches' (gathered in an :class:`~shoal.utils.idset.IdSet` as they
        come, :meth:`_cuts`; cleared here) and those the others ask for (collective)."""
        ids = np.sort(self._window.members())  # distinct, uncached by their owner
        self._window.clear()
        own = self.owner_rank(ids)
        local = own == self.rank
        remote = ids[~local]
        order = np.argsort(own[~local], kind="stable")
        counts = np.bincount(own[~local], minlength=self.world_size).astype(np.int64)
        asked, _ = exchange(remote[order], counts, self.stats, self.group)
        need = union_sorted(ids[local], asked.numpy())
        return self.local_index(need) if len(need) else need.astype(np.int64)

    def _read(self, cold: np.ndarray) -> Window:
        f = self.features
        pack = self.packs.get(self._epoch)
        if pack is None and not f.cache_loaded:
            return f.load_cache(cold)
        if pack is not None and len(cold) and not pack.holds(cold):
            # a window cut otherwise than the sweep planned: read its rows from the file
            log.warning("a window's rows are not one segment of its epoch's pack: read")
            pack = None
        return f.window([], cold=cold, source=pack)

    # ---------------------------------------------------------------- packing
    @property
    def round_room(self) -> int:
        """Bytes a round may lend the sampling of its epochs (the same on every rank): the
        smallest rank's window slots, idle while a round samples (no window is alive then;
        :data:`ROUND_ROOM` false: none), and for the run's first round also
        :attr:`start_room` (the cache is read and the first step runs after it)."""
        if not ROUND_ROOM or self.pack_epochs < 2:
            return 0
        room = int(self.window_rows.min()) * int(self.features.row_bytes)
        return room + (self.start_room if not self._planned else 0)

    def _round(self, epoch: int | None) -> list[int]:
        """The epochs one sweep packs from ``epoch`` on: the same on every rank."""
        k = self.pack_epochs
        if epoch is None or k < 2 or epoch in self._planned or self.all_cached:
            return []
        last = epoch + k - 1 if self.last_epoch is None else min(epoch + k - 1, self.last_epoch)
        # a lone epoch (the run's last) is packed too when its samples are spooled: its
        # sampling then takes the windows' memory for its groups, and its windows read one
        # segment each instead of sorted passes over the rank's rows
        return list(range(epoch, last + 1)) if last > epoch or self.spool is not None else []

    def _pack(self, epoch: int | None, sample, rounds=None) -> None:
        """Sample the epochs of the round from ``epoch`` on (collective: with ``rounds``,
        together), learn the rows this rank serves in each (its own and those the others
        ask for: :meth:`_needed`), and read them with one sweep into a pack per epoch
        (local)."""
        epochs = self._round(epoch)
        if not epochs:
            return
        self._planned.update(epochs)
        sets: dict[int, list[np.ndarray]] = {}
        if rounds is not None and len(epochs) > 1:
            made = itertools.groupby(rounds(epochs), key=operator.itemgetter(0))
            by_epoch = ((e, (mb for _, mb in pairs)) for e, pairs in made)
        else:
            by_epoch = ((e, sample(e)) for e in epochs)
        for e, batches in by_epoch:  # the windows of epoch e, cut as windows() will cut them
            if self.spool is not None and not self.spool.has(e):
                batches = self.spool.record(e, batches)
            # each window's rows as int32 positions where they fit, kept on the scratch
            # disk until the sweep (and by the pack until the window is read)
            n, spill = self.features.num_rows, self.features.reader is not None
            sets[e] = [
                self.packs.spill_ids(e, ids) if spill else ids
                for ids in (compact_ids(self._needed(), n) for _ in self._cuts(batches))
            ]
        # packs gather rows read from a row source (none when every row is in memory)
        if self.features.reader is not None and any(len(v) for v in sets.values()):
            t0 = time.perf_counter()
            self.packs.pack(sets, None)
            self.io["pack_seconds"] = self.io.get("pack_seconds", 0.0) + time.perf_counter() - t0

    def _cuts(self, batches: Iterator[MiniBatch], count: bool = False) -> Iterator[list[MiniBatch]]:
        """``batches`` grouped into windows (collective: every rank cuts at the same step),
        each yielded with its uncached rows marked for :meth:`_needed` (packing cuts the same
        windows). ``count``: count each window's distinct rows in :attr:`io`."""
        pending: list[MiniBatch] = []
        acc = np.zeros(self.world_size, np.int64)
        held = 0
        for mb in batches:
            new, counts, full = self._new_rows(mb, held)
            if pending and (full or (acc + counts > self.window_rows).any()):  # all ranks
                yield pending
                pending, acc, held = [], np.zeros_like(acc), 0
                self._seen.clear()
                new, counts, _ = self._new_rows(mb)
            self._window.add(new)
            if count:
                self._count_unique(mb)
            pending.append(mb)
            acc += counts
            held += mb.nbytes
        if pending:
            yield pending

    def _submit(self, pending: list[MiniBatch]) -> tuple[list[MiniBatch], Future | Window]:
        cold = self._needed()
        if self._pool is None:  # read now: training waits for it
            t0 = time.perf_counter()
            w = self._read(cold)
            self.io["io_wait"] += time.perf_counter() - t0
            return pending, w
        return pending, self._pool.submit(self._read, cold)

    def windows(
        self,
        batches: Iterator[MiniBatch],
        *,
        epoch: int | None = None,
        sample=None,
        rounds=None,
    ) -> Iterator[tuple[list[MiniBatch], Window]]:
        """Group ``batches`` (sampled collectively, in step order) into windows and yield
        ``(batches, window)`` with the window's rows read (with read-ahead, the next window is
        read while the caller trains on the one yielded). With packing, ``epoch`` names the
        epoch of ``batches`` and ``sample(e)`` samples epoch ``e``'s batches again
        (collective); ``rounds(epochs)``, when given, samples a round's epochs together as
        ``(epoch, batches)`` pairs in epoch order (collective; None: epoch by epoch with
        ``sample``). Collective: every rank iterates to the end."""
        ahead = None
        self.io = {**FeatureStats().snapshot(), "io_wait": 0.0, "unique_rows": 0}
        packed0 = self.packs.stats.snapshot()
        if sample is not None:
            self._pack(epoch, sample, rounds)
        spooled = self.spool is not None and epoch is not None and self.spool.has(epoch)
        if spooled:  # sampled by its round (on every rank): read back, not sampled again
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # (never started: no collective was issued)
            batches = self.spool.read(epoch)
        self._epoch = epoch
        self._seen.clear()
        if self.all_cached:  # every row of every rank is cached: nothing to plan or read
            self.current = self.features.window([], cold=np.empty(0, np.int64))
            try:
                for mb in batches:  # a window per batch: its rows counted
                    self._seen.clear()
                    self._count_unique(mb)
                    yield [mb], self.current
                self._finish()
            finally:
                self.current = None
            return
        try:
            for pending in self._cuts(batches, count=True):
                item = self._submit(pending)
                if ahead is not None:
                    yield self._ready(ahead)
                ahead = item
                if not self.read_ahead:  # train on it now
                    yield self._ready(ahead)
                    ahead = None
            if ahead is not None:
                yield self._ready(ahead)
            self._finish()
            self.packs.drop(epoch)  # its windows are read
            if spooled:
                self.spool.drop(epoch)
            self._count_packing(packed0)
        finally:
            self.current = None
            self._window.clear()
            self._seen.clear()

    def _count_packing(self, before: dict) -> None:
        """Add the sweeps since ``before`` to :attr:`io` (bytes read and written)."""
        now = self.packs.stats.snapshot()
        self.io["pack_bytes_read"] = now["bytes_read"] - before["bytes_read"]
        self.io["bytes_written"] = now["bytes_written"] - before["bytes_written"]
        self.io["bytes_read"] += self.io["pack_bytes_read"]

    def _count_unique(self, mb: MiniBatch) -> None:
        """Count ``mb``'s rows not yet used in its window (:attr:`io`: the distinct rows
        per window, summed over the epoch's windows)."""
        self.io["unique_rows"] += int(np.count_nonzero(self._seen.add(mb.n_id)))
        self.io["unique_bytes"] = self.io["unique_rows"] * self.features.row_bytes

    def _finish(self) -> None:
        """Count the window just trained on in :attr:`io` (the epoch's record)."""
        if self.current is not None:
            self.current.add_to(self.io)
        self.current = None

    def _ready(self, item) -> tuple[list[MiniBatch], Window]:
        self._finish()
        pending, w = item
        t0 = time.perf_counter()
        w = w.result() if isinstance(w, Future) else w
        self.io["io_wait"] += time.perf_counter() - t0
        self.current = w
        return pending, w

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.packs.drop()
        if self.spool is not None:
            self.spool.drop()
