"""``EpochMeter``: one epoch's bookkeeping, written once for the trainer and every engine.

An epoch's step loop keeps the same books everywhere: a progress bar over its batches, the
seconds of each phase (sampling, gather, forward/backward, communication, ...), the summed
loss and the correct predictions over the seeds seen, and the epoch's wall time. The loop
calls :meth:`EpochMeter.step` once per batch and :meth:`EpochMeter.close` at the end, whose
dict is what :meth:`shoal.engines.base.Engine.epoch_record` reduces over ranks (and what the
single-process trainer turns into its record with :meth:`EpochMeter.record`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from shoal.training.batches import EventClock, Timer, event_device, timed
from shoal.utils.progress import progress

__all__ = ["POSTFIX_EVERY", "EpochMeter"]

#: steps between two readings of a lazy loss for the progress bar (each one waits for the
#: device)
POSTFIX_EVERY = 16


class EpochMeter:
    """The books of one epoch.

    Args:
        epoch: the epoch (counted from 0; the bar shows it from 1).
        total: batches the epoch will run (the bar's length; None: not known yet).
        enable: show the bar (None: when stderr is a terminal; see
            :func:`shoal.utils.progress.progress`).
        timer: a :class:`~shoal.training.batches.Timer` that other parts of the epoch add to
            too (e.g. the batch loader's sampling and gather); the epoch's phases are what it
            accumulates from now on (default: a fresh one).
        phases: phases reported even when nothing was added to them (as 0.0; default none).
        postfix: show the last batch's loss on the bar (default false).
        device: the device the epoch's steps run on (keyword; default None: the wall clock).
            On a CUDA device (when :func:`torch.cuda.is_available`) the phases timed with
            :meth:`time` are the device's time between a pair of CUDA events recorded on the
            current stream around the block (the kernels the block queued, plus any wait
            inside the block), measured without a sync per step: the pairs wait until
            :meth:`close`, which synchronises once and adds their seconds to the timer (and
            flushes the timer's own event-timed phases, see
            :meth:`~shoal.training.batches.Timer.flush`). So until then :attr:`phases` holds
            only the wall seconds added with :meth:`add`. Any other device: the wall clock,
            exactly as with None.
    """

    def __init__(
        self,
        epoch: int,
        total: int | None,
        *,
        enable: bool | None,
        timer: Timer | None = None,
        phases: tuple[str, ...] = (),
        postfix: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        self.timer = timer if timer is not None else Timer()
        dev = event_device(device)
        self._events = EventClock(dev) if dev is not None else None
        self.timer.flush()  # what was timed before this epoch is not this epoch's
        self._before = dict(self.timer.seconds)
        for name in phases:
            self.timer.seconds.setdefault(name, 0.0)
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0
        self.steps = 0  # batches trained
        self._postfix = postfix
        self.bar = progress(total=total, desc=f"epoch {epoch + 1}", unit="batch", enable=enable)
        self._t0 = time.perf_counter()

    @property
    def phases(self) -> dict[str, float]:
        """Seconds per phase, writable (``meter.phases["gather"] += s``)."""
        return self.timer.seconds

    def add(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` (wall seconds, on any device) to ``phase``."""
        self.timer.add(phase, seconds)

    @contextmanager
    def time(self, phase: str) -> Iterator[None]:
        """Add the block's time to ``phase`` (also when it raises): its wall time, or on a
        CUDA device the device's time between CUDA events around it, added at :meth:`close`
        (see the class's ``device``)."""
        with timed(phase, self.timer.add, self._events):
            yield

    def step(self, loss: float | torch.Tensor, correct: int | torch.Tensor, n: int) -> None:
        """One batch trained: ``loss`` (the batch's mean), ``correct`` predictions of ``n``
        seeds; as numbers, or as 0-d tensors on the model's device, summed there and read
        once at :meth:`close` (a step then never waits for the device; the bar's loss is
        read every :data:`POSTFIX_EVERY` steps)."""
        self.step_sums(loss * n, correct, n)
        lazy = isinstance(loss, torch.Tensor)
        if self._postfix and (not lazy or self.steps % POSTFIX_EVERY == 1):
            self.bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)

    def step_sums(self, loss_sum: float, correct: int, n: int) -> None:
        """One batch trained, its loss already summed over its ``n`` seeds (or edges)."""
        self.loss_sum += loss_sum
        self.correct += correct
        self.seen += n
        self.steps += 1
        self.bar.update(1)

    def close(self) -> dict[str, Any]:
        """The epoch's books: ``loss_sum``, ``correct``, ``seen``, ``seconds`` (wall time since
        the meter was made) and ``time_split`` (seconds per phase this epoch). On a CUDA
        device it first waits for the phases timed with events (one sync) and adds them."""
        self.bar.close()
        if self._events is not None:
            for name, s in self._events.seconds().items():
                self.timer.add(name, s)
        self.timer.flush()
        before = self._before
        return {
            "loss_sum": float(self.loss_sum),
            "correct": int(self.correct),
            "seen": self.seen,
            "seconds": time.perf_counter() - self._t0,
            "time_split": {k: v - before.get(k, 0.0) for k, v in self.timer.seconds.items()},
        }

    def record(self) -> dict[str, Any]:
        """:meth:`close` as one process's epoch record: mean ``loss``, ``train_accuracy``,
        ``seconds``, ``time_split``."""
        b = self.close()
        seen = max(b["seen"], 1)
        return {
            "loss": b["loss_sum"] / seen,
            "train_accuracy": b["correct"] / seen,
            "seconds": b["seconds"],
            "time_split": b["time_split"],
        }
