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

import gc
import logging
from dataclasses import dataclass

from torch import nn

from shoal.rows.budget import (
    EVAL_READERS,
    FOOTPRINT_SLACK,
    RESERVE,
    activation_bytes,
    batch_rows,
    mapped_data_bytes,
    process_footprint,
    reserve_for,
    staging_bytes,
)
from shoal.training.config import TrainConfig
from shoal.utils.memory import return_freed_memory, trim_freed_memory

log = logging.getLogger(__name__)

__all__ = [
    "EVAL_MIN_WORK",
    "OPTIMIZER_STATES",
    "StepShape",
    "eval_working_memory",
    "measured_eval_budget",
    "step_activations",
    "training_reserve",
    "working_bytes",
]

#: tensors the optimizer keeps per parameter (Adam: the two moment estimates).
OPTIMIZER_STATES = 2


@dataclass(frozen=True)
class StepShape:
    """The largest training step a run may take: ``fanouts`` and ``batch_size`` sampled
    over ``num_nodes`` rows (:func:`~shoal.rows.budget.batch_rows`), each row the ``in_dim``
    input features plus a ``hidden`` layer's width (batch size 0: no sampled batch)."""

    fanouts: tuple[int, ...]
    batch_size: int
    num_nodes: int
    in_dim: int
    hidden: int

    @classmethod
    def of(
        cls, config: TrainConfig, *, num_nodes: int, in_dim: int, sampled: bool = True
    ) -> StepShape:
        """The step of ``config``'s model and sampling (GAT's hidden layers are ``heads``
        wide); ``sampled=False``: an engine that trains on whole parts, no sampled batch."""
        heads = (config.model.heads or 1) if config.model.name == "gat" else 1
        return cls(
            fanouts=tuple(config.sampling.fanouts),
            batch_size=int(config.sampling.batch_size) if sampled else 0,
            num_nodes=int(num_nodes),
            in_dim=int(in_dim),
            hidden=int(config.model.hidden or 0) * heads,
        )


def step_activations(shape: StepShape) -> tuple[int, int]:
    """``(bytes, bytes per input row)`` of one training step's activations: for the largest
    batch of ``shape``, and per row of a batch (to refit them to the batches sampled:
    :meth:`~shoal.rows.budget.BudgetPlan.fit_activations`)."""
    rows = batch_rows(shape.fanouts, shape.batch_size, shape.num_nodes)
    width = shape.in_dim + shape.hidden
    return activation_bytes(rows, width), activation_bytes(1, width)


def working_bytes(
    model: nn.Module | None, shape: StepShape, *, optimizer_states: int = OPTIMIZER_STATES
) -> int:
    """Bytes one training step adds to the process beyond what it holds before the first
    batch: the parameters' gradients and ``optimizer_states`` copies of them (created at the
    first step), and the activations of the largest batch of ``shape``."""
    params = 0
    if model is not None:
        params = sum(p.numel() * p.element_size() for p in model.parameters())
    return int(params) * (1 + int(optimizer_states)) + step_activations(shape)[0]


def training_reserve(model: nn.Module | None, shape: StepShape, *, io_threads: int = 8) -> int:
    """The reserve of this process's memory plan: its footprint now plus
    :func:`working_bytes` and the staging buffers of direct readers of ``io_threads`` threads
    (:func:`~shoal.rows.budget.reserve_for`). The footprint is measured once freed heap
    memory is given back (``malloc_trim``: building the per-node tables frees hundreds of
    MiB that glibc otherwise keeps) and without the clean pages of the store's memory maps
    (:func:`~shoal.rows.budget.mapped_data_bytes`: the kernel takes them back). Call it after
    the model and the optimizer are built and before any feature row is read."""
    gc.collect()
    return_freed_memory()
    trim_freed_memory()
    now = process_footprint()
    if now < 0:  # unreadable: the fixed reserve
        return RESERVE
    footprint = now - mapped_data_bytes()
    return reserve_for(working_bytes(model, shape), footprint=footprint, io_threads=io_threads)


def measured_eval_budget(total: int, book: int, *, io_threads: int = 8) -> tuple[int, int]:
    """``(working bytes, footprint)`` of an evaluation, measured instead of planned: the
    process's budget ``total`` less what it holds now (:func:`~shoal.rows.budget.
    process_footprint`, file pages by this process's share: the ranks and their launcher map
    the same libraries; without the clean pages of the store's memory maps, which the
    kernel takes back: :func:`~shoal.rows.budget.mapped_data_bytes`), the evaluation's
    per-node ``book``, its own readers' staging buffers (:data:`~shoal.rows.budget.
    EVAL_READERS` of ``io_threads`` threads; training's are in the footprint) and
    :data:`~shoal.rows.budget.FOOTPRINT_SLACK`; ``(0, -1)`` when the footprint cannot be
    read. Why that leaves the evaluation more than the plan's shares (no training step runs
    meanwhile; the kernel takes back mapped pages): docs/distributed.md#minibatch-distdgl."""
    gc.collect()
    return_freed_memory()
    trim_freed_memory()
    now = process_footprint(shared=True)  # nothing grows after: the exact share
    if now < 0:
        return 0, -1
    now -= mapped_data_bytes(shared=True)
    staging = staging_bytes(io_threads, EVAL_READERS)
    work = int(total) - now - int(book) - staging - FOOTPRINT_SLACK
    return max(work, 0), now


#: the least working memory an evaluation is given (default 32 MiB): below it, its layers'
#: blocks of targets would be so small that each pass over their sources served a handful
EVAL_MIN_WORK = 32 << 20


def eval_working_memory(planned: int, measured: int, footprint: int, floor: int) -> int:
    """An evaluation's working memory: the ``measured`` headroom (:func:`measured_eval_budget`)
    whenever the footprint could be read, so that the footprint plus the working memory
    stays within the budget even when the process holds more than its plan (a small headroom
    only makes more blocks, each a pass over its sources), but at least
    :data:`EVAL_MIN_WORK` (with a warning: the process already holds about its whole
    budget); else the ``planned`` shares, at least ``floor`` bytes."""
    if footprint >= 0:
        if measured < EVAL_MIN_WORK:
            log.warning(
                "the evaluation has %.0f MiB of working memory left beside a footprint of "
                "%.0f MiB: it takes %.0f MiB, and its layers run in many small blocks (raise "
                "--memory to make it faster)",
                measured / (1 << 20),
                footprint / (1 << 20),
                EVAL_MIN_WORK / (1 << 20),
            )
        return max(int(measured), EVAL_MIN_WORK)
    return max(int(planned), int(floor))
