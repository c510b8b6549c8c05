"""Defaults a user can trust: per-model presets and the automatic evaluation cadence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.training import TrainConfig
from shoal.training.config import PRESETS, preset_defaults
from shoal.training.loop import EpochLoop, LoopState, eval_work_ratio
from shoal.training.presets import (
    AUTO_NORMALIZE_MAX_NNZ,
    LINK_PRESET,
    auto_normalize,
    resolve_for_data,
)


def test_paper_preset_gives_each_model_its_papers_settings():
    gcn = TrainConfig.from_options(model="gcn")
    assert (
        gcn.num_layers,
        gcn.model.hidden,
        gcn.model.dropout,
        gcn.optim.lr,
        gcn.optim.weight_decay,
        gcn.optim.epochs,
    ) == (
        2,
        64,
        0.5,
        0.01,
        5e-4,
        200,
    )
    assert (
        gcn.model.normalize_features == "auto"
        and gcn.sampling.fanouts == (25, 10)
        and gcn.preset == "paper"
    )
    gat = TrainConfig.from_options(model="gat")
    assert (gat.model.hidden, gat.model.heads, gat.model.dropout, gat.optim.lr) == (
        64,
        8,
        0.6,
        0.005,
    )
    sage = TrainConfig()
    assert (sage.model.name, sage.model.hidden, sage.optim.lr, sage.num_layers) == (
        "sage",
        256,
        0.01,
        2,
    )
    assert not sage.model.normalize_features


def test_large_preset_and_explicit_values_win():
    big = TrainConfig.from_options(model="gcn", preset="large")
    assert (big.sampling.fanouts, big.model.hidden, big.optim.lr, big.optim.epochs) == (
        (15, 10, 5),
        256,
        0.003,
        20,
    )
    mine = TrainConfig.from_options(
        model="gcn", hidden=16, lr=0.05, normalize_features=False, epochs=3
    )
    assert (mine.model.hidden, mine.optim.lr, mine.model.normalize_features, mine.optim.epochs) == (
        16,
        0.05,
        False,
        3,
    )
    assert mine.optim.weight_decay == 5e-4  # the rest still from the paper
    with pytest.raises(ValueError, match="preset"):
        TrainConfig.from_options(preset="huge")
    assert set(PRESETS) == {"paper", "large"}
    for model in ("gcn", "gat", "sage", "gin", "sgc"):
        for preset in PRESETS:
            TrainConfig.from_options(model=model, **preset_defaults(model, preset))  # all valid


def test_link_task_has_the_settings_that_beat_adamic_adar():
    """--task link: the settings of bench/results/linkpred.md over the model's paper preset;
    the node task keeps its own; explicit values win."""
    link = TrainConfig.from_options(task="link")
    got = {k: link.get(k) for k in LINK_PRESET}
    assert got == {
        "fanouts": (10, 5),
        "hidden": 64,
        "batch_size": 512,
        "lr": 0.005,
        "dropout": 0.0,
        "weight_decay": 0.0,
        "epochs": 20,
        "min_steps": 0,
    }
    node = TrainConfig()
    assert (node.sampling.batch_size, node.model.dropout, node.sampling.fanouts) == (
        1024,
        0.5,
        (25, 10),
    )
    mine = TrainConfig.from_options(task="link", batch_size=64, dropout=0.2, model="gcn")
    assert (
        mine.sampling.batch_size,
        mine.model.dropout,
        mine.optim.lr,
        mine.model.normalize_features,
    ) == (
        64,
        0.2,
        0.005,
        "auto",
    )
    big = TrainConfig.from_options(task="link", preset="large")
    assert (big.sampling.fanouts, big.sampling.batch_size) == ((15, 10, 5), 512)


def _bag_of_words(rows: int, nnz: int, width: int = 200) -> np.ndarray:
    x = np.zeros((rows, width), np.float32)
    for i in range(rows):
        x[i, (np.arange(nnz) * 7 + i) % width] = 1.0
    return x


def test_auto_normalisation_row_normalises_sparse_bag_of_words_only():
    k = AUTO_NORMALIZE_MAX_NNZ
    assert auto_normalize(_bag_of_words(10, 3)) and auto_normalize(_bag_of_words(10, k))
    assert not auto_normalize(_bag_of_words(10, k + 1))  # dense rows: as stored
    signed = _bag_of_words(10, 3)
    signed[4, 0] = -0.5
    assert not auto_normalize(signed) and not auto_normalize(np.zeros((0, 5)))
    gcn = TrainConfig.from_options(model="gcn")
    sparse = resolve_for_data(gcn, train_nodes=10, features=_bag_of_words(5000, 5))
    dense = resolve_for_data(gcn, train_nodes=10, features=_bag_of_words(5000, 150))
    none = resolve_for_data(gcn, train_nodes=10, features=None)  # learned embeddings only
    assert (
        sparse.model.normalize_features,
        dense.model.normalize_features,
        none.model.normalize_features,
    ) == (
        True,
        False,
        False,
    )
    mine = TrainConfig.from_options(model="gcn", normalize_features=False)  # given: never changed
    assert resolve_for_data(mine, train_nodes=10, features=_bag_of_words(9, 2)) is mine
    with pytest.raises(ValueError, match="normalize_features"):
        TrainConfig.from_options(normalize_features="sometimes")


def test_min_steps_grow_the_epochs_of_small_training_sets_only():
    sage = TrainConfig.from_options(
        batch_size=100
    )  # the paper preset: 10 epochs, at least 200 steps
    assert (sage.optim.epochs, sage.optim.min_steps) == (10, 200)
    assert resolve_for_data(sage, train_nodes=160).optim.epochs == 100  # 2 steps per epoch
    assert resolve_for_data(sage, train_nodes=1).optim.epochs == 200
    assert resolve_for_data(sage, train_nodes=2000, ranks=2).optim.epochs == 20  # 10 steps
    big = resolve_for_data(sage, train_nodes=100_000)
    assert big is sage and big.optim.epochs == 10  # 1000 steps an epoch: the paper's 10
    mine = TrainConfig.from_options(epochs=5)  # epochs given: exactly those
    assert mine.optim.min_steps == 0 and resolve_for_data(mine, train_nodes=1).optim.epochs == 5
    both = TrainConfig.from_options(epochs=5, min_steps=30, batch_size=10)
    assert resolve_for_data(both, train_nodes=20).optim.epochs == 15
    assert TrainConfig.from_options(model="gcn").optim.min_steps == 0
    assert TrainConfig.from_options(preset="large").optim.min_steps == 0
    with pytest.raises(ValueError, match="min_steps"):
        TrainConfig.from_options(min_steps=-1)


def test_resolved_values_round_trip():
    c = TrainConfig.from_options(model="gat", preset="large")
    again = TrainConfig.from_dict(c.to_dict())
    assert again == c and again.eval.every == "auto"
    with pytest.raises(ValueError, match="eval_every"):
        TrainConfig.from_options(eval_every="often")
    assert TrainConfig.from_options(eval_every="3").eval.every == 3


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
    r = EpochLoop(t, TrainConfig.from_options(epochs=25, hidden=4)).fit()
    assert r.config["eval_every_chosen"] == k
    assert t.evaluated[:-1] == sorted({*range(k, 26, k), 25})  # the last call: the final test
    fixed = _Stub(2.4)
    assert (
        EpochLoop(fixed, TrainConfig.from_options(epochs=5, hidden=4, eval_every=2))
        .fit()
        .config["eval_every_chosen"]
        == 2
    )
    assert fixed.evaluated[:-1] == [2, 4, 5]


class _Scored(_Stub):
    """A target whose weights are the epoch that trained them, scored ``vals[epoch - 1]`` on
    validation and the epoch's number on test (so the result tells which weights it saw)."""

    def __init__(self, vals: list[float]) -> None:
        super().__init__(None)
        self.vals, self.calls = vals, []

    def train_epoch(self, epoch: int):
        with torch.no_grad():
            self.model.weight.fill_(epoch + 1)
        return super().train_epoch(epoch)

    def evaluate(self, splits):
        e = int(self.model.weight.item())
        self.calls.append((e, splits))
        return {s: self.vals[e - 1] if s == "val" else float(e) for s in splits}


def test_the_last_epochs_evaluation_is_the_final_one_when_it_is_the_best():
    """One exact pass, not two: the last epoch's validation takes the test split too, and when
    that epoch is the best the result is that evaluation (no evaluation after the loop)."""
    t = _Scored([0.1, 0.2, 0.3])
    r = EpochLoop(t, TrainConfig.from_options(epochs=3, hidden=4, eval_every=1)).fit()
    assert t.calls == [(1, ("val",)), (2, ("val",)), (3, ("val", "test"))]
    assert (r.best_epoch, r.val_accuracy, r.test_accuracy) == (3, 0.3, 3.0)
    assert all("test_accuracy" not in h for h in r.history)  # without --eval-test
    # an earlier epoch is the best: its weights come back and are evaluated after the loop
    t = _Scored([0.1, 0.3, 0.2])
    r = EpochLoop(t, TrainConfig.from_options(epochs=3, hidden=4, eval_every=1)).fit()
    assert t.calls[2:] == [(3, ("val", "test")), (2, ("val", "test"))]
    assert (r.best_epoch, r.val_accuracy, r.test_accuracy) == (2, 0.3, 2.0)


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
