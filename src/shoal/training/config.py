"""``TrainConfig``: a run's configuration as a tree of per-component sections (torchtitan's
``JobConfig`` shape), and the flat option names the command line and TOML files use.

The tree's top level holds the task, the hyper-parameter preset and one section per
component (:data:`SECTIONS`, ``engine``: :class:`~shoal.training.engine_config.EngineConfig`,
``link``: :class:`~shoal.training.link_config.LinkConfig`). Each section validates its own
values once; the tree fills the values left unset from the preset.

Every option also has a flat name (the ``shoal train`` flag without its dashes, the key of a
TOML ``[train]`` table): :data:`FLAT` says where each lives in the tree.
:meth:`TrainConfig.from_options` builds the tree from flat names;
:func:`shoal.engines.config.read_config` (which also knows every engine's own options) is the
reader the CLI, TOML files and the launcher go through.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from shoal.errors import ShoalInputError
from shoal.training.engine_config import EngineConfig
from shoal.training.link_config import LinkConfig
from shoal.training.presets import PRESETS, preset_defaults
from shoal.training.sections import (
    CheckpointConfig,
    EvalConfig,
    MemoryConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    SamplingConfig,
)

__all__ = [
    "FLAT",
    "PRESETS",
    "CheckpointConfig",
    "EngineConfig",
    "EvalConfig",
    "LinkConfig",
    "MemoryConfig",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "SamplingConfig",
    "TrainConfig",
    "flatten_config",
    "preset_defaults",
]

#: per section, its options' flat names (``flat=field`` where the field is named otherwise)
_FLAT_NAMES = {
    "model": "model=name model_factory=factory type_embeddings hidden heads dropout "
    "normalize_features",
    "optim": "epochs min_steps lr weight_decay patience",
    "sampling": "fanouts fanouts_order batch_size",
    "eval": "eval_every=every eval_test=test eval_batch_size=batch_size eval_halo=halo "
    "eval_fanouts=fanouts",
    "memory": "memory=limit io_threads pack_epochs cache_policy structure scratch_dir rows_backend",
    "checkpoint": "checkpoint_dir=dir resume",
    "run": "seed device threads progress metrics_file sample_on device_memory",
    "engine": "engine=name nproc plan dist_timeout max_restarts",
}
#: flat option name -> (section, field) of the tree
FLAT: dict[str, tuple[str, str]] = {
    name: (section, key or name)
    for section, names in _FLAT_NAMES.items()
    for name, _, key in (n.partition("=") for n in names.split())
}

#: section name -> its class (the ``engine`` and ``link`` sections excepted)
SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "optim": OptimConfig,
    "sampling": SamplingConfig,
    "eval": EvalConfig,
    "memory": MemoryConfig,
    "checkpoint": CheckpointConfig,
    "run": RunConfig,
}


@dataclass(kw_only=True)
class TrainConfig:
    """A training run's configuration, single-process and distributed.

    Args:
        task: ``"node"`` (node classification, default) or ``"link"`` (link prediction on a
            graph split by ``shoal data split-edges``; its options: ``link``).
        preset: where the hyper-parameters left unset (``None``) come from: ``"paper"``
            (default): the model's paper, 2 layers sampled (25, 10) as GraphSAGE's paper;
            ``"large"``: for large graphs, every model with 3 sampled hops (15, 10, 5), hidden
            256, lr 0.003, dropout 0.5, 20 epochs (:mod:`shoal.training.presets`; the resolved
            values are what the run records).
        model, optim, sampling, eval, memory, checkpoint, run: the sections (their classes
            list their options and defaults; default: each section's defaults).
        engine: the distributed engine and its options (``shoal train --store``; ignored by
            the single-process trainer): an :class:`EngineConfig` (``name``, ``nproc``,
            ``plan``, ``dist_timeout``, ``max_restarts``) or the chosen engine's subclass
            with its own options (default ``EngineConfig()``: ``minibatch``).
        link: the link-prediction task's options (default ``LinkConfig()``).
    """

    task: str = "node"
    preset: str = "paper"
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    run: RunConfig = field(default_factory=RunConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    link: LinkConfig = field(default_factory=LinkConfig)

    def __post_init__(self) -> None:
        if self.task not in ("node", "link"):
            raise ValueError(f"task must be 'node' or 'link', got {self.task!r}")
        for name, cls in (*SECTIONS.items(), ("engine", EngineConfig), ("link", LinkConfig)):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(
                    f"{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}"
                )
            # a copy: the preset fills this tree's sections, never a section object shared
            # with another tree
            setattr(self, name, copy.copy(getattr(self, name)))
        self._resolve_preset()
        self._check_eval_fanouts()

    def _check_eval_fanouts(self) -> None:
        ev = self.eval.fanouts
        if ev is None:
            return
        if self.task != "node":
            raise ValueError(
                "eval_fanouts is for node classification; the link task's evaluation ranks "
                "candidates with exact embeddings (drop --eval-fanouts)"
            )
        if self.sampling.fanouts is not None and len(ev) != self.num_layers:
            raise ValueError(
                f"eval_fanouts needs one fanout per layer: {len(ev)} given for "
                f"{self.num_layers} layers (fanouts {','.join(map(str, self.sampling.fanouts))})"
            )

    def _resolve_preset(self) -> None:
        """Fill the hyper-parameters left ``None`` from the preset."""
        if self.optim.min_steps is None and self.optim.epochs is not None:
            self.optim.min_steps = 0  # epochs given: exactly those
        for name, value in preset_defaults(self.model.name, self.preset, self.task).items():
            section, key = FLAT[name]
            if getattr(getattr(self, section), key) is None:
                setattr(getattr(self, section), key, value)
        self.sampling.fanouts_order = "hop-first"  # given fanouts are; the preset's too

    @property
    def num_layers(self) -> int:
        return self.sampling.num_layers

    def get(self, name: str) -> Any:
        """The value of the option with flat name ``name`` (:data:`FLAT`)."""
        section, key = FLAT[name]
        return getattr(getattr(self, section), key)

    def to_dict(self) -> dict[str, Any]:
        """The tree as nested dicts (JSON-serialisable; :meth:`from_dict` reads it back)."""
        d = asdict(self)
        d["sampling"]["fanouts"] = list(self.sampling.fanouts)
        if self.eval.fanouts is not None:
            d["eval"]["fanouts"] = list(self.eval.fanouts)
        d["engine"] = self.engine.to_dict()
        return d

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name (the engine's own options included; the link
        section's are the ``[link]`` table's)."""
        return {
            k: v for k, v in flatten_config(self.to_dict()).items() if not k.startswith("link_")
        }

    @classmethod
    def from_options(cls, *, origin: str = "config", **options: Any) -> TrainConfig:
        """Build from option values: flat names (:data:`FLAT`), a whole section (``model=
        ModelConfig(...)`` or a mapping of its fields), ``task``, ``preset``, ``engine`` (a
        name, a mapping of the shared engine options or an :class:`EngineConfig`) and
        ``link`` (a mapping or a :class:`LinkConfig`). Unknown names and bad values raise
        ShoalInputError naming ``origin``; an engine's own options need
        :func:`shoal.engines.config.read_config`."""
        top: dict[str, Any] = {}
        parts: dict[str, dict[str, Any]] = {s: {} for s in (*SECTIONS, "engine", "link")}
        for name, value in options.items():
            if name in ("task", "preset"):
                top[name] = value
            elif name in parts and isinstance(value, dict):
                parts[name].update(value)
            elif name in parts and not (name in FLAT and _is_value(value)):
                top[name] = value  # a section object
            elif name in FLAT:
                section, key = FLAT[name]
                parts[section][key] = value
            else:
                valid = sorted({*FLAT, "task", "preset", "link", *SECTIONS})
                raise ShoalInputError(
                    f"unknown option {name!r}", path=origin, fix=f"valid: {', '.join(valid)}"
                )
        try:
            for section, values in parts.items():
                if not values:
                    continue
                if section in top:
                    raise ValueError(f"{section} given both as a section and as options")
                cls_ = {**SECTIONS, "engine": EngineConfig, "link": LinkConfig}[section]
                top[section] = cls_(**values)
            return cls(**top)
        except (TypeError, ValueError) as e:
            raise ShoalInputError(str(e), path=origin) from None

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, origin: str = "config") -> TrainConfig:
        """Build from :meth:`to_dict`'s nested dicts or from flat option names."""
        return cls.from_options(origin=origin, **d)


def _is_value(x: Any) -> bool:
    """An option's value (the flat ``model``, ``memory`` or ``engine``), not a section."""
    return x is None or isinstance(x, str | int | float)


def flatten_config(d: dict[str, Any]) -> dict[str, Any]:
    """A run JSON's ``config`` by flat option names: the tree (:meth:`TrainConfig.to_dict`,
    plus the settings the run added at the top level) flattened through :data:`FLAT`, the
    engine's and the link task's options under their own names; a flat record (runs written
    before the tree) is returned as it is."""
    if not isinstance(d.get("model"), dict):
        return dict(d)
    out = {k: v for k, v in d.items() if k not in (*SECTIONS, "engine", "link")}
    for name, (section, key) in FLAT.items():
        part = d.get(section)
        if isinstance(part, dict) and key in part:
            out[name] = part[key]
    engine = d.get("engine")
    if isinstance(engine, dict):
        out.update({k: v for k, v in engine.items() if k != "name"})
    link = d.get("link")
    if isinstance(link, dict):
        out.update({f"link_{k}": v for k, v in link.items() if f"link_{k}" not in out})
    return out
