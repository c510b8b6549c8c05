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
            from the core, fetched once before training (DGL's ``num_hops``; see
            :mod:`shoal.engines.averaging.halo_hops`). 1 is SDT-GNN's stored part, whose halo
            nodes have no in-edges. Default ``"auto"`` (:meth:`resolve_halo_hops`): on a typed
            store ``min(2, layers)``, measured better than the stored part (bench/hetero:
            R-GCN +0.52, R-GAT +1.30 points, 15-22% more time per epoch); on an untyped store 1
            (only 1 is implemented there).
        part_models: with more parts than ranks: one model per part, each with its own
            optimizer, all averaged at each round (SDT-GNN Sec. III-C: "trains ... local
            models independently and sequentially. Once all p local models are trained, they
            are synchronized and updated via model averaging"; default true). False
            (``--no-part-models``) carries one model through a rank's parts in turn: measured
            within noise of it (``bench/results/averaging.md``).
        average_optimizer: average Adam's moments with the weights (default true; false =
            ``--local-optimizer-state``, the paper, which averages the weights only). A
            deviation from the paper, by measurement: with each model's own moments the
            averaged model lost 13.9 points of test accuracy on Cora and 0.5 on
            Amazon-Photo (``bench/results/averaging.md``, 5 seeds).
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
