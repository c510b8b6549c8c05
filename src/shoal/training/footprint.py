"""The memory a training process needs beside its data, measured on the process itself.

The memory plan (:func:`~shoal.rows.budget.plan_budget`) gives the feature cache, the windows
and the graph structure what is left after a *reserve*. That reserve is measured, not
guessed: the process's anonymous resident memory once torch, numba and the model are loaded
(:func:`~shoal.rows.budget.process_footprint`), plus what training adds to it later: the
gradients and the optimizer state of the model's parameters, and the activations of one batch
from its largest possible shape (:func:`~shoal.rows.budget.batch_rows`, times
:data:`~shoal.rows.budget.ACTIVATION_FACTOR`).
"""

from __future__ import annotations

from torch import nn

from shoal.rows.budget import activation_bytes, batch_rows, reserve_for

__all__ = ["OPTIMIZER_STATES", "step_activations", "training_reserve", "working_bytes"]

#: tensors the optimizer keeps per parameter (Adam: the two moment estimates).
OPTIMIZER_STATES = 2


def step_activations(
    *, fanouts: tuple[int, ...], batch_size: int, num_nodes: int, in_dim: int, hidden: int
) -> tuple[int, int]:
    """``(bytes, bytes per input row)`` of one training step's activations: for the largest
    batch ``fanouts`` and ``batch_size`` allow (:func:`~shoal.rows.budget.batch_rows`), and
    per row of a batch (to refit them to the batches sampled:
    :meth:`~shoal.rows.budget.BudgetPlan.fit_activations`)."""
    rows = batch_rows(tuple(fanouts), int(batch_size), int(num_nodes))
    return activation_bytes(rows, in_dim + hidden), activation_bytes(1, in_dim + hidden)


def working_bytes(
    model: nn.Module | None,
    *,
    fanouts: tuple[int, ...],
    batch_size: int,
    num_nodes: int,
    in_dim: int,
    hidden: int,
    optimizer_states: int = OPTIMIZER_STATES,
) -> int:
    """Bytes one training step adds to the process beyond what it holds before the first
    batch: the parameters' gradients and ``optimizer_states`` copies of them (created at the
    first step), and the activations of a batch of the most rows ``fanouts`` and
    ``batch_size`` may sample, each row the ``in_dim`` input features plus a ``hidden``
    layer's width."""
    params = 0
    if model is not None:
        params = sum(p.numel() * p.element_size() for p in model.parameters())
    act, _ = step_activations(
        fanouts=fanouts, batch_size=batch_size, num_nodes=num_nodes, in_dim=in_dim, hidden=hidden
    )
    return int(params) * (1 + int(optimizer_states)) + act


def training_reserve(
    model: nn.Module | None,
    *,
    fanouts: tuple[int, ...],
    batch_size: int,
    num_nodes: int,
    in_dim: int,
    hidden: int,
    io_threads: int = 8,
) -> int:
    """The reserve of this process's memory plan: its footprint now plus
    :func:`working_bytes` and the staging buffers of direct readers of ``io_threads`` threads
    (:func:`~shoal.rows.budget.reserve_for`). Call it after the model and the optimizer are
    built and before any feature row is read."""
    return reserve_for(
        working_bytes(
            model,
            fanouts=fanouts,
            batch_size=batch_size,
            num_nodes=num_nodes,
            in_dim=in_dim,
            hidden=hidden,
        ),
        io_threads=io_threads,
    )
