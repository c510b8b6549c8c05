"""The trivial engine's options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig


@dataclass(kw_only=True)
class TrivialConfig(EngineConfig):
    """Args: trivial_lr_scale: factor on the learning rate (default 1.0)."""

    engine: ClassVar[str] = "trivial"

    name: str = "trivial"
    trivial_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.trivial_lr_scale > 0:
            raise ValueError(f"trivial_lr_scale must be > 0, got {self.trivial_lr_scale}")
