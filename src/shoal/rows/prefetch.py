"""Windows of batches sampled ahead and read in the background (Ginex's pipeline).

A background thread (:mod:`shoal.rows.readahead`) samples the batches of epoch after epoch,
groups consecutive batches into windows whose uncached rows fit ``window_bytes``
(:meth:`WindowPrefetcher._windows`) and has the :class:`~shoal.rows.featstore.DiskFeatures`
read each window's rows in one planned pass while the training thread trains on the previous
one, across epochs too: at most two windows exist at a time (``2 * window_bytes``).
:meth:`WindowPrefetcher.pause` stops new reads (evaluation). With ``pack_epochs`` = K >= 2 one
sweep packs the next K epochs' rows (:mod:`shoal.rows.packing`, DiskGNN's packing) and each
window reads its epoch's pack. When two epochs' samples do not fit beside a window
(:attr:`WindowPrefetcher.resample`, chosen by :func:`~shoal.rows.windowfit.fit_windows`), an
epoch is sampled once to plan its window and again after it is read. Batches are exactly those
of :class:`~shoal.training.batches.BatchLoader` (same seeds, order and samples): windows change
when rows are read, never what is trained.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from shoal.graph.blocks import Batch
from shoal.rows.featstore import CACHE_POLICIES, DiskFeatures, FeatureStats, presampled_priority
from shoal.rows.packing import Packs, compact_ids
from shoal.rows.readahead import END, Stop, Stream
from shoal.rows.spool import SampleSpool
from shoal.rows.windowfit import (
    PACKED_CACHE_SHARE,
    SPLIT_CACHE_SHARE,
    WindowFit,
    fit_windows,
)
from shoal.utils.arrays import unique_sorted

__all__ = ["WindowPrefetcher", "read_bytes_of_process"]

log = logging.getLogger(__name__)


def read_bytes_of_process() -> int:
    """Bytes this process has caused to be read from storage (``/proc/self/io``), or -1."""
    try:
        for ln in Path(f"/proc/{os.getpid()}/io").read_text().splitlines():
            if ln.startswith("read_bytes:"):
                return int(ln.split()[1])
    except OSError:
        pass
    return -1


class WindowPrefetcher:
    """Produces epochs' batches from windows read in the background (module docstring).

    Args:
        loader: the :class:`~shoal.training.batches.BatchLoader` whose batches to produce
            (its sampler, labels, seeds, batch size, seed and timer are used).
        features: the budgeted feature store.
        window_bytes: bytes of one window's rows (at least one batch is always taken).
        last_epoch: the last epoch to read ahead (None: no limit; the trainer gives
            ``epochs - 1``).
        background: read in a background thread (default true; false reads each window when
            it is needed, with no overlap).
        pack_epochs: epochs whose rows one sweep of the feature file packs (default 0: off;
            the trainer and engines pass ``TrainConfig.pack_epochs``, default
            :data:`~shoal.rows.packing.PACK_EPOCHS`); packs go to a private directory in
            ``scratch_dir`` (default: beside the feature file).
        spool_samples: keep the samples of the epochs sampled ahead (to pack them, or to
            size the windows) in a private directory of ``scratch_dir`` (default: beside the
            feature file) and read them back when training, instead
            of sampling them again (:class:`~shoal.rows.spool.SampleSpool`; default false:
            for a structure on disk).
        start_room: bytes free for sampling ahead until the cache is read (the pool the
            cache and the windows will share, which nothing uses yet; default 0: the two
            window slots only), see :meth:`_sampling_room`.
    """

    def __init__(
        self,
        loader,
        features: DiskFeatures,
        *,
        window_bytes: int,
        last_epoch: int | None = None,
        background: bool = True,
        pack_epochs: int = 0,
        scratch_dir: str | None = None,
        spool_samples: bool = False,
        start_room: int = 0,
    ) -> None:
        self.loader = loader
        self.features = features
        self.window_rows = max(1, int(window_bytes) // max(features.row_bytes, 1))
        self.last_epoch = last_epoch
        self.background = background
        self.start_room = int(start_room)
        self._start_lists: contextlib.ExitStack | None = None  # _sampling_room
        self._seen = np.zeros(features.num_rows, dtype=np.bool_)  # rows of this epoch
        self._mark = np.zeros(features.num_rows, dtype=np.bool_)  # rows of this window
        self._unique: dict[int, int] = {}
        self._stream: Stream | None = None
        self.last_epoch_io: dict = {}
        self.fit: WindowFit | None = None
        #: sample each batch twice (to plan its window, then when trained) instead of holding
        #: an epoch's samples while its window is read (set by :meth:`calibrate`)
        self.resample = False
        self._start_seconds = 0.0  # in calibrate() and prime() since the last epoch record
        # epochs packed by one sweep; its buffers sized from two windows (calibrate: the pool)
        self.packs = Packs(
            features,
            epochs=pack_epochs,
            scratch_dir=scratch_dir,
            pool=2 * self.window_rows * features.row_bytes,
        )
        self._packed_before = self.packs.stats.snapshot()  # at the last epoch record
        #: the samples of epochs sampled ahead, kept in a scratch directory of their own until trained
        self.spool = None
        if spool_samples:
            self.spool = SampleSpool.beside_features(features, scratch_dir)

    # ----------------------------------------------------------------- planning / reading
    def _samples(
        self, epoch: int, steps: list[int] | None = None, *, record: bool = False
    ) -> Iterator:
        """``epoch``'s sampled batches (only ``steps`` when given): read back from the spool
        when it holds them, else sampled, and written to the spool when ``record``."""
        sp = self.spool
        if sp is not None and sp.has(epoch):
            t0 = time.perf_counter()
            for mb in sp.read(epoch, steps):
                self.loader.timer.add("sampling", time.perf_counter() - t0)
                yield mb
                t0 = time.perf_counter()
            return
        batches = self.loader.samples(epoch, steps)
        if sp is not None and record and steps is None:
            batches = sp.record(epoch, batches)
        yield from batches

    def _read(self, batch: list, cold: np.ndarray, epoch: int | None = None) -> tuple[list, object]:
        t0 = time.perf_counter()
        w = self.features.window([], cold=cold, source=self.packs.get(epoch))
        self.loader.timer.add("read", time.perf_counter() - t0)
        return batch, w

    # ----------------------------------------------------------------- packing
    @contextlib.contextmanager
    def _sampling_room(self) -> Iterator[None]:
        """Sample epochs ahead (to spool and pack them) in memory nothing else uses
        meanwhile, when the sampler reads its neighbour lists from disk: the two window slots,
        and before the cache is read (the run's start: :meth:`calibrate` and the first
        round's sampling) the whole :attr:`start_room`. When the lists fit that room with the
        sampler's group memory they are read whole, once, and the epochs drawn from memory
        (:meth:`~shoal.sample.sampler.NeighborSampler.lists_in_memory`); otherwise its groups
        of batches (:meth:`~shoal.sample.sampler.NeighborSampler.sample_group`, one sorted
        pass over the lists per hop and group) take the room too: an epoch or more instead of
        a few batches, and a round reads the lists a few times instead of tens of times (the
        10m graph at ``fraction:8``: docs/measurements.md#sampling-ahead-in-the-windows-memory).
        In the reading thread it first waits until no window is alive (the training thread
        has trained every window read) and evaluation allows reading, and holds the reading
        lock meanwhile (:meth:`pause` waits for the round's sampling to end); before the
        thread starts (the run's start, :meth:`calibrate`), no window exists yet."""
        sampler = getattr(self.loader, "sampler", None)
        if self.spool is None or not getattr(sampler, "reads_from_disk", False):
            yield
            return
        st = self._stream
        extra = 2 * self.window_rows * self.features.row_bytes
        start = not self.features.cache_loaded
        if start:
            extra = max(extra, self.start_room)
        with contextlib.ExitStack() as held:  # undone in reverse: memory, lock, slots
            if st is not None and threading.current_thread() is st.thread:
                for _ in range(2):
                    st._wait(st.slots)
                    held.callback(st.slots.release)
                st._wait(st.may_read)
                held.enter_context(st.reading)
            room = sampler.group_bytes + extra
            if not self._lists_whole(sampler, room, start, held):
                sampler.group_bytes += extra
                held.callback(setattr, sampler, "group_bytes", sampler.group_bytes - extra)
            yield

    def _lists_whole(self, sampler, room: int, start: bool, held: contextlib.ExitStack) -> bool:
        """Whether the sampler draws from its neighbour lists read whole into memory: they
        are already (the start's), or they fit ``room`` and are read now, held by ``held``
        or, at the ``start``, until the cache is read (:meth:`_drop_start_lists`)."""
        if start and self._start_lists is not None:
            return True
        whole = getattr(sampler, "lists_in_memory", None)
        if whole is None:
            return False
        stack = contextlib.ExitStack() if start else held
        if not stack.enter_context(whole(room)):
            return False
        if start:
            self._start_lists = stack
        return True

    def _presample(self, epochs: list[int]) -> None:
        """Sample ``epochs`` (the first round a sweep packs) into the spool now, grouped
        across the epochs (:meth:`~shoal.training.batches.BatchLoader.samples_of`), when the
        sampler reads its neighbour lists from disk in groups: each hop's lists are read
        once for the round instead of once per epoch (the start's calibration and packing
        then read the batches back from the spool). Inside :meth:`_sampling_room`."""
        sp, sampler = self.spool, getattr(self.loader, "sampler", None)
        samples_of = getattr(self.loader, "samples_of", None)
        todo = [e for e in epochs if sp is not None and not sp.has(e)]
        if len(todo) < 2 or samples_of is None or not getattr(sampler, "reads_from_disk", 0):
            return
        if sampler.group_size(self.loader.batch_size) <= len(self.loader):
            return  # a group holds an epoch or less: nothing shared between epochs
        t0, size = time.perf_counter(), sampler.group_size(self.loader.batch_size)
        reads = getattr(sampler, "group_reads", None)
        passes, nbytes = (reads.passes, reads.bytes) if reads is not None else (0, 0)
        made = samples_of(todo)
        per_epoch = len(self.loader)
        for e in todo:
            for _ in sp.record(e, (mb for _, mb in itertools.islice(made, per_epoch))):
                pass
        log.info(
            "sampled epoch(s) %s ahead: %d batches in groups of %d, %d pass(es) reading "
            "%.2f GB of neighbour lists, in %.1f s",
            ",".join(str(e + 1) for e in todo),
            per_epoch * len(todo),
            min(size, per_epoch * len(todo)),
            (reads.passes - passes) if reads is not None else 0,
            ((reads.bytes - nbytes) if reads is not None else 0) / 1e9,
            time.perf_counter() - t0,
        )

    def _drop_start_lists(self) -> None:
        """Free the neighbour lists read whole for the start's sampling (before the cache
        and the windows take their memory)."""
        if self._start_lists is not None:
            stack, self._start_lists = self._start_lists, None
            stack.close()

    def _pack(self, epoch: int, stop: threading.Event) -> None:
        """Pack the uncached rows of the epochs one sweep packs from ``epoch`` on
        (:meth:`~shoal.rows.packing.Packs.round`), sampling each once to learn them: each
        epoch's rows go to its pack window by window, in the order :meth:`_windows` will
        read them, so that a window reads one contiguous segment."""
        epochs = self.packs.round(epoch, self.last_epoch)
        if not epochs:
            return
        fs = self.features
        sets = {}
        with self._sampling_room():
            for e in epochs:

                def items(e: int = e) -> Iterator[tuple[None, np.ndarray]]:
                    for mb in self._samples(e, record=True):
                        if stop.is_set():
                            raise Stop
                        yield None, compact_ids(fs.cold_of(mb.n_id), fs.num_rows)

                sets[e] = [cold for _, _, cold in self._windows(items())]
        self._drop_start_lists()  # the sweep reads the cache

        def between() -> None:
            if stop.is_set():
                raise Stop
            st = self._stream
            if st is not None and threading.current_thread() is st.thread:
                st._wait(st.may_read)  # paused (evaluation): no sweep either

        t0 = time.perf_counter()
        self.packs.pack(sets, between)
        self.loader.timer.add("pack", time.perf_counter() - t0)

    def _plan(self, epoch: int, stop: threading.Event) -> Iterator[tuple[list, int, object]]:
        """The batches of ``epoch`` grouped into windows (:meth:`_windows`): ``(batches,
        slots, cold)`` with ``cold`` the sorted rows the window needs that the cache lacks;
        ``batches`` are the sampled minibatches, or their steps when they are sampled again
        (:attr:`resample`). Packs the epoch first when a sweep is due (:meth:`_pack`)."""
        self._pack(epoch, stop)
        self._drop_start_lists()  # the windows take the memory now
        fs, seen = self.features, self._seen
        seen[:] = False
        unique = [0]

        def items() -> Iterator[tuple[object, np.ndarray]]:
            for step, mb in enumerate(self._samples(epoch)):
                if stop.is_set():
                    raise Stop
                new = mb.n_id[~seen[mb.n_id]]
                seen[new] = True
                unique[0] += len(new)
                yield (step if self.resample else mb), fs.cold_of(mb.n_id)

        yield from self._windows(items())
        self._unique[epoch] = unique[0]
        self.packs.drop(epoch)  # its windows are read
        if self.spool is not None:
            self.spool.drop(epoch)

    def _windows(
        self, items: Iterator[tuple[object, np.ndarray]]
    ) -> Iterator[tuple[list, int, np.ndarray]]:
        """Group ``items`` (``(batch, its uncached rows)`` in order) into ``(batches, slots,
        cold)``; it looks only at the uncached rows, so :meth:`_pack` and :meth:`_plan` cut the
        same windows. An epoch whose uncached rows fit two windows is one window on both slots
        (each window costs about a sweep); else windows of ``window_rows``, one slot each."""
        mark = self._mark
        # (batch, its uncached rows not yet in the window, all its uncached rows)
        pending: list = []
        cold = 0
        single = True
        for x, c_all in items:
            c = c_all[~mark[c_all]]  # n_id has no repeats: c neither
            if single and cold + len(c) > 2 * self.window_rows:
                single = False  # too much for one double window: split what is pending
                self._clear(pending)
                yield from self._split([(b, a) for b, _, a in pending])
                pending, cold = [], 0
                c = c_all
            elif not single and pending and cold + len(c) > self.window_rows:
                yield [b for b, _, _ in pending], 1, self._clear(pending)
                pending, cold = [], 0
                c = c_all
            mark[c] = True
            pending.append((x, c, c_all))
            cold += len(c)
        if pending:  # an epoch in one window takes one slot when it fits one: read-ahead
            slots = 1 if not single or cold <= self.window_rows else 2
            yield [b for b, _, _ in pending], slots, self._clear(pending)

    def calibrate(
        self,
        pool: int | Callable[[int], int],
        *,
        epoch: int = 0,
        min_window: int = 1,
        cache_policy: str = "presample",
    ) -> WindowFit:
        """Size the cache and the windows by :func:`~shoal.rows.windowfit.fit_windows` of
        ``pool`` bytes (or ``pool(rows)``, ``rows`` the most input rows of a batch) from
        ``epoch``'s batches, sampled here once. ``cache_policy``: ``"presample"`` (default:
        :func:`~shoal.rows.featstore.presampled_priority`) or ``"degree"`` (the features'
        priority). Call before the cache is read; returns the fit (also :attr:`fit`). Its
        seconds (an epoch sampled before the first) go to the next epoch record's
        ``start_seconds``, with :meth:`prime`'s."""
        t_start = time.perf_counter()
        fs, seen = self.features, self._seen
        if fs.cache_loaded or fs.priority is None:
            raise RuntimeError(
                "calibrate needs a DiskFeatures whose cache is not read yet "
                "(defer_cache=True) and a priority order"
            )
        if cache_policy not in CACHE_POLICIES:
            raise ValueError(
                f"cache_policy must be one of {', '.join(CACHE_POLICIES)}, got {cache_policy!r}"
            )
        seen[:] = False
        counts = np.zeros(len(seen), np.uint16) if cache_policy == "presample" else None
        held = largest = rows = 0
        with self._sampling_room():
            self._presample(self.packs.round(epoch, self.last_epoch))
            for step, mb in enumerate(self._samples(epoch, record=self.packs.epochs >= 2)):
                seen[mb.n_id] = True
                if counts is not None and step < np.iinfo(np.uint16).max:
                    counts[mb.n_id] += 1  # n_id has no repeats
                held += mb.nbytes
                largest = max(largest, mb.nbytes)
                rows = max(rows, len(mb.n_id))
        if callable(pool):
            pool = int(pool(rows))
        self.packs.pool = pool  # sizes the sweep's buffers
        priority = fs.priority if counts is None else presampled_priority(counts, fs.priority)
        del counts
        fit = fit_windows(
            pool,
            needed=seen,
            priority=priority,
            row_bytes=fs.row_bytes,
            sample_bytes=held,
            batch_bytes=largest,
            min_window=min_window,
            split_cache_share=PACKED_CACHE_SHARE if self.packs.epochs >= 2 else SPLIT_CACHE_SHARE,
        )
        seen[:] = False
        fs.choose_cache(fit.cache_bytes, priority)
        self.window_rows = max(1, fit.window_bytes // max(fs.row_bytes, 1))
        self.resample = fit.resample and self.background
        self.fit = fit
        self._start_seconds += time.perf_counter() - t_start
        return fit

    def _clear(self, pending: list) -> np.ndarray:
        """The sorted union of ``pending``'s uncached rows; their marks are cleared."""
        c = np.concatenate([x[1] for x in pending]) if pending else np.empty(0, np.int64)
        self._mark[c] = False
        return np.sort(c)

    def _split(self, batches: list) -> Iterator[tuple[list, int, np.ndarray]]:
        """``(batch, its uncached rows)`` pairs in windows of at most ``window_rows`` rows
        (repeats counted), with each window's sorted uncached rows."""
        out: list = []
        parts: list = []
        cold = 0
        for x, c in batches:
            if out and cold + len(c) > self.window_rows:
                yield out, 1, unique_sorted(np.concatenate(parts))
                out, parts, cold = [], [], 0
            out.append(x)
            parts.append(c)
            cold += len(c)
        if out:
            yield out, 1, unique_sorted(np.concatenate(parts))

    def prime(self, epoch: int) -> None:
        """Start reading ahead from ``epoch``; when the cache is not loaded yet, its rows and
        the first window's are read in one pass now (the run's start pays for both; its
        seconds go to the next epoch record as ``start_seconds``)."""
        self.close(keep_samples=True)  # samples spooled ahead (calibrate) stay valid
        if self.spool is not None:
            for e in [e for e in self.spool.epochs if e < epoch]:
                self.spool.drop(e)
        if not self.background:
            return
        t_start = time.perf_counter()
        stop = threading.Event()
        plan = self._plan(epoch, stop)
        first = next(plan, None)
        primed = None
        if first is not None and not self.features.cache_loaded:
            t0 = time.perf_counter()
            w = self.features.load_cache(first[2])
            self.loader.timer.add("read", time.perf_counter() - t0)
            primed = (first[0], w, first[1])
        elif first is not None:
            primed = (*self._read(first[0], first[2], epoch), first[1])
        self._stream = Stream(self, epoch, self.last_epoch, stop=stop, plan=plan, primed=primed)
        self._start_seconds += time.perf_counter() - t_start

    def _sync(self, epoch: int) -> Iterator[tuple]:
        never = threading.Event()
        for batch, _, cold in self._plan(epoch, never):
            yield (epoch, *self._read(batch, cold, epoch), 0)
        yield (epoch, END, self._unique.pop(epoch, 0), 0)

    # ----------------------------------------------------------------- control
    def start(self, epoch: int) -> None:
        """Begin reading ahead from ``epoch`` (:meth:`prime` also reads its first window)."""
        self.prime(epoch)

    def pause(self) -> int:
        """Stop starting new reads (the one under way finishes); returns the bytes of the
        windows read ahead and held. :meth:`resume` undoes it."""
        st = self._stream
        if st is None:
            return 0
        st.may_read.clear()
        with st.reading:
            return max(st.held, 0)

    def resume(self) -> None:
        if self._stream is not None:
            self._stream.may_read.set()

    def close(self, *, keep_samples: bool = False) -> None:
        """Stop reading ahead and remove the packs and (unless ``keep_samples``) the spooled
        samples and the start's neighbour lists read whole."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if not keep_samples:  # (kept by prime: the start's round may still sample)
            self._drop_start_lists()
            if self.spool is not None:
                self.spool.drop()
        self.packs.drop()

    # ----------------------------------------------------------------- consuming
    def epoch(self, epoch: int) -> Iterator:
        """The batches of ``epoch`` (:class:`~shoal.training.batches.Batch` objects)."""
        if not self.background:
            yield from self._consume(epoch, self._sync(epoch), None)
            return
        st = self._stream
        queued = st is not None and st.finished and (st.last is None or epoch <= st.last)
        if st is None or st.next_epoch != epoch or not (st.thread.is_alive() or queued):
            # (a stream that queued its last epoch's windows and ended is not restarted)
            self.start(epoch)
            st = self._stream
        st.may_read.set()
        ok = False
        try:
            yield from self._consume(epoch, iter(st.q.get, None), st)
            st.next_epoch = epoch + 1
            ok = True
        finally:
            if not ok:  # stopped early or failed: no stream to continue from
                self.close()

    def _consume(self, epoch: int, items, st: Stream | None) -> Iterator:
        ld, fs = self.loader, self.features
        io0 = read_bytes_of_process()
        rec = FeatureStats().snapshot()
        buf = np.empty((0, fs.dim), np.float32)
        while True:
            t0 = time.perf_counter()
            e, mbs, w, slots = next(items)
            ld.timer.add("io_wait", time.perf_counter() - t0)
            if isinstance(mbs, BaseException):
                raise mbs
            if e != epoch:
                raise RuntimeError(f"prefetch stream out of step: epoch {e}, expected {epoch}")
            if isinstance(mbs, str):  # end of the epoch
                rec["unique_rows"] = int(w)
                break
            for mb in mbs:
                t0 = time.perf_counter()
                n = len(mb.n_id)
                if buf.shape[0] < n:
                    buf = np.empty((max(n, int(buf.shape[0] * 1.25)), fs.dim), np.float32)
                x = torch.from_numpy(w.gather(mb.n_id, buf[:n]))
                y = torch.from_numpy(ld.labels_of(mb.seeds))
                ld.timer.add("gather", time.perf_counter() - t0)
                yield Batch(mb, x, y)
            w.add_to(rec)
            nbytes = w.nbytes
            del w, mbs  # gone before the reading thread may take their memory
            if st is not None:
                st.release(nbytes, slots)
        io1 = read_bytes_of_process()
        rec["process_read_bytes"] = io1 - io0 if io0 >= 0 and io1 >= 0 else None
        # sweeps since the last record (also those run while the previous epoch trained)
        now = self.packs.stats.snapshot()
        was, self._packed_before = self._packed_before, now
        rec["pack_bytes_read"] = now["bytes_read"] - was["bytes_read"]
        rec["bytes_written"] = now["bytes_written"] - was["bytes_written"]
        rec["pack_seconds"] = now["seconds"] - was["seconds"]
        rec["pack_write_seconds"] = now["write_seconds"] - was["write_seconds"]
        rec["bytes_read"] += rec["pack_bytes_read"]
        rec["start_seconds"], self._start_seconds = self._start_seconds, 0.0
        rec["unique_bytes"] = rec["unique_rows"] * fs.row_bytes
        self.last_epoch_io = rec
