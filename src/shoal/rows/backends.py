"""Row backends by name: what a file of rows is read through.

Every row shoal reads from a file goes through one :class:`~shoal.rows.source.RowSource`
made by :func:`~shoal.rows.opener.open_rows`; which class makes it is the run's *row backend*,
chosen by name as engines are (``--rows-backend NAME``, the ``[memory]`` table's
``rows_backend``):

- ``file`` (the default): :class:`~shoal.rows.direct.RowReader`, planned, coalesced
  ``O_DIRECT`` reads in parallel, never the page cache;
- ``mmap``: :class:`~shoal.rows.memory.MappedRows`, rows copied from the file's memory map
  (the page cache holds what was read; for data that fits in memory, or a file system without
  ``O_DIRECT``).

A backend is a callable ``make(file: RowFile, **kw) -> RowSource`` (``kw``: ``threads``,
``merge_gap``, ``direct``; ignore what does not apply). Others register without touching
shoal: an entry point of the group ``shoal.row_backends`` (``name = "package.module:make"``),
or for one run the environment variable ``SHOAL_ROW_BACKENDS="name=package.module:make,..."``,
which the processes ``torchrun`` starts inherit, so every rank reads through the same backend.
The process's backend is set once by the trainer or the engine (:func:`use_row_backend`); a
name that is not registered is refused with the valid ones.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from shoal.errors import ShoalInputError

__all__ = [
    "DEFAULT_ROW_BACKEND",
    "ROW_BACKENDS",
    "current_row_backend",
    "get_row_backend",
    "row_backend_names",
    "use_row_backend",
]

#: the backends shoal ships, by name: ``"module:callable"`` imported on use
ROW_BACKENDS: dict[str, str] = {
    "file": "shoal.rows.direct:RowReader",
    "mmap": "shoal.rows.memory:MappedRows",
}
#: the backend a process reads through until told otherwise
DEFAULT_ROW_BACKEND = "file"
#: the environment variable naming extra backends (``name=module:callable,...``)
ENV = "SHOAL_ROW_BACKENDS"

_current = DEFAULT_ROW_BACKEND


def _registered() -> dict[str, str]:
    """Every backend: shoal's, the entry points', then the environment's (later wins)."""
    out = dict(ROW_BACKENDS)
    for ep in entry_points(group="shoal.row_backends"):
        out[ep.name] = ep.value
    for item in filter(None, os.environ.get(ENV, "").split(",")):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise ShoalInputError(
                f"{ENV} entry {item!r} is not name=package.module:callable",
                fix=f"set {ENV}=name=package.module:callable[,...]",
            )
        out[name.strip()] = target.strip()
    return out


def row_backend_names() -> list[str]:
    """The names ``--rows-backend`` accepts."""
    return sorted(_registered())


def get_row_backend(name: str) -> Callable[..., Any]:
    """The backend ``name``'s maker; an unknown name raises :class:`ShoalInputError` listing
    the valid ones."""
    targets = _registered()
    if name not in targets:
        raise ShoalInputError(
            f"unknown row backend {name!r}",
            fix=f"use --rows-backend {' or '.join(sorted(targets))}, or register it "
            f"(entry point group shoal.row_backends, or {ENV})",
        )
    module, _, attr = targets[name].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ShoalInputError(
            f"cannot load the row backend {name!r} ({targets[name]}): {e}",
            fix="check the module is importable from this environment",
        ) from None


def use_row_backend(name: str) -> None:
    """Read this process's row files through ``name`` from now on (checked here)."""
    global _current
    get_row_backend(name)
    _current = name


def current_row_backend() -> str:
    """The name of the backend this process reads through."""
    return _current
