"""The registry of engines: name -> ``"module:Class"`` (imported on use)."""

from __future__ import annotations

import importlib

from shoal.errors import ShoalInputError

__all__ = ["ENGINES", "LINK_ENGINES", "get_engine"]

#: Engine names -> "module:Class".
ENGINES: dict[str, str] = {
    "minibatch": "shoal.engines.minibatch:MinibatchEngine",
    "averaging": "shoal.engines.averaging:AveragingEngine",
    "hec": "shoal.engines.hec:HecEngine",
    "fullgraph": "shoal.engines.fullgraph:FullGraphEngine",
    "disagg": "shoal.engines.disagg:DisaggEngine",
}

#: Engines that train ``--task link`` -> "module:Class" of their link variant.
LINK_ENGINES: dict[str, str] = {
    "minibatch": "shoal.engines.linkmb:LinkMinibatchEngine",
}


def get_engine(name: str, task: str = "node") -> type:
    """The engine class registered as ``name`` for ``task`` (ShoalInputError listing the
    valid names, or the engines that support the task)."""
    target = ENGINES.get(name)
    if target is None:
        raise ShoalInputError(
            f"unknown engine {name!r}", fix=f"valid engines: {', '.join(sorted(ENGINES))}"
        )
    if task == "link":
        target = LINK_ENGINES.get(name)
        if target is None:
            raise ShoalInputError(
                f"the {name} engine does not support --task link yet",
                fix=f"use --engine {' or '.join(sorted(LINK_ENGINES))}, or train in one "
                "process on the split graph (--graph DIR --task link)",
            )
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)
