"""The ``minibatch`` engine's options (DistDGL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig

__all__ = ["DEFAULT_PREFETCH_BATCHES", "MinibatchConfig"]

#: Batches a rank's sampling thread prepares ahead of the step (DistDGL Sec. III-D: sampler
#: workers "overlap the sampling cost with mini-batch training"; the paper gives no depth).
#: 2: on a real network, with each rank on its own link as on a cluster, prefetching 2
#: batches hides the sampling and pulls' network waits behind the step, for the same losses.
#: Over loopback with the processes filling the machine's cores there is no network to wait
#: for and no core to spare for the thread, and inline sampling is faster:
#: ``--prefetch-batches 0`` there. Both measured in docs/distributed.md#minibatch-distdgl
#: ("Background sampling").
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
            :data:`DEFAULT_PREFETCH_BATCHES` = 2, which hides the network waits on a real
            network; inline is faster over loopback on a machine with no core to spare for
            the thread). The batches are the same either way. Node classification on untyped
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
