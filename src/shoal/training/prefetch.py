"""Windows of batches sampled ahead and read in the background (Ginex's pipeline).

A background thread samples the epoch's batches in order, groups consecutive batches into
windows whose rows (those the cache lacks) fit ``window_bytes``, and has the
:class:`~shoal.sample.featstore.DiskFeatures` read each window's rows in one planned pass.
The training thread assembles each batch's input rows from memory and trains, while the
thread reads the next window: I/O overlaps compute. At most two windows exist at a time (the
one being trained on and the one being read), so the memory is ``2 * window_bytes``.

Batches are exactly those of :class:`~shoal.training.batches.BatchLoader` (same seeds, same
order, same samples): windows change when rows are read, never what is trained.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from shoal.sample.featstore import DiskFeatures

__all__ = ["WindowPrefetcher", "read_bytes_of_process"]


def read_bytes_of_process() -> int:
    """Bytes this process has caused to be read from storage (``/proc/self/io``), or -1."""
    try:
        for ln in Path(f"/proc/{os.getpid()}/io").read_text().splitlines():
            if ln.startswith("read_bytes:"):
                return int(ln.split()[1])
    except OSError:
        pass
    return -1


class _Stop(Exception):
    pass


class WindowPrefetcher:
    """Produces an epoch's batches from windows read in the background (module docstring).

    Args:
        loader: the :class:`~shoal.training.batches.BatchLoader` whose batches to produce
            (its sampler, labels, seeds, batch size, seed and timer are used).
        features: the budgeted feature store.
        window_bytes: bytes of one window's rows (at least one batch is always taken).
        background: read in a background thread (default true; false reads each window when
            it is needed, e.g. for debugging).
    """

    def __init__(self, loader, features: DiskFeatures, *, window_bytes: int,
                 background: bool = True) -> None:  # fmt: skip
        self.loader = loader
        self.features = features
        self.window_rows = max(1, int(window_bytes) // max(features.row_bytes, 1))
        self.background = background
        self._seen = np.zeros(features.num_rows, dtype=np.bool_)
        self.last_epoch: dict = {}

    def _read(self, batch: list):
        t0 = time.perf_counter()
        w = self.features.window([mb.n_id for mb in batch])
        self.loader.timer.add("read", time.perf_counter() - t0)
        return batch, w

    def _plan(self, epoch: int, stop: threading.Event) -> Iterator[list]:
        ld, fs = self.loader, self.features
        seen = self._seen
        batch: list = []
        cold = 0
        unique = 0
        for mb in ld.samples(epoch):
            if stop.is_set():
                raise _Stop
            n_cold = len(fs.cold_of(mb.n_id))
            if batch and cold + n_cold > self.window_rows:
                yield batch
                batch, cold = [], 0
            batch.append(mb)
            cold += n_cold
            new = mb.n_id[~seen[mb.n_id]]
            seen[new] = True
            unique += len(new)
        if batch:
            yield batch
        self.last_epoch["unique_rows"] = unique

    def epoch(self, epoch: int) -> Iterator:
        """The batches of ``epoch`` (:class:`~shoal.training.batches.Batch` objects)."""
        from shoal.training.batches import Batch

        ld, fs = self.loader, self.features
        self._seen[:] = False
        self.last_epoch = {}
        before = fs.stats.snapshot()
        io0 = read_bytes_of_process()
        stop = threading.Event()
        source = (self._background(epoch, stop) if self.background
                  else map(self._read, self._plan(epoch, stop)))  # fmt: skip
        buf = np.empty((0, fs.dim), np.float32)
        try:
            for mbs, w in source:
                for mb in mbs:
                    t0 = time.perf_counter()
                    n = len(mb.n_id)
                    if buf.shape[0] < n:
                        buf = np.empty((max(n, int(buf.shape[0] * 1.25)), fs.dim), np.float32)
                    x = torch.from_numpy(w.gather(mb.n_id, buf[:n]))
                    y = torch.from_numpy(np.asarray(ld.labels[mb.seeds], dtype=np.int64))
                    ld.timer.add("gather", time.perf_counter() - t0)
                    yield Batch(mb, x, y)
                del w
        finally:
            stop.set()
            after = fs.stats.snapshot()
            io1 = read_bytes_of_process()
            rec = {k: after[k] - before[k] for k in after}
            rec["process_read_bytes"] = io1 - io0 if io0 >= 0 and io1 >= 0 else None
            rec["unique_bytes"] = self.last_epoch.get("unique_rows", 0) * fs.row_bytes
            self.last_epoch.update(rec)

    def _background(self, epoch: int, stop: threading.Event) -> Iterator:
        slots = threading.Semaphore(2)  # windows alive: the one trained on + the one read
        q: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                for batch in self._plan(epoch, stop):
                    while not slots.acquire(timeout=0.1):  # at most two windows exist
                        if stop.is_set():
                            return
                    q.put(self._read(batch))
                q.put(None)
            except _Stop:
                q.put(None)
            except BaseException as e:  # handed to the training thread
                q.put(e)

        th = threading.Thread(target=run, name="shoal-prefetch", daemon=True)
        th.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = q.get()
                self.loader.timer.add("io_wait", time.perf_counter() - t0)
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                slots.release()
        finally:
            stop.set()
            th.join(timeout=60)
