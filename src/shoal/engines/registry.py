"""The registry of engines: name -> ``"module:SPEC"`` of the engine's
:class:`~shoal.engines.spec.EngineSpec` (imported on use).

Adding an engine is one folder ``shoal/engines/<name>/`` (its ``__init__.py`` defines
``SPEC``) plus one line in :data:`ENGINES`. Engines outside shoal register without touching it:
as an entry point of the group ``shoal.engines`` in their package's metadata
(``name = "package.module:SPEC"``), or, for one run, in the environment variable
``SHOAL_ENGINES`` (``name=package.module:SPEC``, comma-separated; inherited by the workers
the launcher starts).
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points

from shoal.engines.spec import EngineSpec, load_object
from shoal.errors import ShoalInputError

__all__ = [
    "ENGINES",
    "engine_names",
    "get_engine",
    "get_spec",
    "link_engine_names",
    "typed_engine_names",
]

#: Engine names -> "module:SPEC".
ENGINES: dict[str, str] = {
    "minibatch": "shoal.engines.minibatch:SPEC",
    "averaging": "shoal.engines.averaging:SPEC",
    "hec": "shoal.engines.hec:SPEC",
    "fullgraph": "shoal.engines.fullgraph:SPEC",
    "disagg": "shoal.engines.disagg:SPEC",
}

#: the variable naming extra engines for one run (``name=module:SPEC,...``)
ENV_VAR = "SHOAL_ENGINES"


def _registered() -> dict[str, str]:
    """:data:`ENGINES`, then the ``shoal.engines`` entry points, then ``SHOAL_ENGINES``."""
    out = dict(ENGINES)
    for ep in entry_points(group="shoal.engines"):
        out.setdefault(ep.name, ep.value)
    for item in filter(None, (s.strip() for s in os.environ.get(ENV_VAR, "").split(","))):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise ShoalInputError(
                f"bad {ENV_VAR} entry {item!r}", fix="write name=package.module:SPEC"
            )
        out[name.strip()] = target.strip()
    return out


def engine_names() -> list[str]:
    """Every registered engine's name, the built-in ones first."""
    return list(_registered())


def get_spec(name: str) -> EngineSpec:
    """The spec registered as ``name`` (ShoalInputError listing the valid names)."""
    target = _registered().get(name)
    if target is None:
        raise ShoalInputError(
            f"unknown engine {name!r}", fix=f"valid engines: {', '.join(engine_names())}"
        )
    spec = load_object(target)
    if not isinstance(spec, EngineSpec) or spec.name != name:
        raise ShoalInputError(
            f"{target} is not the EngineSpec of engine {name!r}",
            fix="point the registry entry at the engine package's SPEC",
        )
    return spec


def link_engine_names() -> list[str]:
    """The engines that train ``--task link``."""
    return [n for n in engine_names() if get_spec(n).link_engine]


def typed_engine_names() -> list[str]:
    """The engines that train typed stores (node types and relations)."""
    return [n for n in engine_names() if get_spec(n).typed_engine]


def get_engine(name: str, task: str = "node", *, typed: bool = False) -> type:
    """The engine class registered as ``name`` for ``task`` on a typed store or not
    (ShoalInputError listing the valid names, or the engines that support the case)."""
    spec = get_spec(name)
    if typed:
        if task != "node" or spec.typed_engine is None:
            raise ShoalInputError(
                f"the {name} engine does not train a typed store"
                + (" for --task link" if task != "node" else "")
                + " yet",
                fix=f"use --engine {' or '.join(typed_engine_names())} (node classification), "
                "or train in one process with `shoal train --graph TYPED_GRAPH`",
            )
        return load_object(spec.typed_engine)
    if task == "link" and spec.link_engine is None:
        raise ShoalInputError(
            f"the {name} engine does not support --task link yet",
            fix=f"use --engine {' or '.join(sorted(link_engine_names()))}, or train in one "
            "process on the split graph (--graph DIR --task link)",
        )
    return spec.engine_class(task)
