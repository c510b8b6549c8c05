"""``EngineConfig``: the options every distributed engine shares, and the base class of each
engine's own configuration (``shoal.engines.<name>.config``).

The single-process trainer ignores it; ``shoal train --store`` fills the chosen engine's
subclass from its flags and TOML keys (:func:`shoal.engines.config.read_config`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

__all__ = ["EngineConfig"]


@dataclass(kw_only=True)
class EngineConfig:
    """Which engine trains, on how many processes, and its options.

    Args:
        name: registered engine name (``shoal.engines.registry``), or ``"auto"``: probe this
            machine and take the engine with the lowest estimated epoch (default
            ``"minibatch"``).
        nproc: processes to start on this machine; torchrun sets the world itself
            (default 1).
        plan: a plan JSON from ``shoal plan`` (its ``worker_of_part``); None = part ``j`` on
            rank ``j mod N`` (default None).
        dist_timeout: seconds before a stuck collective fails the run (default 300).
        max_restarts: with ``nproc``: restart all workers up to this many times after a
            failure (default 0).

    An engine with options of its own subclasses this (a keyword-only dataclass whose fields
    are its options, each validated in its ``__post_init__``) and sets :attr:`engine` to its
    registry name; the base fields stay shared.
    """

    #: the registry name of the engine this class configures ("" for the base class)
    engine: ClassVar[str] = ""

    name: str = "minibatch"
    nproc: int = 1
    plan: str | None = None
    dist_timeout: float = 300.0
    max_restarts: int = 0

    def __post_init__(self) -> None:
        if self.engine and self.name != self.engine:
            raise ValueError(
                f"{type(self).__name__} configures the {self.engine} engine, not {self.name!r}"
            )
        if int(self.nproc) < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")
        if not self.dist_timeout > 0:
            raise ValueError(f"dist_timeout must be > 0, got {self.dist_timeout}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")

    @classmethod
    def shared_fields(cls) -> tuple[str, ...]:
        """The option names every engine shares (the base class's fields)."""
        return tuple(f.name for f in fields(EngineConfig))

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The option names this engine adds to the shared ones."""
        shared = set(cls.shared_fields())
        return tuple(f.name for f in fields(cls) if f.name not in shared)

    def shared(self) -> dict[str, Any]:
        """The shared options' values (to build another engine's config from them)."""
        return {k: getattr(self, k) for k in self.shared_fields()}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
