"""The ``fullgraph`` engine's options (NeutronStar's dependency management)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig
from shoal.utils.io import parse_size

__all__ = ["DEP_MODES", "FullGraphConfig"]

#: how remote dependencies are handled (``FullGraphConfig.deps``)
DEP_MODES = ("hybrid", "comm", "cache")


@dataclass(kw_only=True)
class FullGraphConfig(EngineConfig):
    """NeutronStar's options (Sec. 3-4), besides the shared :class:`EngineConfig` ones.

    Args:
        deps: how remote dependencies are handled: ``"comm"`` (fetched every layer,
            DepComm), ``"cache"`` (recomputed from replicated subtrees, DepCache) or
            ``"hybrid"`` (split per dependency by NeutronStar's cost model; default
            ``"hybrid"``).
        dep_memory: the memory limit ``S`` of the replicated dependencies, a size (e.g.
            ``"512MiB"``); None = what the rank's memory budget leaves for features after
            its own part (default None).
        dep_costs: ``(T_v, T_e, T_c)`` seconds per dimension instead of probing them (for
            ablations and tests; default None = probe).
        ring: exchange a level's chunks in ring time slots (Sec. 4.3, Figure 8; in slot ``s``
            rank ``r`` sends to ``(r + s) mod p`` and receives from ``(r - s) mod p``); false
            posts every chunk at once in rank order (the ablation; default true, the paper's
            algorithm: docs/distributed.md#fullgraph-neutronstar).
        overlap: compute while chunks are in flight (Sec. 4.3), and push gradients
            asynchronously in backward; false waits for every chunk first (the ablation;
            default true, the paper's algorithm: it needs a core free while the chunks
            travel, docs/distributed.md#fullgraph-neutronstar).
    """

    engine: ClassVar[str] = "fullgraph"

    name: str = "fullgraph"
    deps: str = "hybrid"
    dep_memory: str | int | None = None
    dep_costs: tuple[float, float, float] | None = None
    ring: bool = True
    overlap: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.deps not in DEP_MODES:
            raise ValueError(f"deps must be one of {', '.join(DEP_MODES)}, got {self.deps!r}")
        if self.dep_memory is not None and parse_size(self.dep_memory) < 0:
            raise ValueError(f"dep_memory must be a size >= 0, got {self.dep_memory!r}")
        if self.dep_costs is not None:
            self.dep_costs = tuple(float(x) for x in self.dep_costs)
            if len(self.dep_costs) != 3 or not all(
                x >= 0 and math.isfinite(x) for x in self.dep_costs
            ):
                raise ValueError(
                    f"dep_costs must be three costs >= 0 (T_v, T_e, T_c), got {self.dep_costs!r}"
                )
