"""The reading thread of :class:`~shoal.rows.prefetch.WindowPrefetcher`.

One background thread per :class:`~shoal.rows.prefetch.WindowPrefetcher` takes the windows
its ``_plan`` yields, epoch after epoch, waits for a free window slot (two windows alive at
most: the one trained on and the one read), reads each window's rows and queues
``(epoch, batches, window, slots)`` for the training thread. When batches are sampled again
(``WindowPrefetcher.resample``), the thread samples a window's batches after queueing it, a few
ahead of training (:data:`RESAMPLE_QUEUE`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["END", "RESAMPLE_QUEUE", "Resampled", "Stop", "Stream"]

#: the batches of an item that closes an epoch
END = "end"
#: batches the reading thread samples ahead of training when batches are sampled again
#: (``WindowPrefetcher.resample``; :data:`shoal.rows.windowfit.RESAMPLE_BATCHES` counts
#: these, the one being queued and the one trained on)
RESAMPLE_QUEUE = 4


class Stop(Exception):
    pass


class Resampled:
    """The batches of one window, sampled again by the reading thread as they are trained
    (``WindowPrefetcher.resample``): at most :data:`RESAMPLE_QUEUE` wait in a queue."""

    def __init__(self, steps: list[int], stream: Stream) -> None:
        self.steps = steps
        self.stream = stream
        self.q: queue.Queue = queue.Queue(maxsize=RESAMPLE_QUEUE)
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator:
        for _ in self.steps:
            while True:
                try:
                    mb = self.q.get(timeout=0.5)
                    break
                except queue.Empty:
                    if self.error is not None:
                        raise self.error from None
                    if not self.stream.thread.is_alive():
                        raise RuntimeError(
                            "the prefetch thread stopped before sampling all of a window's batches"
                        ) from None
            yield mb


class Stream:
    """One background thread producing ``(epoch, batches, window)`` items from ``first`` on
    (``(epoch, "end", unique rows)`` closes an epoch). When batches are sampled again
    (``WindowPrefetcher.resample``), ``batches`` is a :class:`Resampled` that the
    thread fills after putting the item. ``pf``: the ``WindowPrefetcher`` (its module builds
    on this one, not the reverse)."""

    def __init__(
        self,
        pf: Any,
        first: int,
        last: int | None,
        *,
        stop: threading.Event | None = None,
        plan=None,
        primed=None,
    ) -> None:
        self.pf = pf
        self.next_epoch = first
        self.last = last
        self.finished = False  # every epoch up to ``last`` is queued: the thread has ended
        self.q: queue.Queue = queue.Queue()
        self.slots = threading.Semaphore(2)  # windows alive: the one trained on + the one read
        self.stop = stop or threading.Event()
        self.may_read = threading.Event()
        self.may_read.set()
        self.reading = threading.Lock()
        self.held = 0  # bytes of windows read and not yet released
        lazy = None
        if primed is not None:  # a window read already (with the cache)
            batch, w, slots = primed
            for _ in range(slots):
                self.slots.acquire()
            self.held += w.nbytes
            if pf.resample:
                batch = lazy = Resampled(batch, self)
            self.q.put((first, batch, w, slots))
        self.thread = threading.Thread(
            target=self._run, args=(first, last, plan, lazy), daemon=True, name="shoal-prefetch"
        )
        self.thread.start()

    def _wait(self, ev_or_sem) -> None:
        while not (
            ev_or_sem.wait(0.1)
            if isinstance(ev_or_sem, threading.Event)
            else ev_or_sem.acquire(timeout=0.1)
        ):
            if self.stop.is_set():
                raise Stop

    def _put(self, q: queue.Queue, item) -> None:
        while True:
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise Stop from None

    def _produce(self, epoch: int, lazy: Resampled) -> None:
        """Sample ``lazy``'s batches again, in order, as the training thread takes them."""
        try:
            for mb in self.pf._samples(epoch, lazy.steps):
                self._put(lazy.q, mb)
        except Stop:
            raise
        except BaseException as e:
            lazy.error = e
            raise

    def _run(self, first: int, last: int | None, plan, lazy: Resampled | None) -> None:
        epoch = first
        try:
            if lazy is not None:
                self._produce(first, lazy)
            while last is None or epoch <= last:
                if plan is None:
                    plan = self.pf._plan(epoch, self.stop)
                for batch, slots, cold in plan:
                    for _ in range(slots):
                        self._wait(self.slots)
                    self._wait(self.may_read)
                    with self.reading:
                        if self.stop.is_set():
                            raise Stop
                        _, w = self.pf._read(batch, cold, epoch)
                        self.held += w.nbytes
                    lazy = Resampled(batch, self) if self.pf.resample else None
                    self.q.put((epoch, batch if lazy is None else lazy, w, slots))
                    # no reference to the window stays here: the training thread frees it
                    # when done, before the next one is read into its slot
                    del w, batch
                    if lazy is not None:
                        self._produce(epoch, lazy)
                        lazy = None
                self.q.put((epoch, END, self.pf._unique.pop(epoch, 0), 0))
                epoch += 1
                plan = None
            self.finished = True
        except Stop:
            pass
        except BaseException as e:  # handed to the training thread
            self.q.put((epoch, e, None, 0))

    def release(self, nbytes: int, slots: int) -> None:
        self.held -= nbytes
        for _ in range(slots):
            self.slots.release()

    def close(self) -> None:
        self.stop.set()
        self.may_read.set()
        self.thread.join(timeout=60)
