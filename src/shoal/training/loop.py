"""The one epoch loop, shared by the single-process trainer and every engine.

A training *target* (the trainer, or an engine on one rank) supplies only what is specific to
it (:class:`Trainable`; ``evaluate`` is collective in a distributed run: every rank gets the
same numbers). :class:`EpochLoop` does the rest, once for everybody: evaluate every ``eval_every`` epochs (and
after the last), keep the best-validation weights, stop early after ``patience`` evaluations
without improvement (every rank sees the same accuracy, so all stop together), write one JSON
line per epoch to ``metrics_file`` (rank 0), checkpoint every epoch and resume exactly
(:class:`~shoal.training.checkpoint.Checkpointer`), log progress (rank 0), test the best
weights at the end and return one :class:`~shoal.training.result.RunResult`. The last epoch's
evaluation takes the test split too, after ``end_training``: when that epoch is the best, it
is the final evaluation (one exact pass at the end, not two).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from shoal.rows.prefetch import read_bytes_of_process
from shoal.training.checkpoint import Checkpointer
from shoal.training.config import TrainConfig
from shoal.training.result import RunResult
from shoal.utils.memory import (
    keep_freed_memory,
    peak_rss_bytes,
    return_freed_memory,
    trim_freed_memory,
)

__all__ = ["EpochLoop", "Group", "LocalGroup", "LoopState", "Trainable", "eval_work_ratio"]

log = logging.getLogger("shoal.training")


class Trainable(Protocol):
    """What the loop needs from the trainer or an engine (see the module docstring).

    ``train_epoch(epoch)`` (``epoch`` counts from 0) returns a record with at least ``loss``,
    ``train_accuracy``, ``seconds`` and ``time_split`` (a dict of seconds per phase); optional
    ``comm`` (communication counters) and ``evaluable`` (False: the weights are mid-round and
    must not be evaluated, e.g. between two averaging rounds). An optional ``end_training()``
    is called before the last epoch's evaluation and the final one (once or twice: it must
    be a no-op the second time): no training step follows it. An optional
    ``kept_step_memory`` (bytes, default 0) is what the allocator may keep of the freed
    memory from one step to the next during ``train_epoch``
    (:attr:`~shoal.rows.budget.BudgetPlan.kept_step_memory`).
    """

    model: nn.Module

    def train_epoch(self, epoch: int) -> dict[str, Any]: ...

    def evaluate(
        self, splits: tuple[str, ...], *, fanouts: tuple[int, ...] | None = None
    ) -> dict[str, float]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


def eval_work_ratio(
    *, num_nodes: int, num_edges: int, num_seeds: int, fanouts: tuple[int, ...]
) -> float:
    """Estimated work of one exact layer-wise evaluation over one epoch of sampled training:
    an evaluation aggregates every edge and transforms every node once per layer, ``L (E +
    N)``; an epoch samples, per seed, ``sum_h prod_{i<=h} min(f_i, d)`` edges (``d = E / N``
    the mean in-degree, ``f = -1``: all) and runs them forward and backward (about 3 times a
    forward pass)."""
    d = num_edges / max(num_nodes, 1)
    per_seed, width = 0.0, 1.0
    for f in fanouts:
        width *= d if f < 0 else min(f, d)
        per_seed += width
    train = 3.0 * max(num_seeds, 1) * max(per_seed, 1.0)
    return len(fanouts) * (num_edges + num_nodes) / train


def _read_since(read0: int) -> int:
    """Bytes this process read from storage since ``read0`` (a large negative number when it
    cannot tell, so that a sum over ranks stays negative)."""
    read1 = read_bytes_of_process()
    return read1 - read0 if min(read0, read1) >= 0 else -(1 << 50)


class Group(Protocol):
    """The processes of a run: ``rank``, ``world_size`` and a ``barrier()``."""

    rank: int
    world_size: int

    def barrier(self) -> None: ...


@dataclass(frozen=True)
class LocalGroup:
    """A world of one process (the single-process trainer)."""

    rank: int = 0
    world_size: int = 1

    def barrier(self) -> None:
        return None


@dataclass
class LoopState:
    """The loop's counters (checkpointed with the target's own state)."""

    epoch: int = 0  # epochs completed
    best_val: float = -1.0
    best_epoch: int = 0
    bad_evals: int = 0
    best_model: dict[str, torch.Tensor] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    eval_every: int = 0  # the cadence in use (0: not chosen yet)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["best_model"] = self.best_model  # asdict would deep-copy the tensors
        return d

    def load(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.best_val = float(state["best_val"])
        self.best_epoch = int(state["best_epoch"])
        self.bad_evals = int(state["bad_evals"])
        self.best_model = state.get("best_model")
        self.history = list(state.get("history") or [])
        self.eval_every = int(state.get("eval_every") or 0)


class EpochLoop:
    """Runs a :class:`Trainable` to the end (see the module docstring).

    Args:
        target: the trainer or an engine.
        config: the run's options (epochs, eval_every, patience, checkpoint_dir, resume,
            metrics_file).
        group: the processes (default: one process).
        identity: what a checkpoint must match to be resumed (engine, model, widths, dataset
            shape; not the world size: an engine's checkpoint is resharded).
        engine: name recorded in the result (``"single"`` for the trainer).
        num_parts, batches_per_epoch: recorded in the result.
        settings: extra settings recorded in the result's ``config``.
    """

    def __init__(
        self,
        target: Trainable,
        config: TrainConfig,
        *,
        group: Group | None = None,
        identity: dict[str, Any] | None = None,
        engine: str = "single",
        num_parts: int = 1,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.target = target
        self.config = config
        self.group = group or LocalGroup()
        self.engine = engine
        self.num_parts = num_parts
        self.settings = settings or {}
        self.identity = {"engine": engine, **(identity or {})}
        self.state = LoopState()
        self.eval_seconds = 0.0
        # the last epoch's validation, evaluated with the test split, and the bytes it read:
        # the final evaluation when that epoch is the best (one exact pass, not two)
        self._last: tuple[dict[str, float], int] | None = None
        self._kept = 0  # freed memory the allocator keeps between steps now (bytes)

    @property
    def metric(self) -> str:
        """The name of the selection metric (``target.metric``; default ``accuracy``)."""
        return getattr(self.target, "metric", "accuracy")

    def _selected(self) -> nn.Module:
        """The weights kept at the best validation score: ``target.selected_module`` when the
        target has one (e.g. an encoder and its scorer), else ``target.model``."""
        return getattr(self.target, "selected_module", None) or self.target.model

    @property
    def is_rank0(self) -> bool:
        return self.group.rank == 0

    def _resume(self, ckpt: Checkpointer) -> None:
        st = ckpt.load()
        if st is None:
            return
        self.target.load_state(st)
        self.state.load(st)
        if self.is_rank0:
            log.info("resumed from %s after epoch %d", ckpt.dir, self.state.epoch)

    def _evaluate_val(self, rec: dict[str, Any], last: bool = False) -> bool:
        """Validation accuracy (and the test accuracy with ``eval_test``) into ``rec``; keeps
        the best weights. True when improved. The ``last`` epoch's evaluation takes the test
        split too (kept for :meth:`_finish`, not recorded without ``eval_test``)."""
        st = self.state
        t0, read0 = time.perf_counter(), read_bytes_of_process()
        with_test = self.config.eval.test or last
        splits = ("val", "test") if with_test else ("val",)
        fanouts = None if last else self.config.eval.fanouts  # the last one exact (final)
        if fanouts is None:
            acc = self.target.evaluate(splits)
        else:  # a sampled validation
            acc = self.target.evaluate(splits, fanouts=fanouts)
        rec["evaluation"] = "exact" if fanouts is None else "sampled"
        self.eval_seconds += time.perf_counter() - t0
        if last:
            self._last = (acc, _read_since(read0))
        val = rec[f"val_{self.metric}"] = acc["val"]
        if self.config.eval.test:
            rec[f"test_{self.metric}"] = acc["test"]
        extra = {k: v for k, v in acc.items() if k not in ("val", "test")}
        if not self.config.eval.test:  # the last epoch's test metrics are the result's
            extra = {k: v for k, v in extra.items() if not k.startswith("test_")}
        rec.update(extra)
        if val > st.best_val:
            st.best_val, st.best_epoch, st.bad_evals = val, st.epoch, 0
            st.best_model = copy.deepcopy(self._selected().state_dict())
            getattr(self.target, "keep_best", lambda: None)()  # what it keeps outside its module
            return True
        st.bad_evals += 1
        return False

    def _log_epoch(self, rec: dict[str, Any], stop: bool) -> None:
        if not self.is_rank0:
            return
        if self.config.run.metrics_file:
            p = Path(self.config.run.metrics_file)
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a") as f:
                f.write(json.dumps(rec) + "\n")
        e = self.state.epoch
        val = rec.get(f"val_{self.metric}")
        log.log(  # every 10th epoch (and the first and the last) at INFO, the others at DEBUG
            logging.INFO if e == 1 or e % 10 == 0 or stop else logging.DEBUG,
            "epoch %d loss %.4f val %s %s %.2fs%s",
            e,
            rec["loss"],
            self.metric,
            f"{val:.4f}" if isinstance(val, float) else "-",
            rec["seconds"],
            f" (early stop: {self.state.bad_evals} evaluations without improvement)"
            if stop
            else "",
        )

    def _due(self, epoch: int) -> bool:
        """Whether ``epoch`` (counted from 1) is evaluated: every ``eval_every`` epochs (the
        cadence chosen under "auto") and the last one."""
        k = self.state.eval_every or 1
        return epoch % k == 0 or epoch == self.config.optim.epochs

    def _cadence(self) -> int:
        """``eval_every``, or under "auto" ``ceil(4 r)`` with ``r`` the target's estimated
        work of one exact evaluation over one epoch's (``target.eval_work_ratio()``, from the
        graph's sizes: the same on every rank and in every run with the same data), so that
        evaluation takes about a fifth of the run or less; every epoch under "auto" with
        ``eval_fanouts`` (a sampled validation)."""
        cfg = self.config
        if cfg.eval.every != "auto":
            return int(cfg.eval.every)
        if cfg.eval.fanouts is not None:  # a sampled validation costs a fraction of an epoch
            return 1
        ratio = getattr(self.target, "eval_work_ratio", None)
        k = max(1, math.ceil(4.0 * ratio())) if ratio is not None else 1
        if self.is_rank0:
            log.info(
                "evaluating every %d epoch(s) (--eval-every auto: an exact evaluation is "
                "estimated at %.2f epochs of training work)",
                k,
                ratio() if ratio else 0.0,
            )
        return k

    def _checkpointer(self) -> Checkpointer | None:
        cfg = self.config
        if not cfg.checkpoint.dir:
            return None
        return Checkpointer(
            cfg.checkpoint.dir,
            rank=self.group.rank,
            world_size=self.group.world_size,
            barrier=self.group.barrier,
            identity=self.identity,
            meta=getattr(self.target, "checkpoint_meta", dict)(),
        )

    def fit(self) -> RunResult:
        """Train until ``epochs`` or early stopping; test the best-validation weights."""
        cfg, st = self.config, self.state
        ckpt = self._checkpointer()
        if ckpt is not None and cfg.checkpoint.resume:
            self._resume(ckpt)
        if not st.eval_every:  # a resumed run keeps its cadence
            st.eval_every = self._cadence()
        stop = cfg.optim.patience > 0 and st.bad_evals >= cfg.optim.patience
        try:
            self._train(ckpt, stop)
        finally:
            self._return_step_memory()
        return self._finish()

    def _keep_step_memory(self) -> None:
        """Let the allocator keep the training steps' freed tensors for the next step, up to
        the target's ``kept_step_memory`` (the plan's activations: counted already), instead
        of mapping and page-faulting them in afresh every step; read again each epoch (the
        activations are refitted once batches are sampled)."""
        self._kept = int(getattr(self.target, "kept_step_memory", 0))
        if self._kept > 0:
            keep_freed_memory(self._kept)

    def _return_step_memory(self) -> None:
        """Give what :meth:`_keep_step_memory` kept back to the system: before an evaluation
        (whose working memory includes the activations) and when training ends."""
        if self._kept > 0:
            return_freed_memory()
            trim_freed_memory()
            self._kept = 0

    def _train(self, ckpt: Checkpointer | None, stop: bool) -> None:
        cfg, st = self.config, self.state
        while st.epoch < cfg.optim.epochs and not stop:
            done = st.epoch + 1
            self._keep_step_memory()
            rec = {"epoch": done, **self.target.train_epoch(st.epoch)}
            st.epoch = done
            improved = False
            if self._due(st.epoch) and rec.get("evaluable", True):
                self._return_step_memory()
                last = st.epoch == cfg.optim.epochs
                if last:  # no step follows: the evaluation gets training's memory
                    getattr(self.target, "end_training", lambda: None)()
                improved = self._evaluate_val(rec, last=last)
            st.history.append(rec)
            stop = cfg.optim.patience > 0 and st.bad_evals >= cfg.optim.patience
            self._log_epoch(rec, stop)
            if ckpt is not None:
                state = {**self.target.state(), **st.to_dict(), "config": cfg.to_dict()}
                ckpt.save(st.epoch, state, st.best_model if improved else None)

    def _finish(self) -> RunResult:
        st = self.state
        model = self.target.model
        if st.best_model is not None:
            self._selected().load_state_dict(st.best_model)
            getattr(self.target, "restore_best", lambda: None)()
        getattr(self.target, "end_training", lambda: None)()  # (once: a no-op the second time)
        if self._last is not None and st.best_epoch == st.epoch:  # evaluated with these weights
            final, read_final = self._last
        else:
            t0, read0 = time.perf_counter(), read_bytes_of_process()
            final = self.target.evaluate(("val", "test"))
            self.eval_seconds += time.perf_counter() - t0
            read_final = _read_since(read0)
        hist = st.history
        n = max(len(hist), 1)
        keys = sorted({k for r in hist for k in r["time_split"]})
        comm_keys = sorted({k for r in hist for k in r.get("comm", {})})
        rss = torch.tensor([peak_rss_bytes()], dtype=torch.float64)
        # bytes the final evaluation read, summed over ranks (-1 on a rank that cannot tell)
        read = torch.tensor([read_final])
        if self.group.world_size > 1:
            dist.all_reduce(rss, op=dist.ReduceOp.MAX)
            dist.all_reduce(read)
        return RunResult(
            engine=self.engine,
            world_size=self.group.world_size,
            num_parts=self.num_parts,
            test_accuracy=final["test"],
            val_accuracy=final["val"],
            best_epoch=st.best_epoch,
            epochs=len(hist),
            seconds_per_epoch=sum(r["seconds"] for r in hist) / n,
            time_split={k: sum(r["time_split"].get(k, 0.0) for r in hist) / n for k in keys},
            comm_per_epoch={
                k: sum(r.get("comm", {}).get(k, 0.0) for r in hist) / n for k in comm_keys
            },
            batches_per_epoch=int(getattr(self.target, "num_batches", 0)),
            eval_seconds=self.eval_seconds,
            num_parameters=sum(p.numel() for p in model.parameters()),
            peak_rss_bytes=int(rss.item()),
            config={
                **self.config.to_dict(),
                **self.settings,
                "eval_every_chosen": st.eval_every,
            },
            history=hist,
            metric=self.metric,
            metrics={k: v for k, v in final.items() if k not in ("val", "test")},
            eval_read_bytes=max(int(read.item()), -1),
        )
