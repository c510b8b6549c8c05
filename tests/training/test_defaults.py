"""Defaults a user can trust: per-model presets and the automatic evaluation cadence."""

from __future__ import annotations

import pytest
import torch

from shoal.training import TrainConfig
from shoal.training.config import PRESETS, preset_defaults
from shoal.training.loop import EpochLoop, LoopState, eval_work_ratio


def test_paper_preset_gives_each_model_its_papers_settings():
    gcn = TrainConfig(model="gcn")
    assert (gcn.num_layers, gcn.hidden, gcn.dropout, gcn.lr, gcn.weight_decay, gcn.epochs) == (
        2, 64, 0.5, 0.01, 5e-4, 200)  # fmt: skip
    assert gcn.normalize_features and gcn.fanouts == (25, 10) and gcn.preset == "paper"
    gat = TrainConfig(model="gat")
    assert (gat.hidden, gat.heads, gat.dropout, gat.lr) == (64, 8, 0.6, 0.005)
    sage = TrainConfig()
    assert (sage.model, sage.hidden, sage.lr, sage.num_layers) == ("sage", 256, 0.01, 2)
    assert not sage.normalize_features


def test_large_preset_and_explicit_values_win():
    big = TrainConfig(model="gcn", preset="large")
    assert (big.fanouts, big.hidden, big.lr, big.epochs) == ((15, 10, 5), 256, 0.003, 20)
    mine = TrainConfig(model="gcn", hidden=16, lr=0.05, normalize_features=False, epochs=3)
    assert (mine.hidden, mine.lr, mine.normalize_features, mine.epochs) == (16, 0.05, False, 3)
    assert mine.weight_decay == 5e-4  # the rest still from the paper
    with pytest.raises(ValueError, match="preset"):
        TrainConfig(preset="huge")
    assert set(PRESETS) == {"paper", "large"}
    for model in ("gcn", "gat", "sage", "gin", "sgc"):
        for preset in PRESETS:
            TrainConfig(model=model, **preset_defaults(model, preset))  # all valid


def test_resolved_values_round_trip():
    c = TrainConfig(model="gat", preset="large")
    again = TrainConfig.from_dict(c.to_dict())
    assert again == c and again.eval_every == "auto"
    with pytest.raises(ValueError, match="eval_every"):
        TrainConfig(eval_every="often")
    assert TrainConfig(eval_every="3").eval_every == 3


class _Stub:
    """A target whose evaluation is estimated at ``ratio`` epochs of training work."""

    metric = "accuracy"

    def __init__(self, ratio: float | None) -> None:
        self.model = torch.nn.Linear(1, 1)
        self.evaluated, self.epoch = [], 0
        if ratio is not None:
            self.eval_work_ratio = lambda: ratio

    def train_epoch(self, epoch: int):
        self.epoch = epoch + 1
        return {"loss": 1.0, "train_accuracy": 0.0, "seconds": 0.0, "time_split": {}}

    def evaluate(self, splits):
        self.evaluated.append(self.epoch)
        return {s: 0.5 for s in splits}

    def state(self):
        return {}

    def load_state(self, state):
        return None


@pytest.mark.parametrize(("ratio", "k"), [(2.4, 10), (0.1, 1), (0.26, 2), (None, 1)])
def test_auto_cadence_follows_the_estimated_evaluation_work(ratio, k):
    """Every ceil(4 r) epochs (evaluation about a fifth of the run), the last one always."""
    t = _Stub(ratio)
    r = EpochLoop(t, TrainConfig(epochs=25, hidden=4)).fit()
    assert r.config["eval_every_chosen"] == k
    assert t.evaluated[:-1] == sorted({*range(k, 26, k), 25})  # the last call: the final test
    fixed = _Stub(2.4)
    assert EpochLoop(fixed, TrainConfig(epochs=5, hidden=4, eval_every=2)).fit().config[
        "eval_every_chosen"] == 2  # fmt: skip
    assert fixed.evaluated[:-1] == [2, 4, 5]


def test_work_ratio_of_a_hand_sized_graph():
    # N = 100, E = 400 (d = 4), fanouts (10, 2): per seed min(10, 4) + 4 * min(2, 4) = 12
    # sampled edges; 50 seeds -> 3 * 50 * 12 = 1800; evaluation 2 * (400 + 100) = 1000
    r = eval_work_ratio(num_nodes=100, num_edges=400, num_seeds=50, fanouts=(10, 2))
    assert r == pytest.approx(1000 / 1800)
    full = eval_work_ratio(num_nodes=100, num_edges=400, num_seeds=100, fanouts=(-1,))
    assert full == pytest.approx((400 + 100) / (3 * 100 * 4))


def test_chosen_cadence_is_checkpointed():
    st = LoopState(eval_every=7)
    again = LoopState()
    again.load(st.to_dict())
    assert again.eval_every == 7
