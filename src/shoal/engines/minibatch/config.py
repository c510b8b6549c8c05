"""The ``minibatch`` engine's options (DistDGL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig

__all__ = ["DEFAULT_PREFETCH_BATCHES", "MinibatchConfig"]

#: Batches a rank's sampling thread prepares ahead of the step (DistDGL Sec. III-D: sampler
#: workers "overlap the sampling cost with mini-batch training"; the paper gives no depth).
#: 2, by measurement (``bench/results/minibatch_1gbit.md``): on the 200k-node benchmark
#: graph, 2 processes each on its own 1 Gbit/s link (one machine per rank, as on a cluster),
#: the median epoch took 0.83x the inline epoch (10.12 s against 12.19 s, the same losses),
#: the sampling and pulls' network waits hidden behind the step. Over loopback with 2
#: processes on 2 cores shared with other jobs (no core to spare for the thread, no network
#: to wait for) 1 and 2 batches ahead were 8% and 16% slower (``bench/results/minibatch.md``):
#: ``--prefetch-batches 0`` there.
DEFAULT_PREFETCH_BATCHES = 2


@dataclass(kw_only=True)
class MinibatchConfig(EngineConfig):
    """Options of DistDGL-style synchronous mini-batch SGD, besides the shared
    :class:`EngineConfig` ones.

    Args:
        prefetch_batches: batches (sampled blocks and pulled feature rows) a background
            thread of each rank prepares while the training thread computes the current step,
            through a queue of this many (DistDGL Sec. III-D, its sampler workers). 0 samples
            and pulls inline, in the training step (``--no-background-sampling``; default
            :data:`DEFAULT_PREFETCH_BATCHES` = 2: 0.83x the inline epoch on 1 Gbit/s links;
            inline was faster over loopback on a machine with no core to spare for the
            thread). The batches are the same either way. Node classification on untyped
            stores; typed stores and ``--task link`` sample inline.
    """

    engine: ClassVar[str] = "minibatch"

    name: str = "minibatch"
    prefetch_batches: int = DEFAULT_PREFETCH_BATCHES

    def __post_init__(self) -> None:
        super().__post_init__()
        if int(self.prefetch_batches) < 0:
            raise ValueError(f"prefetch_batches must be >= 0, got {self.prefetch_batches}")
        self.prefetch_batches = int(self.prefetch_batches)
