"""The shared partitioning pipeline behind ``shoal partition`` and the benchmark.

:func:`run_partition` runs one registered algorithm and then, whatever the algorithm:

1. checks its result (one owner in ``[0, p)`` per node; vertex-cut algorithms fill
   ``node_part`` with :func:`shoal.partition.vertexcut.owners_from_edge_parts`);
2. the balance post-pass (:mod:`shoal.partition.balance`): max/mean nodes and training nodes
   per part <= ``config.balance``;
3. ``config.refine_passes`` restreaming refinement passes (:mod:`shoal.partition.refine`)
   under the same capacities;
4. the streaming metrics (:mod:`shoal.partition.metrics`), seconds per phase and peak RSS.

``seconds_per_phase`` holds the algorithm's own phases (e.g. ``degrees``, ``clustering``),
``partition`` (the algorithm in total), ``balance``, ``refine`` and ``metrics``. For vertex-cut
algorithms ``edge_part`` stays the algorithm's raw edge assignment (its ``vertex_cut_rf`` is
reported); ``node_part`` is the owner after the balance and refinement passes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.balance import balance_assignment
from shoal.partition.base import Assignment, PartitionConfig, Partitioner, get_partitioner
from shoal.partition.metrics import partition_metrics
from shoal.partition.refine import refine_assignment
from shoal.utils.memory import peak_rss_bytes, return_freed_memory

__all__ = [
    "DEFAULT_ALGORITHM",
    "DEFAULT_OPTIONS",
    "DEFAULT_REFINE_PASSES",
    "PartitionResult",
    "check_num_parts",
    "run_partition",
]

#: The default configuration of ``shoal partition`` (no ``--algo``): the best streaming
#: configuration measured on the nine shared graphs of issue 3: GREM with windows of |V| edges
#: (so the window, like every other structure, is O(V)) followed by 4 restreaming refinement
#: passes, whose edge cut and replication factor come closest to METIS's and whose refinement
#: cuts clearly fewer edges than GREM alone (graphs and figures:
#: docs/measurements.md#partitioning).
DEFAULT_ALGORITHM = "grem"
DEFAULT_OPTIONS: dict[str, Any] = {
    "window_per_node": 1.0,
    "max_window_edges": 1 << 21,
    "edge_balance": 1.5,
}
DEFAULT_REFINE_PASSES = 4


@dataclass
class PartitionResult:
    """What :func:`run_partition` returns: the final assignment and its metrics dict."""

    assignment: Assignment
    metrics: dict[str, Any] = field(default_factory=dict)


def check_num_parts(graph: GraphDir, num_parts: int) -> None:
    """Raise :class:`ShoalInputError` unless ``1 <= num_parts <= graph.num_nodes``."""
    if graph.num_nodes == 0:
        raise ShoalInputError(
            "the graph has no nodes: nothing to partition",
            path=graph.path,
            fix="import a graph with at least one node",
        )
    if num_parts > graph.num_nodes:
        raise ShoalInputError(
            f"--parts {num_parts} is larger than the number of nodes ({graph.num_nodes})",
            path=graph.path,
            fix=f"use at most {graph.num_nodes} parts",
        )


def _validate(a: Assignment, graph: GraphDir, name: str) -> None:
    if a.node_part.shape != (graph.num_nodes,):
        raise RuntimeError(
            f"{name} returned node_part of shape {a.node_part.shape}, expected ({graph.num_nodes},)"
        )
    if graph.num_nodes and (a.node_part.min() < 0 or a.node_part.max() >= a.num_parts):
        raise RuntimeError(f"{name} returned a part id outside [0, {a.num_parts})")


def _train_mask(graph: GraphDir, train_mask: np.ndarray | None) -> np.ndarray | None:
    """The training nodes to balance: ``train_mask`` checked, else the graph's train split."""
    if train_mask is None and graph.split("train") is not None:
        train_mask = graph.mask("train")
    if train_mask is not None:
        train_mask = np.asarray(train_mask, dtype=bool)
        if train_mask.shape != (graph.num_nodes,):
            raise ShoalInputError(
                f"train_mask has shape {train_mask.shape}, expected ({graph.num_nodes},)"
            )
    return train_mask


def _post_passes(
    graph: GraphDir,
    node_part: np.ndarray,
    cfg: PartitionConfig,
    train_mask: np.ndarray | None,
    seconds: dict[str, float],
    show_progress: bool | None,
) -> tuple[np.ndarray, int, list[int]]:
    """The balance post-pass and ``cfg.refine_passes`` refinement passes, timed into
    ``seconds``, both moving nodes in ``node_part`` itself (one (N,) array in all, not a copy
    per pass). Returns (node_part, nodes moved by balance, nodes moved per refine pass)."""
    t0 = time.perf_counter()
    node_part, moved_balance = balance_assignment(
        graph,
        node_part,
        cfg.num_parts,
        balance=cfg.balance,
        train_mask=train_mask,
        chunk_edges=cfg.chunk_edges,
        copy=False,
    )
    seconds["balance"] = time.perf_counter() - t0
    moves: list[int] = []
    if cfg.refine_passes > 0:
        t0 = time.perf_counter()
        node_part, moves = refine_assignment(
            graph,
            node_part,
            cfg.num_parts,
            passes=cfg.refine_passes,
            balance=cfg.balance,
            train_mask=train_mask,
            block_edges=cfg.chunk_edges,
            edge_balance=cfg.edge_balance,
            show_progress=show_progress,
            copy=False,
        )
        seconds["refine"] = time.perf_counter() - t0
    return node_part, moved_balance, moves


def run_partition(
    graph: GraphDir | str | os.PathLike,
    name: str,
    config: PartitionConfig | None = None,
    *,
    train_mask: np.ndarray | None = None,
    metrics: bool = True,
    show_progress: bool | None = None,
    **options: Any,
) -> PartitionResult:
    """Partition ``graph`` with the registered algorithm ``name``.

    Args:
        graph: a :class:`GraphDir` or its path.
        name: registry name (``shoal.partition.base.REGISTRY``).
        config: the algorithm's Config; if None it is built from ``options``
            (e.g. ``num_parts=8, seed=1, refine_passes=2``).
        train_mask: bool (N,) training nodes to balance; default: the graph's train split
            when it has one.
        metrics: compute the streaming metrics (default true).
        show_progress: progress bars (default: when stderr is a terminal).

    Returns:
        :class:`PartitionResult` with the assignment (``seconds`` per phase filled in) and the
        metrics dict (keys of :func:`partition_metrics` plus algorithm, num_parts, num_nodes,
        num_edges, seconds, seconds_per_phase, peak_rss_bytes, moved_by_balance,
        moved_by_refine, in_memory).
    """
    if not isinstance(graph, GraphDir):
        graph = GraphDir.open(graph)
    part: Partitioner = get_partitioner(name, **(config.to_dict() if config else options))
    cfg = part.config
    check_num_parts(graph, cfg.num_parts)
    train_mask = _train_mask(graph, train_mask)

    # freed window buffers and METIS's arrays go back to the system instead of staying in
    # glibc's heap for the rest of the run (docs/measurements.md#the-memory-plan)
    return_freed_memory()
    t_all = time.perf_counter()
    a = part.partition(graph, train_mask)
    _validate(a, graph, name)
    seconds = dict(a.seconds)
    seconds.setdefault("partition", time.perf_counter() - t_all)
    node_part, edge_part = a.node_part, a.edge_part
    del a  # the post-passes move nodes in node_part itself: no second (N,) array
    node_part, moved_balance, moves = _post_passes(
        graph, node_part, cfg, train_mask, seconds, show_progress
    )
    total = time.perf_counter() - t_all

    a = Assignment(
        node_part=node_part,
        num_parts=cfg.num_parts,
        algorithm=part.name,
        params=cfg.to_dict(),
        edge_part=edge_part,
        seconds=seconds,
    )
    m: dict[str, Any] = {
        "algorithm": part.name,
        "num_parts": cfg.num_parts,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "in_memory": bool(part.in_memory),
        "vertex_cut": bool(part.vertex_cut),
        "refine_passes": cfg.refine_passes,
        "moved_by_balance": int(moved_balance),
        "moved_by_refine": moves,
    }
    if metrics:
        t0 = time.perf_counter()
        m.update(
            partition_metrics(
                graph,
                a.node_part,
                cfg.num_parts,
                edge_part=a.edge_part,
                train_mask=train_mask,
                chunk_edges=cfg.chunk_edges,
            )
        )
        seconds["metrics"] = time.perf_counter() - t0
    m["seconds"] = total
    m["seconds_per_phase"] = seconds
    m["peak_rss_bytes"] = peak_rss_bytes()
    return PartitionResult(assignment=a, metrics=m)
