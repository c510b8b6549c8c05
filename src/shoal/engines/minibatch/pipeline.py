"""Batches prepared in a background thread while the training thread computes (DistDGL).

DistDGL (Zheng et al., IA3 2020, Sec. III-D, "Distributed Sampler"): "by issuing sampling
requests to the sampling workers, trainers overlap the sampling cost with mini-batch
training". :class:`BatchPipeline` runs the rank's batch iterator (collective) in a thread up
to ``depth`` batches ahead, on a process group of its own, the ranks' threads agreeing before
each batch to go on (docs/distributed.md#minibatch-distdgl, "Background sampling"); a rank
whose peer stopped first gets :class:`PeerStopped` after the batches already queued.

One failure cannot be cleaned up from inside: when one rank stops while a peer's training
thread waits for it in the gradient all-reduce, that peer's sampling thread waits behind its
full queue, and the stopped rank's thread waits for it in the next agreement, until the peer's
all-reduce times out (``--dist-timeout``) or the launcher ends the peer. :meth:`close` waits
at most ``timeout_s`` for the thread and then leaves it (a daemon thread), as inline sampling
would leave the peer waiting in its next collective.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numba
import torch
import torch.distributed as dist

__all__ = ["BatchPipeline", "PeerStopped"]

log = logging.getLogger(__name__)

_DONE = object()


class PeerStopped(RuntimeError):
    """Another rank stopped its batch pipeline before this rank's epoch ended."""


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class BatchPipeline:
    """The items of ``source``, produced ``depth`` ahead by a background thread (module
    docstring). Iterate it once; :meth:`close` it (also after an exception).

    Args:
        source: the batches (iterated, and closed, in the background thread only).
        depth: batches queued beside the one being produced (>= 1).
        group: the process group of the source's collectives and of the agreements (None:
            the whole world; it must not be the training thread's group).
        world_size: ranks in ``group`` (1: no agreement, no collective).
        name: the thread's name.
    """

    def __init__(
        self,
        source: Iterable[Any],
        *,
        depth: int,
        group: dist.ProcessGroup | None = None,
        world_size: int = 1,
        name: str = "shoal-sampler",
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.group, self.world_size, self.name = group, int(world_size), name
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        # the training thread's thread counts (numba's and torch's OpenMP counts are per thread)
        self._threads = (torch.get_num_threads(), numba.get_num_threads())
        #: batches the thread produced (every rank's count is the same)
        self.produced = 0
        self._thread = threading.Thread(target=self._run, args=(source,), daemon=True, name=name)
        self._thread.start()

    # ---------------------------------------------------------------- producer
    def _agree(self, go: bool) -> bool:
        """Whether every rank's pipeline goes on (collective on ``group``)."""
        if self.world_size == 1:
            return go
        t = torch.tensor([int(go)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return bool(t.item())

    def _put(self, item: Any) -> bool:
        """Queue ``item``; False when the pipeline was stopped first."""
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, source: Iterable[Any]) -> None:
        torch.set_num_threads(self._threads[0])
        numba.set_num_threads(self._threads[1])
        it = iter(source)
        try:
            while True:
                mine = not self._stop.is_set()
                if not self._agree(mine):
                    if mine:
                        self._put(_Failed(PeerStopped(f"{self.name}: another rank stopped")))
                    return
                try:
                    item = next(it)
                except StopIteration:
                    self._put(_DONE)
                    return
                self.produced += 1
                self._put(item)  # stopped meanwhile: the next agreement says so
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put(_Failed(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    # ---------------------------------------------------------------- consumer
    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                item = self._q.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._q.empty():
                    raise RuntimeError(f"{self.name}: the thread ended without finishing") from None
                continue
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    @property
    def alive(self) -> bool:
        """Whether the background thread still runs."""
        return self._thread.is_alive()

    def close(self, timeout_s: float = 300.0) -> bool:
        """Stop the thread (after the batch it is producing, at the same batch on every
        rank) and wait for it at most ``timeout_s`` seconds; True when it ended."""
        self._stop.set()
        waited = 0.0
        while self._thread.is_alive() and waited < timeout_s:
            try:  # unblock a producer waiting to queue, and free the batches queued
                self._q.get_nowait()
            except queue.Empty:
                self._thread.join(0.05)
                waited += 0.05
        if self._thread.is_alive():
            log.warning(
                "%s still runs %.0f s after it was stopped (a peer rank has not stopped its "
                "own); left as a daemon thread",
                self.name,
                timeout_s,
            )
            return False
        return True
