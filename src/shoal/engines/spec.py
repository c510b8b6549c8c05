"""``EngineSpec``: everything an engine registers, in one object its package exports.

An engine is one folder ``shoal/engines/<name>/`` whose ``__init__.py`` defines ``SPEC``; one
line of :mod:`shoal.engines.registry` (or of a plugin's entry point) names it. From the spec
the rest of shoal finds everything about the engine (:class:`EngineSpec`'s fields); what it
does not support is refused in one place (:func:`~shoal.engines.registry.get_engine`).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.training.engine_config import EngineConfig

if TYPE_CHECKING:
    from shoal.engines.costs import CostInputs

__all__ = ["DEVICES", "TASKS", "EngineSpec", "ReportField", "load_object"]

#: the tasks an engine may train: node classification, link prediction
TASKS = ("node", "link")
#: the kinds of device an engine's model may compute on (``--device``)
DEVICES = ("cpu", "cuda")


def load_object(target: str) -> Any:
    """The object named ``"package.module:attribute"``."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, kw_only=True)
class ReportField:
    """A field an engine adds to its epoch records, and what ``shoal report`` draws of it.

    Args:
        key: the record's key (required): a mapping, or with ``per_layer`` a list of
            mappings, one per layer (its ``"layer"`` names it).
        cache: the name of the cache whose ``"hit_rate"`` it holds, in the cache plot's
            legend (``", layer N"`` follows it with ``per_layer``; default None: no cache).
        caption: that cache as the cache plot's caption names it (default ``cache``).
        disk_bytes: whether its ``"bytes_read"`` counts bytes read from disk, drawn with the
            run's other reads (default False).
        per_layer: whether it is a list of one mapping per layer (default False).
    """

    key: str
    cache: str | None = None
    caption: str | None = None
    disk_bytes: bool = False
    per_layer: bool = False


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """One engine as the registry knows it.

    Args:
        name: the name ``--engine`` takes (required).
        summary: one line for ``shoal train --help``: what the engine does and its paper
            (required).
        engine: ``"module:Class"`` of its :class:`~shoal.engines.base.Engine` subclass,
            imported only when a run uses it (required). It trains every task of ``tasks``
            (the link task through :mod:`shoal.engines.linktask`), typed stores too when
            ``typed``.
        config: its configuration class, an :class:`EngineConfig` subclass whose fields are
            its options (default :class:`EngineConfig`: no options of its own); a run's
            ``Engine.options``.
        tasks: the tasks it trains, of :data:`TASKS` (default ``("node",)``).
        typed: whether it trains typed stores (node types and relations; default False).
        devices: the devices its model computes on, of :data:`DEVICES` (default both).
        factory_models: whether it runs a model built by ``--model-factory`` (default True;
            False: it reaches inside shoal's own models layer by layer).
        add_arguments: adds its flags to an argument group (their ``dest`` are ``config``
            fields, their defaults None so that TOML and the defaults fill the rest; default
            None: no flags).
        estimate: its estimated training epoch for ``--engine auto`` (seconds per phase and
            ``epoch_s``; None when it cannot estimate the case; default None: never chosen
            automatically).
        excluded: why it cannot run a configuration (None when it can; default: always can).
        report_fields: the fields of its own that its epoch records hold and ``shoal report``
            draws (default none).
        demo: what ``shoal demo``'s step training it says (default None: the demo leaves it
            out).
        demo_flags: the flags of its own ``shoal demo`` passes it (default none).
    """

    name: str
    summary: str
    engine: str
    config: type[EngineConfig] = EngineConfig
    tasks: tuple[str, ...] = ("node",)
    typed: bool = False
    devices: tuple[str, ...] = DEVICES
    factory_models: bool = True
    add_arguments: Callable[[argparse._ArgumentGroup], None] | None = None
    estimate: Callable[[CostInputs], dict[str, float] | None] | None = None
    excluded: Callable[[CostInputs], str | None] | None = None
    report_fields: tuple[ReportField, ...] = ()
    demo: str | None = None
    demo_flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [t for t in self.tasks if t not in TASKS] + [
            d for d in self.devices if d not in DEVICES
        ]
        if bad or not self.tasks:
            raise ValueError(
                f"engine {self.name!r}: tasks must be of {TASKS}, devices of {DEVICES}; got "
                f"tasks {self.tasks}, devices {self.devices}"
            )

    def supports(
        self,
        task: str = "node",
        *,
        typed: bool = False,
        factory: bool = False,
        device: str | None = None,
    ) -> bool:
        """Whether it trains ``task`` on a typed store (``typed``) or not, a
        ``--model-factory`` model (``factory``) or shoal's own, on ``device`` (``"cpu"``,
        ``"cuda"``, ``"cuda:i"``; None: any)."""
        if task not in self.tasks:
            return False
        if device is not None and device.partition(":")[0] not in self.devices:
            return False
        if task == "link" and factory:  # its evaluation runs shoal's layers one by one
            return False
        return (self.typed or not typed) and (self.factory_models or not factory)

    def engine_class(self, task: str = "node") -> type:
        """The engine class for ``task`` (``"node"`` or ``"link"``)."""
        if task not in self.tasks:
            raise ValueError(f"the {self.name} engine does not train --task {task}")
        return load_object(self.engine)

    def make_config(self, options: dict[str, Any]) -> EngineConfig:
        """Its configuration from option values (the shared ones and its own)."""
        return self.config(**{**options, "name": self.name})
