"""Reading a run's configuration: option values (flags, a TOML table, a run's JSON) -> the
:class:`~shoal.training.TrainConfig` tree, with the chosen engine's own configuration class
in ``config.engine``. The one reader (:func:`read_config`): engine options are found by name in
the registered engines' configuration classes (:mod:`shoal.engines.registry`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from shoal.engines.registry import engine_names, get_spec
from shoal.errors import ShoalInputError
from shoal.training import TrainConfig
from shoal.training.engine_config import EngineConfig
from shoal.utils.io import load_toml

__all__ = [
    "AutoConfig",
    "engine_option_owners",
    "read_config",
    "read_config_file",
    "resolve_auto",
]


@dataclass(kw_only=True)
class AutoConfig(EngineConfig):
    """``--engine auto``: the shared options, and the engine options given (kept until the
    engine is chosen, then applied to its configuration: :func:`resolve_auto`).

    Args:
        given: engine option name -> value, each an option of some registered engine
            (default empty).
    """

    engine: ClassVar[str] = "auto"

    name: str = "auto"
    given: dict[str, Any] = field(default_factory=dict)


def engine_option_owners() -> dict[str, list[str]]:
    """Each engine option's name -> the engines that have it (shared options excluded)."""
    owners: dict[str, list[str]] = {}
    for name in engine_names():
        for key in get_spec(name).config.own_fields():
            owners.setdefault(key, []).append(name)
    return owners


def _engine_config(name: str, values: dict[str, Any], origin: str) -> EngineConfig:
    """The configuration of engine ``name`` from ``values`` (shared and own options)."""
    shared = {k: values.pop(k) for k in EngineConfig.shared_fields() if k in values}
    shared.pop("name", None)
    owners = engine_option_owners()
    for key in values:
        if key not in owners:
            raise ShoalInputError(f"unknown engine option {key!r}", path=origin)
    if name == "auto":
        return AutoConfig(**shared, given=dict(values))
    spec = get_spec(name)
    own = set(spec.config.own_fields())
    for key in values:
        if key not in own:
            raise ShoalInputError(
                f"option {key!r} belongs to the {' and '.join(owners[key])} engine, not to {name}",
                path=origin,
                fix=f"drop it, or train with --engine {owners[key][0]}",
            )
    return spec.make_config({**shared, **values})


def read_config(options: Mapping[str, Any], *, origin: str = "config") -> TrainConfig:
    """The run's :class:`TrainConfig` from option values: top-level training options by
    name, the engine's under their flag names (``hec_size``, ``nproc``, ...) or as one
    ``engine`` mapping (``{"name": "hec", "hec_size": ...}``, as a run JSON records it), or
    an ``engine`` given as a name or an :class:`EngineConfig`. Unknown options and bad
    values raise ShoalInputError naming ``origin``."""
    opts = dict(options)
    engine = opts.pop("engine", None)
    if isinstance(engine, EngineConfig):
        engine = engine.to_dict()
    if isinstance(engine, Mapping):
        values = dict(engine)
        name = str(values.pop("name", "minibatch"))
        values.update(values.pop("given", None) or {})  # an AutoConfig's, as recorded
    else:
        values, name = {}, str(engine or "minibatch")
    for key in [*EngineConfig.shared_fields(), *engine_option_owners()]:
        if key in opts and key != "name":
            values[key] = opts.pop(key)
    try:
        cfg = _engine_config(name, values, origin)
    except (TypeError, ValueError) as e:
        raise ShoalInputError(str(e), path=origin) from None
    return TrainConfig.from_options(origin=origin, **opts, engine=cfg)


def read_config_file(
    path: str | os.PathLike, overrides: Mapping[str, Any] | None = None
) -> TrainConfig:
    """:func:`read_config` of a TOML file's ``[train]`` table (or its top level, without the
    other stages' tables) and its ``[link]`` table, ``overrides`` (the flags given, their
    ``link`` mapping too) winning."""
    data = load_toml(path)
    table = dict(data.get("train", data))
    link = {**dict(table.pop("link", None) or {}), **dict(data.get("link") or {})}
    given = dict(overrides or {})
    link.update(given.pop("link", None) or {})
    table.update(given)
    if link:
        table["link"] = link
    return read_config(table, origin=str(path))


def resolve_auto(config: TrainConfig, chosen: str) -> TrainConfig:
    """``config`` with ``--engine auto`` replaced by the ``chosen`` engine's configuration
    (the shared options kept, the options given for it applied, the others dropped)."""
    from dataclasses import replace

    opts = config.engine
    given = opts.given if isinstance(opts, AutoConfig) else {}
    own = set(get_spec(chosen).config.own_fields())
    values = {k: v for k, v in given.items() if k in own}
    shared = {k: v for k, v in opts.shared().items() if k != "name"}
    return replace(config, engine=get_spec(chosen).make_config({**shared, **values}))
