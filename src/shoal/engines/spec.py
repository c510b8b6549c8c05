"""``EngineSpec``: everything an engine registers, in one object its package exports.

An engine is one folder ``shoal/engines/<name>/`` whose ``__init__.py`` defines ``SPEC``; one
line of :mod:`shoal.engines.registry` (or of a plugin's entry point) names it. From the spec
the rest of shoal finds the engine's class (imported on use), its configuration class, its
``shoal train`` flags (grouped under the engine's name in ``--help``) and its cost estimate for
``--engine auto``.
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

__all__ = ["EngineSpec", "load_object"]


def load_object(target: str) -> Any:
    """The object named ``"package.module:attribute"``."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """One engine as the registry knows it.

    Args:
        name: the name ``--engine`` takes (required).
        summary: one line for ``shoal train --help``: what the engine does and its paper
            (required).
        engine: ``"module:Class"`` of its :class:`~shoal.engines.base.Engine` subclass for
            node classification, imported only when a run uses it (required).
        link_engine: ``"module:Class"`` of its link-prediction variant (default None: the
            engine does not train ``--task link``).
        typed_engine: ``"module:Class"`` of its variant for typed stores (node types and
            relations; default None: the engine refuses a typed store).
        config: its configuration class, an :class:`EngineConfig` subclass whose fields are
            its options (default :class:`EngineConfig`: no options of its own).
        add_arguments: adds its flags to an argument group (their ``dest`` are ``config``
            fields, their defaults None so that TOML and the defaults fill the rest; default
            None: no flags).
        estimate: its estimated training epoch for ``--engine auto`` (seconds per phase and
            ``epoch_s``; None when it cannot estimate the case; default None: never chosen
            automatically).
        excluded: why it cannot run a configuration (None when it can; default: always can).
    """

    name: str
    summary: str
    engine: str
    link_engine: str | None = None
    typed_engine: str | None = None
    config: type[EngineConfig] = EngineConfig
    add_arguments: Callable[[argparse._ArgumentGroup], None] | None = None
    estimate: Callable[[CostInputs], dict[str, float] | None] | None = None
    excluded: Callable[[CostInputs], str | None] | None = None

    def engine_class(self, task: str = "node") -> type:
        """The engine class for ``task`` (``"node"`` or ``"link"``)."""
        target = self.engine if task == "node" else self.link_engine
        if target is None:
            raise ValueError(f"the {self.name} engine does not train --task {task}")
        return load_object(target)

    def make_config(self, options: dict[str, Any]) -> EngineConfig:
        """Its configuration from option values (the shared ones and its own)."""
        return self.config(**{**options, "name": self.name})
