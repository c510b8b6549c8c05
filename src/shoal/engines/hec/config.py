"""The ``hec`` engine's options (DistGNN-MB's historical embedding cache)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig

__all__ = ["HecConfig"]


@dataclass(kw_only=True)
class HecConfig(EngineConfig):
    """The cache's parameters (DistGNN-MB Sec. 3.2, Algorithm 2), besides the shared
    :class:`EngineConfig` options.

    Args:
        hec_size: lines of each layer's historical embedding cache, ``cs`` (default
            1,000,000, DistGNN-MB's; at most the rank's halo nodes are allocated).
        hec_push: most rows pushed per step, layer and peer, ``nc``, drawn by degree
            (default 2000; -1 = every candidate).
        hec_lifespan: steps a cache line stays valid, ``ls`` (default 2).
        hec_delay: steps between a push and its use, ``d`` (default 1).
        hec_cache: use the caches (default True). False is the ablation that isolates them
            (``--no-hec-cache``): the same batches are sampled over the whole graph (remote
            frontier nodes by their owners) and every remote input row is pulled from its
            owner, as the ``minibatch`` engine does; nothing is pushed, cached or dropped.

    The defaults are the paper's (Sec. 4.4); the cache on and off, and ``nc``, measured:
    docs/distributed.md#hec-distgnn-mb.
    """

    engine: ClassVar[str] = "hec"

    name: str = "hec"
    hec_size: int = 1_000_000
    hec_push: int = 2000
    hec_lifespan: int = 2
    hec_delay: int = 1
    hec_cache: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("hec_size", "hec_delay"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.hec_push < -1:
            raise ValueError(f"hec_push must be >= 0, or -1 for all, got {self.hec_push}")
        if self.hec_lifespan < 0:
            raise ValueError(f"hec_lifespan must be >= 0, got {self.hec_lifespan}")
