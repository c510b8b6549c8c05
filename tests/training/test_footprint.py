"""The reserve of a training process: its measured footprint plus what training will add."""

from __future__ import annotations

import numpy as np
import pytest
from torch import nn

import shoal.rows.budget as budget
import shoal.training.footprint as fp
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
    """The reserve is the footprint without the clean pages of the store's memory maps
    (the kernel takes them back), plus the working memory, staging buffers and slack."""
    monkeypatch.setattr(fp, "process_footprint", lambda **_: 300 << 20)
    monkeypatch.setattr(fp, "mapped_data_bytes", lambda **_: 0)
    small = training_reserve(None, SHAPE)
    extra = budget.staging_bytes() + budget.FOOTPRINT_SLACK
    assert small == (300 << 20) + working_bytes(None, SHAPE) + extra
    monkeypatch.setattr(fp, "process_footprint", lambda **_: 500 << 20)
    assert training_reserve(None, SHAPE) - small == 200 << 20
    monkeypatch.setattr(fp, "mapped_data_bytes", lambda **_: 120 << 20)
    assert training_reserve(None, SHAPE) - small == 80 << 20
    monkeypatch.setattr(fp, "process_footprint", lambda **_: -1)  # unreadable: the fixed reserve
    assert training_reserve(None, SHAPE) == budget.RESERVE


def test_the_evaluation_budget_is_measured_beside_mapped_data(monkeypatch):
    """An evaluation gets the budget less what the process holds now, not counting the clean
    pages of the store's memory maps, less its books, staging buffers and the slack."""
    mib = 1 << 20
    monkeypatch.setattr(fp, "process_footprint", lambda **_: 900 * mib)
    monkeypatch.setattr(fp, "mapped_data_bytes", lambda **_: 300 * mib)
    got, now = fp.measured_eval_budget(2000 * mib, 100 * mib, io_threads=8)
    assert now == 600 * mib
    staging = budget.staging_bytes(8, budget.EVAL_READERS)  # its own readers: 2 of 8 threads
    assert staging == 2 * 8 * budget.MAX_RUN
    assert got == (2000 - 600 - 100) * mib - staging - budget.FOOTPRINT_SLACK
    monkeypatch.setattr(fp, "process_footprint", lambda **_: 5000 * mib)  # over: none, not < 0
    assert fp.measured_eval_budget(2000 * mib, 100 * mib)[0] == 0
    monkeypatch.setattr(fp, "process_footprint", lambda **_: -1)  # unknown: nothing measured
    assert fp.measured_eval_budget(2000 * mib, 100 * mib) == (0, -1)


def test_the_evaluation_budget_grows_when_memory_is_freed():
    """Measured on this process: freeing 64 MiB raises the evaluation's budget by about
    that much (the plan's shares would not see it). The footprint counts shared library
    pages by this process's share, which moves when other processes (the suite's other
    workers, a test's ranks) map or unmap the same libraries meanwhile: the best of three
    tries is compared (a budget blind to freed memory fails all three)."""
    if budget.process_footprint() < 0:
        pytest.skip("no /proc/self/status on this system")
    grown = []
    for _ in range(3):
        block = np.ones(64 << 20, dtype=np.uint8)
        held, _ = fp.measured_eval_budget(8 << 30, 0)
        del block
        freed, _ = fp.measured_eval_budget(8 << 30, 0)
        grown.append(freed - held)
        if grown[-1] >= 56 << 20:
            break
    assert max(grown) >= 56 << 20, grown


def test_the_evaluations_working_memory_is_the_measured_headroom():
    """Measured: the headroom, even below the plan (the footprint plus the work stays within
    the budget), but at least EVAL_MIN_WORK; unmeasured: the plan, at least its floor."""
    from shoal.training.footprint import EVAL_MIN_WORK, eval_working_memory

    mib = 1 << 20
    assert eval_working_memory(900 * mib, 300 * mib, 700 * mib, 64 * mib) == 300 * mib
    assert eval_working_memory(100 * mib, 300 * mib, 700 * mib, 64 * mib) == 300 * mib
    assert eval_working_memory(900 * mib, 0, 2000 * mib, 64 * mib) == EVAL_MIN_WORK
    assert eval_working_memory(900 * mib, 0, -1, 64 * mib) == 900 * mib
    assert eval_working_memory(10 * mib, 0, -1, 64 * mib) == 64 * mib
