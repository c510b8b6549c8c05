"""The registry of engines: name -> ``"module:Class"`` (imported on use)."""

from __future__ import annotations

import importlib

from shoal.errors import ShoalInputError

__all__ = ["ENGINES", "get_engine"]

#: Engine names -> "module:Class".
ENGINES: dict[str, str] = {
    "minibatch": "shoal.engines.minibatch:MinibatchEngine",
    "averaging": "shoal.engines.averaging:AveragingEngine",
    "hec": "shoal.engines.hec:HecEngine",
    "fullgraph": "shoal.engines.fullgraph:FullGraphEngine",
    "disagg": "shoal.engines.disagg:DisaggEngine",
}


def get_engine(name: str) -> type:
    """The engine class registered as ``name`` (ShoalInputError listing the valid names)."""
    target = ENGINES.get(name)
    if target is None:
        raise ShoalInputError(
            f"unknown engine {name!r}", fix=f"valid engines: {', '.join(sorted(ENGINES))}"
        )
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)
