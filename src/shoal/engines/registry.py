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

from shoal.engines.spec import EngineSpec, ReportField, load_object
from shoal.errors import ShoalInputError

__all__ = [
    "ENGINES",
    "demo_specs",
    "engine_names",
    "get_engine",
    "get_spec",
    "report_fields",
    "supporting",
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


def supporting(
    task: str = "node", *, typed: bool = False, factory: bool = False, device: str | None = None
) -> list[str]:
    """The engines that support the case (:meth:`EngineSpec.supports`), in registry order."""
    case = {"typed": typed, "factory": factory, "device": device}
    return [n for n in engine_names() if get_spec(n).supports(task, **case)]


def report_fields() -> tuple[ReportField, ...]:
    """The fields of their own that the engines' epoch records hold (``shoal report``), in
    registry order, one per key."""
    out: dict[str, ReportField] = {}
    for n in engine_names():
        for f in get_spec(n).report_fields:
            out.setdefault(f.key, f)
    return tuple(out.values())


def demo_specs() -> list[EngineSpec]:
    """The specs of the engines ``shoal demo`` trains (those with a ``demo`` step)."""
    return [s for s in map(get_spec, engine_names()) if s.demo is not None]


#: the tasks in words, for refusals
_TASK_WORDS = {"node": "node classification", "link": "link prediction"}


def _use(names: list[str], other: str, task: str | None = None) -> str:
    """A refusal's fix: ``use --engine A or B (task), or other`` (``other`` when none can)."""
    if not names:
        return other
    return f"use --engine {' or '.join(names)}" + (f" ({task})" if task else "") + f", or {other}"


def get_engine(
    name: str,
    task: str = "node",
    *,
    typed: bool = False,
    factory: bool = False,
    device: str | None = None,
) -> type:
    """The engine class registered as ``name`` for ``task``, after the one check of the
    case against its spec's support flags (:meth:`EngineSpec.supports`): a typed store
    (``typed``), a ``--model-factory`` model (``factory``), ``device`` (``"cpu"``,
    ``"cuda"``, ``"cuda:i"``; None: not checked). ShoalInputError lists the valid names, or
    names the engines that support what this one refuses."""
    spec = get_spec(name)
    if typed and not spec.supports(task, typed=True):
        can = supporting(task, typed=True)
        shown = task if can else "node"  # none trains the task on typed stores: say who can
        raise ShoalInputError(
            f"the {name} engine does not train a typed store"
            + (" for --task link" if task != "node" else "")
            + " yet",
            fix=_use(
                can or supporting("node", typed=True),
                "train in one process with `shoal train --graph TYPED_GRAPH`",
                _TASK_WORDS[shown],
            ),
        )
    if task not in spec.tasks:
        raise ShoalInputError(
            f"the {name} engine does not support --task {task} yet",
            fix=_use(
                supporting(task),
                f"train in one process on the split graph (--graph DIR --task {task})",
            ),
        )
    if factory and not spec.supports(task, typed=typed, factory=True):
        can = supporting(task, typed=typed, factory=True)
        raise ShoalInputError(
            f"the {name} engine"
            + (f" (--task {task})" if task != "node" else "")
            + " reaches inside shoal's own models layer by layer; it cannot run a "
            "--model-factory model",
            fix="use --model (sage, gcn, gat, gin, sgc)"
            + (f", or an engine that takes any model: {', '.join(can)}" if can else ""),
        )
    if device is not None and not spec.supports(task, typed=typed, factory=factory, device=device):
        can = supporting(task, typed=typed, factory=factory, device=device)
        raise ShoalInputError(
            f"the {name} engine does not compute on --device {device}",
            fix=f"use --device {' or '.join(spec.devices)}"
            + (f", or --engine {' or '.join(can)}" if can else ""),
        )
    return spec.engine_class(task)
