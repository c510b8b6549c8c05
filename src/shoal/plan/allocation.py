"""Workload allocation of SDT-GNN ("p from memory budget"): ``p = Q`` when ``S / Q <= M - T``,
else ``p = ceil(S / (M - T))``; part ``j`` goes to worker ``j mod Q``. ``S`` data bytes, ``M``
memory per worker, ``T`` the reserve (default 2/3 of ``M`` on accelerators, ``max(512 MiB,
M / 4)`` on CPU). With ``--store`` the number of parts is the store's (its largest part must
fit, ``p >= Q``); with ``--graph`` it recommends ``p`` for ``shoal partition --parts``. The
rule, the reserve's reasons and the plan's JSON: docs/store.md#planner-shoal-plan-shoalplan.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shoal.errors import ShoalInputError
from shoal.utils.featdtype import feature_dtype

__all__ = ["Config", "Plan", "default_reserve", "graph_data_bytes", "make_plan"]

CPU_RESERVE_MIN = 512 * 2**20
CPU_RESERVE_FRACTION = 0.25
GPU_RESERVE_FRACTION = 2 / 3


@dataclass(kw_only=True)
class Config:
    """Planner options.

    Args:
        workers: number of workers ``Q`` (>= 1; required).
        memory_per_worker: memory ``M`` of one worker in bytes (required, > 0).
        reserve: reserve ``T`` in bytes; None = :func:`default_reserve` (default None).
        accelerator: plan for accelerators; None = ``torch.cuda.is_available()`` (default None).
    """

    workers: int
    memory_per_worker: int
    reserve: int | None = None
    accelerator: bool | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ShoalInputError(f"--workers must be >= 1, got {self.workers}")
        if self.memory_per_worker <= 0:
            raise ShoalInputError(f"--memory-per-worker must be > 0, got {self.memory_per_worker}")
        if self.reserve is not None and self.reserve < 0:
            raise ShoalInputError(f"--reserve must be >= 0, got {self.reserve}")


@dataclass
class Plan:
    """A workload plan (written as JSON for the engines)."""

    workers: int
    num_parts: int
    memory_per_worker: int
    reserve: int
    budget: int
    data_bytes: int
    part_bytes: list[int]
    assignment: list[list[int]]
    device: str
    source: dict[str, Any]
    fits: bool
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = "shoal-plan"
        d["format_version"] = 1
        d["worker_of_part"] = [j % self.workers for j in range(self.num_parts)]
        return d


def _has_accelerator() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return bool(torch.cuda.is_available())


def default_reserve(memory_per_worker: int, accelerator: bool) -> int:
    """T: 2/3 of M on accelerators, ``max(512 MiB, M / 4)`` on CPU (see module docstring)."""
    if accelerator:
        return int(memory_per_worker * GPU_RESERVE_FRACTION)
    return int(max(CPU_RESERVE_MIN, memory_per_worker * CPU_RESERVE_FRACTION))


def graph_data_bytes(graph_path: str | os.PathLike) -> int:
    """S of a graph directory: features + labels + splits + structure (in-CSR: indptr int64
    plus one index per edge), computed from ``meta.json`` (nothing is read)."""
    from shoal.data.format import GraphDir

    g = GraphDir.open(graph_path)
    n, m = g.num_nodes, g.num_edges
    s = (n + 1) * 8 + m * g.edge_dtype.itemsize
    if g.feature_dim:
        s += n * feature_dtype(g.meta.get("feature_dtype")).row_bytes(int(g.feature_dim))
    if (g.path / "labels.npy").exists():
        s += n * 8
    s += 3 * n  # split masks
    return int(s)


def _cyclic(p: int, q: int) -> list[list[int]]:
    return [[j for j in range(p) if j % q == w] for w in range(q)]


def make_plan(
    config: Config,
    *,
    store: str | os.PathLike | None = None,
    graph: str | os.PathLike | None = None,
) -> Plan:
    """Plan from a store (its parts are given) or a graph directory (recommend ``p``)."""
    if (store is None) == (graph is None):
        raise ShoalInputError("give exactly one of --store or --graph")
    accel = _has_accelerator() if config.accelerator is None else config.accelerator
    q, mem = config.workers, config.memory_per_worker
    reserve = config.reserve if config.reserve is not None else default_reserve(mem, accel)
    budget = mem - reserve
    if budget <= 0:
        raise ShoalInputError(
            f"reserve T={reserve} bytes leaves no memory for graph data (M={mem})",
            fix="raise --memory-per-worker or lower --reserve",
        )
    notes: list[str] = []
    device = "accelerator" if accel else "cpu"
    if store is not None:
        from shoal.store.reader import Store

        st = Store.open(store)
        p = st.num_parts
        files = st.meta.get("files", {})
        part_bytes = [
            sum(v["bytes"] for k, v in files.items() if k.startswith(f"part_{i}/"))
            for i in range(p)
        ]
        data = int(sum(part_bytes))
        notes.append(
            f"the store fixes p = {p}; parts assigned cyclically (part j -> worker j mod Q)"
        )
        if p < q:
            raise ShoalInputError(
                f"the store has {p} parts but {q} workers: {q - p} workers would get no part",
                path=store,
                fix=f"use --workers {p} or fewer, or rebuild with `shoal partition --parts {q}`",
            )
        biggest = max(part_bytes) if part_bytes else 0
        fits = biggest <= budget
        if not fits:
            need = math.ceil(data / budget)
            notes.append(
                f"largest part ({biggest} bytes) exceeds the budget M - T = {budget} bytes; "
                f"re-partition with `shoal partition --parts {max(need, q)}`"
            )
        src = {"store": str(Path(store).resolve())}
    else:
        data = graph_data_bytes(graph)
        if data / q <= budget:
            p = q
        else:
            p = math.ceil(data / budget)
            notes.append(
                f"S / Q = {data / q:.0f} bytes exceeds M - T = {budget}: p = ceil(S / (M - T)) = {p}"
            )
        notes.append(f"recommended: `shoal partition {graph} --parts {p}`")
        notes.append("parts carry halo structure, so actual part sizes exceed S / p a little")
        part_bytes = [int(math.ceil(data / p))] * p
        fits = True
        src = {"graph": str(Path(graph).resolve())}
    return Plan(
        workers=q,
        num_parts=p,
        memory_per_worker=mem,
        reserve=int(reserve),
        budget=int(budget),
        data_bytes=int(data),
        part_bytes=part_bytes,
        assignment=_cyclic(p, q),
        device=device,
        source=src,
        fits=fits,
        notes=notes,
    )
