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
            from the core, fetched once before training (DGL's ``num_hops``;
            :mod:`shoal.engines.averaging.halo_hops`). 1 is SDT-GNN's stored part, whose halo
            nodes have no in-edges. Default ``"auto"`` (:meth:`resolve_halo_hops`):
            ``min(2, layers)`` on a typed store, 1 on an untyped one (measured:
            docs/distributed.md#typed-stores-every-engine).
        part_models: with more parts than ranks: one model per part, each with its own
            optimizer, all averaged at each round (SDT-GNN Sec. III-C; default true). False
            (``--no-part-models``) carries one model through a rank's parts in turn, the
            ablation (docs/distributed.md#averaging-sdt-gnn).
        average_optimizer: average Adam's moments with the weights (default true; false =
            ``--local-optimizer-state``, the paper, which averages the weights only). A
            deviation from the paper, by measurement: docs/distributed.md#averaging-sdt-gnn.
    """

    engine: ClassVar[str] = "averaging"

    name: str = "averaging"
    average_every: int = 1
    halo_hops: int | str = "auto"
    part_models: bool = True
    average_optimizer: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if int(self.average_every) < 1:
            raise ValueError(f"average_every must be >= 1, got {self.average_every}")
        if self.halo_hops != "auto":
            try:
                ok = int(self.halo_hops) >= 1
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f'halo_hops must be "auto" or >= 1, got {self.halo_hops!r}')
            self.halo_hops = int(self.halo_hops)

    def resolve_halo_hops(self, *, typed: bool, num_layers: int) -> int:
        """The hops of halo a run grows its parts by: ``halo_hops``, or for ``"auto"``
        ``min(2, num_layers)`` on a typed store and 1 (the stored part) on an untyped one."""
        if self.halo_hops != "auto":
            return int(self.halo_hops)
        return max(1, min(2, int(num_layers))) if typed else 1
