"""Reading what a report shows: run results (``shoal train --json``) and a store's parts.

A run file is the JSON of a :class:`~shoal.training.result.RunResult` (``to_json``): top-level
numbers (``engine``, ``world_size``, ``val_accuracy`` or ``val_mrr``, ...), ``config`` (every
setting) and ``history``, one record per epoch (``loss``, ``seconds``, ``time_split``, optional
``comm``, ``io``, ``hec``, ``disagg`` and the validation metric at evaluated epochs). Only
``engine``, ``epochs`` and ``history`` are required: a plot whose fields a run lacks skips that
run and says so.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from shoal.errors import ShoalInputError
from shoal.training.config import flatten_config

__all__ = [
    "REQUIRED_KEYS",
    "Run",
    "StoreParts",
    "check_run",
    "load_run",
    "load_runs",
    "load_store",
    "number",
    "unique_labels",
]

#: Keys a run file must have to be read as a run result.
REQUIRED_KEYS = ("engine", "epochs", "history")

RUN_FIX = "pass the JSON that `shoal train ... --json FILE` writes"


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (missing, None, NaN, not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


@dataclass(kw_only=True)
class Run:
    """One run's result, as read from its JSON.

    Attributes:
        label: a short name unique among the runs of a report (the file's stem by default).
        data: the RunResult JSON.
        path: the file it was read from (None for a result handed over in memory).
    """

    label: str
    data: dict[str, Any]
    path: Path | None = None
    history: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.history = [r for r in self.data.get("history") or [] if isinstance(r, dict)]

    @property
    def engine(self) -> str:
        return str(self.data.get("engine", "?"))

    @property
    def world_size(self) -> int:
        return int(number(self.data.get("world_size")) or 1)

    @property
    def metric(self) -> str:
        """The selection metric: ``accuracy`` or ``mrr`` (link prediction)."""
        return str(self.data.get("metric") or "accuracy")

    @property
    def legend(self) -> str:
        """The run's name in plots: label, engine and processes."""
        procs = f"{self.world_size} proc" if self.world_size > 1 else "1 process"
        engine = "" if self.label == self.engine else f"{self.engine}, "
        return f"{self.label} ({engine}{procs})"

    def final(self, split: str) -> float | None:
        """The best-validation weights' ``split`` (``val``/``test``) metric."""
        return number(self.data.get(f"{split}_{self.metric}"))

    def epochs(self) -> list[int]:
        """The epoch number of each record (1-based; position when a record has none)."""
        return [int(number(r.get("epoch")) or i + 1) for i, r in enumerate(self.history)]

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """Epochs and values of the records where ``key`` is a number."""
        xs, ys = [], []
        for e, r in zip(self.epochs(), self.history, strict=True):
            v = number(r.get(key))
            if v is not None:
                xs.append(e)
                ys.append(v)
        return xs, ys

    def epoch_seconds(self) -> list[float]:
        """Seconds of each epoch that records them."""
        return self.series("seconds")[1]

    def median_epoch_seconds(self) -> float | None:
        secs = self.epoch_seconds()
        return median(secs) if secs else number(self.data.get("seconds_per_epoch"))

    def total_seconds(self) -> float | None:
        """Training epochs plus evaluation (what the result records; not launch or loading)."""
        secs = self.epoch_seconds()
        train = sum(secs) if secs else None
        if train is None:
            per, n = number(self.data.get("seconds_per_epoch")), number(self.data.get("epochs"))
            train = per * n if per is not None and n is not None else None
        if train is None:
            return None
        return train + (number(self.data.get("eval_seconds")) or 0.0)

    @property
    def config(self) -> dict[str, Any]:
        """The run's options by flat name (the recorded tree flattened; older flat records
        as they are)."""
        c = self.data.get("config")
        return flatten_config(c) if isinstance(c, dict) else {}

    @property
    def model(self) -> str:
        c = self.config
        return str(c.get("model_factory") or c.get("model") or "?")

    @property
    def store(self) -> str | None:
        """The store trained on (distributed runs record it), or None."""
        s = self.data.get("store")
        return str(s) if s else None

    @property
    def dataset(self) -> str:
        """``graph NAME`` or ``store NAME`` (the directory's name), or ``?``."""
        if self.store:
            return f"store {Path(self.store).name}"
        g = self.data.get("graph")
        return f"graph {Path(str(g)).name}" if g else "?"


def _read(path: Path) -> Any:
    if not path.exists():
        raise ShoalInputError("run file not found", path=path, fix=RUN_FIX)
    if path.is_dir():
        raise ShoalInputError("a directory, not a run file", path=path, fix=RUN_FIX)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ShoalInputError(f"not a JSON file ({e})", path=path, fix=RUN_FIX) from None


def check_run(data: Any, *, path: object) -> dict[str, Any]:
    """``data`` if it looks like a RunResult JSON, else a ShoalInputError naming ``path``."""
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ShoalInputError(
            f"not a run result (a JSON {kind}, not an object)", path=path, fix=RUN_FIX
        )
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ShoalInputError(
            f"not a run result: no {', '.join(repr(k) for k in missing)}", path=path, fix=RUN_FIX
        )
    if not isinstance(data["history"], list):
        raise ShoalInputError("not a run result: 'history' is not a list", path=path, fix=RUN_FIX)
    return data


def load_run(path: str | os.PathLike, *, label: str | None = None) -> Run:
    """Read and check one run file (ShoalInputError naming it when it is not a run result)."""
    p = Path(path)
    return Run(label=label or p.stem, data=check_run(_read(p), path=p), path=p)


def load_runs(paths: Sequence[str | os.PathLike]) -> list[Run]:
    """Read run files, labelled by their stems (with parent folders where stems repeat)."""
    ps = [Path(p) for p in paths]
    if not ps:
        raise ShoalInputError("no run file given", fix=RUN_FIX)
    labels = unique_labels(ps)
    return [load_run(p, label=lab) for p, lab in zip(ps, labels, strict=True)]


def unique_labels(paths: Sequence[Path]) -> list[str]:
    """Each path's stem, prefixed by as many parent folders as it takes to tell them apart
    (and numbered when even the full paths repeat)."""
    for depth in range(1, max((len(p.parts) for p in paths), default=1) + 1):
        labels = ["/".join(p.with_suffix("").parts[-depth:]) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{p.stem}#{i + 1}" for i, p in enumerate(paths)]


@dataclass(kw_only=True)
class StoreParts:
    """Per-part sizes of a store, from its ``meta.json``.

    Attributes:
        path: the store directory.
        core, halo, edges: per part: core nodes (owned), halo nodes (in-neighbours owned by
            another part, held as copies) and in-edges of the core nodes.
    """

    path: Path
    core: list[int]
    halo: list[int]
    edges: list[int]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def num_parts(self) -> int:
        return len(self.core)

    def halo_fraction(self) -> list[float]:
        """Per part: halo nodes / (core + halo nodes), the share of its nodes that are copies."""
        return [h / (c + h) if c + h else 0.0 for c, h in zip(self.core, self.halo, strict=True)]


def load_store(path: str | os.PathLike) -> StoreParts:
    """Per-part sizes of the store at ``path`` (reads ``meta.json`` only)."""
    from shoal.store.reader import Store

    store = Store.open(path)
    parts = [store.part(i) for i in range(store.num_parts)]
    return StoreParts(
        path=Path(path),
        core=[p.num_core for p in parts],
        halo=[p.num_halo for p in parts],
        edges=[p.num_edges for p in parts],
    )
