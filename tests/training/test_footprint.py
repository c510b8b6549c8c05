"""The reserve of a training process: its measured footprint plus what training will add."""

from __future__ import annotations

from torch import nn

import shoal.rows.budget as budget
from shoal.training.footprint import OPTIMIZER_STATES, StepShape, training_reserve, working_bytes

SHAPE = StepShape(fanouts=(3, 2), batch_size=2, num_nodes=1000, in_dim=10, hidden=4)


def test_working_memory_counts_gradients_optimizer_state_and_activations():
    model = nn.Sequential(nn.Linear(10, 4), nn.Linear(4, 3))  # 44 + 15 = 59 parameters
    got = working_bytes(model, SHAPE)
    # 59 float32 parameters: their gradients and Adam's two moments; at most 24 rows of 10 + 4
    assert got == 59 * 4 * (1 + OPTIMIZER_STATES) + budget.ACTIVATION_FACTOR * 24 * 14 * 4
    no_model = working_bytes(None, SHAPE)
    assert got - no_model == 59 * 4 * 3


def test_the_reserve_grows_with_the_process(monkeypatch):
    monkeypatch.setattr(budget, "process_footprint", lambda: 300 << 20)
    small = training_reserve(None, SHAPE)
    extra = budget.staging_bytes() + budget.FOOTPRINT_SLACK
    assert small == (300 << 20) + working_bytes(None, SHAPE) + extra
    monkeypatch.setattr(budget, "process_footprint", lambda: 500 << 20)
    assert training_reserve(None, SHAPE) - small == 200 << 20
