"""The link task on one part of the averaging engine (``--task link``): the part's own
positives, in batches for the part's local sampler.

The engine trains each part alone (SDT-GNN, Sec. III-B/C), so a part's link steps are drawn
from the part only (the ``"part"`` scope of :mod:`shoal.engines.linktask`): the edges between
two of its core nodes, negatives from its core nodes. Every end node of a step is a core node,
whose local id is its global one less ``part.start``: the step's nodes and exclusions are
shifted into the local sampler's id space, in order. A part takes
``ceil(positives / batch_size)`` steps an epoch: the ranks step alone between averaging
rounds, so their step counts need not match.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import torch

from shoal.engines.linktask import DistLinkTask, LinkStep
from shoal.graph.blocks import Batch
from shoal.sample.sampler import NeighborSampler
from shoal.store.reader import Partition
from shoal.training.batches import Gatherer, Timer, batch_seed

__all__ = ["PartLinks"]


class PartLinks:
    """One part's link batches (module docstring): :class:`~shoal.graph.blocks.Batch` es of
    local blocks and rows whose ``step`` is the :class:`~shoal.engines.linktask.LinkStep`
    (global ids, as :meth:`DistLinkTask.loss <shoal.engines.linktask.DistLinkTask.loss>`
    reads it), in place of a node loader.

    Args:
        link: the engine's link task; part: the part; sampler: the part's local sampler;
        gatherer: its rows (local ids); batch_size: positives per batch (at most); seed: the
        part's stream (the node loader's: shuffles and batch seeds); timer: gets the phases
        ``sampling`` and ``gather``.
    """

    #: no windows read ahead (the engine's I/O hooks ask)
    prefetcher = None

    def __init__(
        self,
        link: DistLinkTask,
        part: Partition,
        sampler: NeighborSampler,
        gatherer: Gatherer,
        *,
        batch_size: int,
        seed: int,
        timer: Timer,
    ) -> None:
        self.link, self.part, self.sampler, self.gatherer = link, part, sampler, gatherer
        self.seed, self.timer = seed, timer
        # each part its own shuffle, whichever rank holds it
        self.positives = link.part_positives(part)
        self.num_batches = math.ceil(self.positives.count / batch_size)

    @property
    def count(self) -> int:
        """The part's positives (its model's weight in the average)."""
        return self.positives.count

    def __len__(self) -> int:
        return self.num_batches

    def steps(self, epoch: int) -> Iterator[LinkStep]:
        """The part's :attr:`num_batches` steps of ``epoch`` (global ids)."""
        if not self.num_batches:
            return
        run_seed = self.link.config.run.seed
        for step, pos in enumerate(self.positives.epoch(run_seed, epoch, self.num_batches)):
            yield self.link.step(pos, batch_seed(self.seed, epoch, step))

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """The part's batches of ``epoch``: each step's end nodes sampled in local ids with
        its positives and their reverses excluded at every hop, their rows gathered."""
        start = int(self.part.start)
        for st in self.steps(epoch):
            t0 = time.perf_counter()
            mb = self.sampler.sample(st.nodes - start, st.seed, exclude=st.exclude - start)
            t1 = time.perf_counter()
            x = self.gatherer.gather(mb.n_id)
            self.timer.add("sampling", t1 - t0)
            self.timer.add("gather", time.perf_counter() - t1)
            yield Batch(mb, x, torch.empty(0, dtype=torch.int64), st)
