"""Mini-batches of the single-process trainer and the engines: shuffled seeds -> sampled
blocks + gathered input features + labels (:class:`BatchLoader`), one optimisation step
(:func:`train_step`), per-phase timing (:class:`Timer`).

Training follows GraphSAGE's mini-batch scheme (Hamilton et al., NeurIPS 2017, Algorithm 2):
sample each batch's L-hop neighbourhood with per-hop fanouts, run the model on the blocks,
minimise cross-entropy with Adam (Kingma & Ba, ICLR 2015).
"""

from __future__ import annotations

import contextlib
import math
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

__all__ = ["Batch", "BatchLoader", "Gatherer", "Timer", "batch_seed", "train_step"]


class Gatherer(Protocol):
    """Anything that returns the input rows of a batch's nodes as a float32 tensor."""

    def gather(self, ids: np.ndarray) -> torch.Tensor: ...


def batch_seed(seed: int, epoch: int, step: int) -> int:
    """The sampling seed of one mini-batch: a function of (run seed, epoch, step) only."""
    ss = np.random.SeedSequence([seed, epoch, step])
    return int(ss.generate_state(1, np.uint64)[0])


class Timer:
    """Accumulates wall time per phase name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times the ``with`` block as ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def __str__(self) -> str:
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

    def samples(self, epoch: int, steps: list[int] | None = None) -> Iterator[MiniBatch]:
        """The sampled blocks of ``epoch``'s batches, in order (phase ``sampling``); only
        those of ``steps`` (batch indices, in the order given) when given. A sampler reading
        its neighbour lists from disk samples them in groups
        (:meth:`~shoal.sample.sampler.NeighborSampler.sample_group`: each hop's entries of a
        group read in one sorted pass), the same batches."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.seeds))
        seeds = self.seeds[order]
        bs = self.batch_size
        todo = list(range(len(self)) if steps is None else steps)
        size = 1
        if getattr(self.sampler, "reads_from_disk", False):
            size = self.sampler.group_size(bs)
        for a in range(0, len(todo), size):
            group = [
                (seeds[step * bs : (step + 1) * bs], batch_seed(self.seed, epoch, step))
                for step in todo[a : a + size]
            ]
            t0 = time.perf_counter()
            for mb in (
                self.sampler.sample_group(group)
                if size > 1
                else (self.sampler.sample(*b) for b in group)
            ):
                self.timer.add("sampling", time.perf_counter() - t0)
                yield mb
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
) -> tuple[float, int]:
    """One optimisation step on a batch; returns (loss, number of correct predictions).

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
    return float(loss.detach()), int((out.detach().argmax(1) == batch.y).sum())
