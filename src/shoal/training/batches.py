"""Mini-batches of the single-process trainer and the engines: shuffled seeds -> sampled
blocks + gathered input features + labels (:class:`BatchLoader`), one optimisation step
(:func:`train_step`), per-phase timing (:class:`Timer`).

Training follows GraphSAGE's mini-batch scheme (Hamilton et al., NeurIPS 2017, Algorithm 2):
sample each batch's L-hop neighbourhood with per-hop fanouts, run the model on the blocks,
minimise cross-entropy with Adam (Kingma & Ba, ICLR 2015).
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from shoal.graph.blocks import Batch, MiniBatch
from shoal.nn.base import keyed_dropout
from shoal.rows.prefetch import WindowPrefetcher
from shoal.sample.sampler import NeighborSampler
from shoal.utils.io import release_pages

__all__ = [
    "Batch",
    "BatchLoader",
    "EventClock",
    "Gatherer",
    "Timer",
    "batch_seed",
    "event_device",
    "timed",
    "train_step",
]


class Gatherer(Protocol):
    """Anything that returns the input rows of a batch's nodes as a float32 tensor."""

    def gather(self, ids: np.ndarray) -> torch.Tensor: ...


def batch_seed(seed: int, epoch: int, step: int) -> int:
    """The sampling seed of one mini-batch: a function of (run seed, epoch, step) only."""
    ss = np.random.SeedSequence([seed, epoch, step])
    return int(ss.generate_state(1, np.uint64)[0])


def event_device(device: torch.device | str | None) -> torch.device | None:
    """``device`` as a :class:`torch.device` when phases on it are timed with CUDA events: a
    ``cuda`` device on a machine where :func:`torch.cuda.is_available`; None otherwise (the
    phases stay on the wall clock)."""
    if device is None:
        return None
    d = torch.device(device)
    if d.type != "cuda" or not torch.cuda.is_available():
        return None
    return d


class EventClock:
    """Times blocks with pairs of CUDA events on the current stream of ``device``, without a
    synchronisation per block.

    :meth:`time` records a start event before the block and an end event after it; the pair
    waits until :meth:`seconds` synchronises (once, on the last end event) and turns every
    pair into ``start.elapsed_time(end) / 1000`` seconds, summed per phase. To keep the
    pending pairs bounded over a long epoch, pairs the device has already finished (in the
    order they were recorded) are summed as more are recorded, again without a sync. What a
    pair measures is the device's time between the two events on that stream: the kernels
    the block queued there plus any wait inside the block; work the block queues on other
    streams is not in it.
    """

    _DRAIN_AT = 512  # pending pairs from which the finished ones are summed as we go

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pending: collections.deque[tuple[str, Any, Any]] = collections.deque()
        self._done: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Pairs recorded and not yet summed."""
        return len(self._pending)

    @contextlib.contextmanager
    def time(self, name: str) -> Iterator[None]:
        """Times the ``with`` block as ``name`` (also when it raises)."""
        stream = torch.cuda.current_stream(self.device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        try:
            yield
        finally:
            end.record(stream)
            with self._lock:
                self._pending.append((name, start, end))
                if len(self._pending) >= self._DRAIN_AT:
                    self._drain()

    def _drain(self) -> None:
        # the lock is held; sums the finished pairs at the front, in the order recorded
        q, done = self._pending, self._done
        while q and q[0][2].query():
            name, start, end = q.popleft()
            done[name] = done.get(name, 0.0) + start.elapsed_time(end) / 1000.0

    def seconds(self) -> dict[str, float]:
        """Waits for the pending pairs and returns the seconds per phase of every pair since
        the last call (then starts from zero again); ``{}`` when nothing was timed."""
        with self._lock:
            q = self._pending
            if q:
                q[-1][2].synchronize()
                for _, _, end in q:  # a pair on another stream may still be running
                    if not end.query():
                        end.synchronize()
                self._drain()
            out, self._done = self._done, {}
        return out


@contextlib.contextmanager
def timed(name: str, add, events: EventClock | None) -> Iterator[None]:
    """Times the ``with`` block as ``name`` (also when it raises): between CUDA events of
    ``events`` when given (their seconds counted when it is read), else its wall time passed
    to ``add(name, seconds)``."""
    if events is not None:
        with events.time(name):
            yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - t0)


class Timer:
    """Accumulates seconds per phase name.

    Args:
        device: the device the timed phases run on (keyword; default None: the wall clock).
            On a CUDA device (when :func:`torch.cuda.is_available`) :meth:`phase` times its
            block with CUDA events on the current stream (see :class:`EventClock`): the
            device's time between them, the kernels the block queued plus any wait inside it,
            measured without a sync per block. Those seconds reach :attr:`seconds` at
            :meth:`flush`. Any other device: the wall clock, as with None.
    """

    def __init__(self, *, device: torch.device | str | None = None) -> None:
        self.seconds: dict[str, float] = {}
        dev = event_device(device)
        self._events = EventClock(dev) if dev is not None else None

    def add(self, name: str, seconds: float) -> None:
        """Adds ``seconds`` (wall seconds, on any device) to ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times the ``with`` block as ``name`` (also when it raises): its wall time, or on a
        CUDA device the device's time between events around it (added at :meth:`flush`)."""
        with timed(name, self.add, self._events):
            yield

    def flush(self) -> None:
        """Waits for the device to finish the phases timed with events and adds their seconds
        to :attr:`seconds` (a no-op on the wall clock, or when none are pending)."""
        if self._events is not None:
            for name, s in self._events.seconds().items():
                self.add(name, s)

    def __str__(self) -> str:
        self.flush()
        return ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())


class BatchLoader:
    """Yields an epoch's mini-batches: shuffled seeds, sampling, feature gather (timed).

    Args:
        sampler: the neighbour sampler; gatherer: the feature gatherer; labels: ``(N,)`` ints;
        seeds: training node ids; batch_size: seeds per batch; seed: run seed.
    Shuffling and sampling depend only on ``(seed, epoch, step)``, so a resumed run sees the
    same batches. Phases ``sampling`` and ``gather`` are added to ``timer``.
    """

    def __init__(
        self,
        sampler: NeighborSampler,
        gatherer: Gatherer,
        labels: np.ndarray,
        seeds: np.ndarray,
        *,
        batch_size: int,
        seed: int,
        timer: Timer | None = None,
    ) -> None:
        self.sampler = sampler
        self.gatherer = gatherer
        self.labels = labels
        self.seeds = np.asarray(seeds, dtype=np.int64)
        # the seeds' labels, read once in id order: a memory-mapped label file indexed per
        # batch faults a page (and the kernel's read-ahead) per seed, again every epoch once
        # the cap evicts them (docs/measurements.md#the-memory-plan)
        self._sorted_seeds = np.sort(self.seeds)
        self._seed_labels = np.asarray(labels[self._sorted_seeds], dtype=np.int64)
        release_pages(labels)  # the mapped pages leave this process (clean: reclaimable)
        self.batch_size = batch_size
        self.seed = seed
        self.timer = timer or Timer()
        self.prefetcher = None

    def use_windows(self, features, **options: Any) -> None:
        """Produce batches from windows of ``features`` (a budgeted
        :class:`~shoal.rows.featstore.DiskFeatures`) read ahead in a background thread, by a
        :class:`~shoal.rows.prefetch.WindowPrefetcher` of ``options`` (``window_bytes``;
        ``last_epoch``, ``background``, ``pack_epochs`` epochs' rows packed by one sweep into
        ``scratch_dir``, the samples of packed epochs kept there too when ``spool_samples``);
        the batches do not change."""
        self.gatherer = features
        self.prefetcher = WindowPrefetcher(self, features, **options)

    def labels_of(self, seeds: np.ndarray) -> np.ndarray:
        """int64 labels of ``seeds`` (training seeds: from memory; others from ``labels``)."""
        seeds = np.asarray(seeds, dtype=np.int64)
        pos = np.searchsorted(self._sorted_seeds, seeds)
        pos = np.minimum(pos, max(len(self._sorted_seeds) - 1, 0))
        if (
            len(seeds)
            and len(self._sorted_seeds)
            and np.array_equal(self._sorted_seeds[pos], seeds)
        ):
            return self._seed_labels[pos]
        return np.asarray(self.labels[seeds], dtype=np.int64)

    def __len__(self) -> int:
        return max(1, math.ceil(len(self.seeds) / self.batch_size)) if len(self.seeds) else 0

    def steps(self, epoch: int, steps: list[int] | None = None) -> Iterator[tuple[np.ndarray, int]]:
        """``(seeds, batch seed)`` of ``epoch``'s batches in order (only those of ``steps``
        when given): the seeds shuffled by ``(seed, epoch)``, each batch's sampling seed
        :func:`batch_seed` ``(seed, epoch, step)``; what every producer of the batches follows."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.seeds))
        seeds = self.seeds[order]
        bs = self.batch_size
        for step in range(len(self)) if steps is None else steps:
            yield seeds[step * bs : (step + 1) * bs], batch_seed(self.seed, epoch, step)

    def samples(self, epoch: int, steps: list[int] | None = None) -> Iterator[MiniBatch]:
        """The sampled blocks of ``epoch``'s batches, in order (phase ``sampling``); only
        those of ``steps`` (batch indices, in the order given) when given. A sampler reading
        its neighbour lists from disk samples them in groups
        (:meth:`~shoal.sample.sampler.NeighborSampler.sample_group`: each hop's entries of a
        group read in one sorted pass), the same batches."""
        todo = list(range(len(self)) if steps is None else steps)
        for _, mb in self._sampled(((epoch, b) for b in self.steps(epoch, todo)), len(todo)):
            yield mb

    def samples_of(self, epochs: list[int]) -> Iterator[tuple[int, MiniBatch]]:
        """``(epoch, blocks)`` of every batch of ``epochs``, epoch by epoch in order: the
        batches :meth:`samples` gives, with a sampler reading from disk grouped across the
        epochs' boundaries (a group of several epochs reads the lists once per hop instead
        of once per hop and epoch)."""
        pairs = ((e, b) for e in epochs for b in self.steps(e))
        yield from self._sampled(pairs, len(self) * len(epochs))

    def _sampled(self, pairs: Iterator[tuple], count: int) -> Iterator[tuple[int, MiniBatch]]:
        """``(epoch, blocks)`` of the ``count`` ``(epoch, (seeds, seed))`` of ``pairs``."""
        size = 1
        if getattr(self.sampler, "reads_from_disk", False):
            size = self.sampler.group_size(self.batch_size)
        for a in range(0, count, size):
            group = [next(pairs) for _ in range(a, min(a + size, count))]
            t0 = time.perf_counter()
            made = (
                self.sampler.sample_group([b for _, b in group])
                if size > 1
                else (self.sampler.sample(*b) for _, b in group)
            )
            for (e, _), mb in zip(group, made, strict=True):
                self.timer.add("sampling", time.perf_counter() - t0)
                yield e, mb
                t0 = time.perf_counter()

    def epoch(self, epoch: int) -> Iterator[Batch]:
        if self.prefetcher is not None:
            yield from self.prefetcher.epoch(epoch)
            return
        for mb in self.samples(epoch):
            t1 = time.perf_counter()
            x = self.gatherer.gather(mb.n_id)
            y = torch.from_numpy(self.labels_of(mb.seeds))
            self.timer.add("gather", time.perf_counter() - t1)
            yield Batch(mb, x, y)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    *,
    dropout_key: tuple[int, int, int] | None = None,
    lazy: bool = False,
) -> tuple[float, int] | tuple[torch.Tensor, torch.Tensor]:
    """One optimisation step on a batch; returns (loss, number of correct predictions).

    ``lazy``: return them as 0-d tensors on the model's device instead of numbers, so the
    step does not wait for the device to finish it (default False; the trainer's choice on
    a GPU, whose meter sums them there).

    ``dropout_key``: (run seed, epoch, step) to key the dropout masks by node id
    (:func:`shoal.nn.base.keyed_dropout`; ``batch.mb.n_id`` must be original node ids), or
    None (default) to draw them from torch's generator.
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    if dropout_key is None:
        out = model(batch.x, batch.mb.blocks)
    else:
        with keyed_dropout(model, *dropout_key):
            out = model(batch.x, batch.mb.with_node_ids())
    loss = F.cross_entropy(out, batch.y)
    loss.backward()
    optimizer.step()
    correct = (out.detach().argmax(1) == batch.y).sum()
    if lazy:
        return loss.detach(), correct
    return float(loss.detach()), int(correct)
