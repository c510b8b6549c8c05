"""The ``averaging`` engine's options (SDT-GNN)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig

__all__ = ["AveragingConfig"]


@dataclass(kw_only=True)
class AveragingConfig(EngineConfig):
    """Options of model averaging, besides the shared :class:`EngineConfig` ones.

    Args:
        average_every: average the models every k epochs (default 1).
        halo_hops: train each part with its halo nodes' own in-edges too, this many hops
            from the core, fetched once before training (DGL's ``num_hops``; default 1:
            SDT-GNN's part, whose halo nodes have none; typed stores; see
            :mod:`shoal.engines.averaging.halo_hops`).
        part_models: with more parts than ranks: one model per part, all averaged at each
            round (SDT-GNN Sec. III-C/D; default false: one model carried through a rank's
            parts in turn).
        average_optimizer: average Adam's moments with the weights (default true; false =
            ``--local-optimizer-state``).
    """

    engine: ClassVar[str] = "averaging"

    name: str = "averaging"
    average_every: int = 1
    halo_hops: int = 1
    part_models: bool = False
    average_optimizer: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if int(self.average_every) < 1:
            raise ValueError(f"average_every must be >= 1, got {self.average_every}")
        if int(self.halo_hops) < 1:
            raise ValueError(f"halo_hops must be >= 1, got {self.halo_hops}")
