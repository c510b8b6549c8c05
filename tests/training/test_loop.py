"""The epoch loop's handling of the memory a training step frees: kept with the allocator
from step to step, returned before every evaluation and when training ends."""

from __future__ import annotations

import pytest
import torch

import shoal.training.loop as loop
from shoal.training import TrainConfig
from shoal.training.loop import EpochLoop


class _Target:
    """A target that records training, evaluation and the allocator calls in one list."""

    metric = "accuracy"

    def __init__(self, events: list, kept: int) -> None:
        self.model = torch.nn.Linear(1, 1)
        self.events, self.kept_step_memory = events, kept

    def train_epoch(self, epoch: int):
        self.events.append(("train", epoch))
        return {"loss": 1.0, "train_accuracy": 0.0, "seconds": 0.0, "time_split": {}}

    def evaluate(self, splits, **_):
        self.events.append(("evaluate", splits))
        return {s: 0.5 for s in splits}

    def state(self):
        return {}

    def load_state(self, state):
        return None


@pytest.fixture
def events(monkeypatch) -> list:
    ev: list = []
    monkeypatch.setattr(loop, "keep_freed_memory", lambda n: ev.append(("keep", n)))
    monkeypatch.setattr(loop, "return_freed_memory", lambda: ev.append(("return",)))
    monkeypatch.setattr(loop, "trim_freed_memory", lambda: ev.append(("trim",)))
    return ev


def test_step_memory_is_kept_while_training_and_returned_before_evaluating(events):
    EpochLoop(_Target(events, 1 << 20), TrainConfig.from_options(epochs=3, eval_every=2)).fit()
    keep, back = ("keep", 1 << 20), [("return",), ("trim",)]
    assert events == [
        keep,
        ("train", 0),
        keep,
        ("train", 1),
        *back,
        ("evaluate", ("val",)),
        keep,
        ("train", 2),
        *back,
        ("evaluate", ("val", "test")),
        ("evaluate", ("val", "test")),  # the final test of epoch 2's weights (the best)
    ]


def test_nothing_is_kept_when_the_target_keeps_nothing(events):
    EpochLoop(_Target(events, 0), TrainConfig.from_options(epochs=2, eval_every=1)).fit()
    assert [e for e in events if e[0] not in ("train", "evaluate")] == []


def test_kept_memory_is_returned_when_an_epoch_fails(events):
    class Failing(_Target):
        def train_epoch(self, epoch):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        EpochLoop(Failing(events, 4096), TrainConfig.from_options(epochs=2)).fit()
    assert events == [("keep", 4096), ("return",), ("trim",)]
