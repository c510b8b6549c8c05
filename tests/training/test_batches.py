"""The phase timer the batch loader and the blocked layers share."""

from __future__ import annotations

import time

import pytest

from shoal.training.batches import Timer


def test_a_phase_accumulates_its_seconds_even_when_it_raises():
    t = Timer()
    with t.phase("pull"):
        time.sleep(0.01)
    with pytest.raises(ValueError), t.phase("pull"):
        raise ValueError
    t.add("read", 1.25)
    assert t.seconds["pull"] >= 0.01 and set(t.seconds) == {"pull", "read"}
    assert str(t).endswith("read 1.2 s") and str(t).startswith("pull ")
