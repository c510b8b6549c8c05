"""``RunResult``: the outcome of a training run, single-process or distributed (what
``shoal train --json`` writes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """Outcome of a run (identical on every rank of a distributed run).

    Attributes:
        engine: ``"single"`` for the single-process trainer, else the engine's name.
        world_size, num_parts: processes and store parts (1 and 1 for the trainer).
        test_accuracy, val_accuracy: of the best-validation weights, by exact inference.
        best_epoch, epochs: epoch of the best validation accuracy; epochs trained.
        seconds_per_epoch: mean training time per epoch (evaluation excluded).
        time_split: mean seconds per epoch of each phase (sampling, gather, ...).
        comm_per_epoch: mean communication counters per epoch, summed over ranks.
        batches_per_epoch: mini-batches per epoch (per rank).
        eval_seconds: total evaluation time.
        num_parameters: trainable parameters of the model.
        peak_rss_bytes: peak resident set size (max over ranks).
        config: every setting of the run (``TrainConfig.to_dict()`` plus engine settings).
        history: one record per epoch (loss, train accuracy, val accuracy, time split, ...).
        metric: the selection metric: ``accuracy`` (node classification) or ``mrr`` (link
            prediction, whose ``test_accuracy``/``val_accuracy`` hold the MRR and are written
            as ``test_mrr``/``val_mrr`` by :meth:`to_json`).
        metrics: further final metrics (e.g. ``test_hits@50``).
        eval_read_bytes: bytes the final evaluation read from storage (``/proc/self/io``),
            summed over ranks; -1 where that cannot be read.
    """

    test_accuracy: float
    val_accuracy: float
    best_epoch: int
    epochs: int
    seconds_per_epoch: float
    time_split: dict[str, float]
    eval_seconds: float
    num_parameters: int
    peak_rss_bytes: int
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    engine: str = "single"
    world_size: int = 1
    num_parts: int = 1
    comm_per_epoch: dict[str, float] = field(default_factory=dict)
    batches_per_epoch: int = 0
    metric: str = "accuracy"
    metrics: dict[str, float] = field(default_factory=dict)
    eval_read_bytes: int = -1

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if self.metric != "accuracy":  # name the numbers for what they are
            d[f"test_{self.metric}"] = d.pop("test_accuracy")
            d[f"val_{self.metric}"] = d.pop("val_accuracy")
            d.update(self.metrics)
        for phase in ("sampling", "gather", "forward_backward"):
            d[f"{phase}_seconds_per_epoch"] = self.time_split.get(phase, 0.0)
        comm = self.comm_per_epoch
        d["bytes_per_epoch"] = comm.get("bytes_sent", 0.0) + comm.get("allreduce_bytes", 0.0)
        return d
