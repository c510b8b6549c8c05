"""Exact evaluation: counted block by block, it equals predictions compared with labels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.graph import full_graph_block
from shoal.nn import build_model
from shoal.nn.ondevice import on_device
from shoal.rows.featstore import DiskFeatures
from shoal.training import blocked, inference
from shoal.training.data import TrainData
from shoal.training.inference import _union_flags, evaluate, evaluation_bytes


def _data(n=400, m=3000, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n - 10, m)  # 10 nodes without in-edges
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    perm = rng.permutation(n)
    return TrainData(
        indptr=indptr,
        indices=src[order].astype(np.int32),
        features=rng.random((n, 6)).astype(np.float32),
        labels=rng.integers(0, classes, n),
        train_idx=np.sort(perm[:100]),
        val_idx=np.sort(perm[100:180]),
        test_idx=np.sort(perm[180:]),
        num_classes=classes,
        num_nodes=n,
    )


def _reference(model, data, splits):
    fb = full_graph_block(data.indptr, data.indices)
    with torch.no_grad():
        pred = model(torch.from_numpy(data.features), [fb, fb]).argmax(1).numpy()
    return {s: float((pred[data.split(s)] == data.labels[data.split(s)]).mean()) for s in splits}


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("budget", [3_000, 10**8])  # many blocks, one block
def test_counted_evaluation_equals_the_full_forward(name, budget, device):
    """Counted block by block (on a GPU: the model's layers there, behind host calls), the
    accuracies equal the CPU model's full forward pass."""
    data = _data()
    torch.manual_seed(0)
    model = build_model(name, in_dim=6, hidden=8, out_dim=4, num_layers=2, dropout=0.0).eval()
    splits = ("val", "test", "train")
    moved = build_model(name, in_dim=6, hidden=8, out_dim=4, num_layers=2, dropout=0.0).eval()
    moved.load_state_dict(model.state_dict())
    got = evaluate(on_device(moved.to(device), device), data, splits, memory_budget=budget)
    ref = _reference(model, data, splits)
    assert got.keys() == ref.keys()
    for s in splits:  # ties in argmax are unlikely with random weights; allow one node
        assert abs(got[s] - ref[s]) <= 1.0 / len(data.split(s)) + 1e-12, s


def test_counted_evaluation_reads_through_a_released_store(tmp_path):
    data = _data()
    np.save(tmp_path / "x.npy", data.features)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    store = DiskFeatures(mm, cache_bytes=50 * 24)
    assert store.cache_bytes == 50 * 24
    assert store.release_cache() == 50 * 24
    assert store.cache_bytes == 0 and store.release_cache() == 0
    np.testing.assert_array_equal(
        store.gather(np.array([5, 0, 5, 399])), data.features[[5, 0, 5, 399]]
    )
    torch.manual_seed(1)
    model = build_model("sage", in_dim=6, hidden=8, out_dim=4, num_layers=2, dropout=0.0).eval()
    got = evaluate(model, data, ("val", "test"), features=store, memory_budget=5_000)
    assert got == pytest.approx(_reference(model, data, ("val", "test")), abs=2 / 80)
    assert store.stats.hits == 0 and store.stats.rows_read > 0


def test_overlapping_or_unsorted_splits_fall_back_to_predictions(monkeypatch):
    data = _data()
    data.val_idx = data.test_idx[:50][::-1].copy()  # unsorted, and inside test
    torch.manual_seed(2)
    model = build_model("sage", in_dim=6, hidden=8, out_dim=4, num_layers=2, dropout=0.0).eval()
    called = []
    real = inference.layerwise_inference
    monkeypatch.setattr(
        inference, "layerwise_inference", lambda *a, **k: called.append(1) or real(*a, **k)
    )
    got = evaluate(model, data, ("val", "test"))
    assert called
    assert got == pytest.approx(_reference(model, data, ("val", "test")), abs=2 / 50)


def test_union_flags_marks_each_split():
    a, b = np.array([1, 4, 9]), np.array([0, 4, 7, 9])
    uniq, flags = _union_flags([a, b])
    np.testing.assert_array_equal(uniq, [0, 1, 4, 7, 9])
    np.testing.assert_array_equal(flags, [2, 1, 3, 2, 3])
    assert _union_flags([np.array([3, 1])]) is None
    assert _union_flags([np.array([1, 1])]) is None
    uniq, flags = _union_flags([np.empty(0, np.int64)])
    assert len(uniq) == 0 and len(flags) == 0


def test_evaluation_bytes_grow_with_targets_and_nodes():
    assert evaluation_bytes(0, 0) == 0
    assert evaluation_bytes(10, 0) < evaluation_bytes(20, 0)
    assert evaluation_bytes(0, 10) < evaluation_bytes(0, 20)


def _path(n=60, dim=5):
    """The directed path 0 -> 1 -> ... -> n-1: node i's only in-neighbour is i - 1."""
    indptr = np.concatenate([[0, 0], np.arange(1, n, dtype=np.int64)])
    rng = np.random.default_rng(1)
    return TrainData(
        indptr=indptr,
        indices=np.arange(n - 1, dtype=np.int32),
        features=rng.random((n, dim)).astype(np.float32),
        labels=rng.integers(0, 3, n),
        train_idx=np.arange(10),
        val_idx=np.array([30]),
        test_idx=np.array([45, 50]),
        num_classes=3,
        num_nodes=n,
    )


def test_receptive_field_of_a_path():
    """Layer l of a 2-layer model reads the nodes within 2 - l hops of the targets."""
    data = _path()
    field = inference.receptive_field(data.indptr, data.indices, 60, np.array([50, 30]), 2)
    assert [f.tolist() for f in field] == [[28, 29, 30, 48, 49, 50], [29, 30, 49, 50], [30, 50]]
    every = np.arange(60)
    assert inference.receptive_field(data.indptr, data.indices, 60, every, 2) is None


@pytest.mark.parametrize("name", ["gat", "sage"])
def test_the_layer_loop_computes_only_the_receptive_field(monkeypatch, name):
    """A non-sum model's (GAT's) layers run over the targets' receptive field only (2 nodes at
    layer 0 for one target on a path, not all 60) and give the full forward's logits; a sum
    model's blocked layers restrict the same way."""
    data = _path()
    torch.manual_seed(0)
    model = build_model(name, in_dim=5, hidden=8, out_dim=3, num_layers=2, dropout=0.0).eval()
    computed: list[int] = []
    real = model.layer_forward

    def counting(layer, x, block):
        computed.append(int(block.num_dst)) if layer == 0 else None
        return real(layer, x, block)

    monkeypatch.setattr(model, "layer_forward", counting)
    got = inference.layerwise_inference(model, data, np.array([50]), batch_size=4)
    computed = computed[1:] if name == "gat" else computed  # (a dry run sizes the output)
    fb = full_graph_block(data.indptr, data.indices)
    with torch.no_grad():
        ref = model(torch.from_numpy(data.features), [fb, fb])[50:51].numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    if name == "gat":
        assert computed[:1] == [2]


def test_a_blocked_layers_output_holds_the_rows_the_next_layer_needs_only(monkeypatch):
    """Sum layers: layer 0's stored output for one target on a path is 2 rows (the target
    and its in-neighbour), not one row per node of the graph, and the logits are exact."""
    data = _path()
    torch.manual_seed(0)
    model = build_model("sage", in_dim=5, hidden=8, out_dim=3, num_layers=2, dropout=0.0).eval()
    shapes: list[tuple[int, int]] = []
    real = inference.Scratch.array

    def recording(self, rows, cols):
        shapes.append((rows, cols))
        return real(self, rows, cols)

    monkeypatch.setattr(inference.Scratch, "array", recording)
    monkeypatch.setattr(blocked, "KEEP_SHARE", 0.0)  # stored, not kept in memory
    got = inference.layerwise_inference(model, data, np.array([50]))
    assert [r for r, _ in shapes] == [2]
    fb = full_graph_block(data.indptr, data.indices)
    with torch.no_grad():
        ref = model(torch.from_numpy(data.features), [fb, fb])[50:51].numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
