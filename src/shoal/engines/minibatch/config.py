"""The ``minibatch`` engine's options (DistDGL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig

__all__ = ["DEFAULT_PREFETCH_BATCHES", "MinibatchConfig"]

#: Batches a rank's sampling thread prepares ahead of the step (DistDGL Sec. III-D; the paper
#: gives no depth): 2 hides the network waits on a real network; inline (0) is faster over
#: loopback with no core to spare (docs/distributed.md#minibatch-distdgl, "Background
#: sampling").
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
            :data:`DEFAULT_PREFETCH_BATCHES` = 2). The batches are the same either way.
            Learned input rows (``--embedding-dim``) are sampled inline.
    """

    engine: ClassVar[str] = "minibatch"

    name: str = "minibatch"
    prefetch_batches: int = DEFAULT_PREFETCH_BATCHES

    def __post_init__(self) -> None:
        super().__post_init__()
        if int(self.prefetch_batches) < 0:
            raise ValueError(f"prefetch_batches must be >= 0, got {self.prefetch_batches}")
        self.prefetch_batches = int(self.prefetch_batches)
