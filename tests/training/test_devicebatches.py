"""Batches sampled and gathered on the model's device (``--sample-on device``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.training import TrainConfig, Trainer
from shoal.training.devicebatches import DeviceRows, device_memory_budget
from tests.training.test_trainer import cfg

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


@pytest.fixture
def graph(make_graph):
    """300 nodes in 3 communities, power-law-ish degrees, isolated nodes, a self-loop."""

    rng = np.random.default_rng(5)
    n = 300
    y = rng.integers(0, 3, n)
    src = rng.integers(0, n - 10, 3000)  # the last 10 nodes are isolated
    same = rng.random(3000) < 0.8
    dst = np.where(same, src, rng.integers(0, n - 10, 3000))
    pick = [np.flatnonzero(y[: n - 10] == y[s]) for s in src]
    dst = np.array([rng.choice(p) if ok else d for p, ok, d in zip(pick, same, dst)])
    e = np.stack([src, dst], 1)
    e = np.concatenate([e, e[:, ::-1], [[4, 4]]])
    x = rng.normal(size=(n, 6)).astype(np.float32) + y[:, None] * 0.7
    return make_graph(
        e, n, x=x, y=y, train=np.arange(200), val=np.arange(200, 250), test=np.arange(250, 300)
    )


def _data(graph):
    from shoal.training import TrainData

    return TrainData.from_graph_dir(graph)


def _fit(graph, **kw):
    t = Trainer(cfg(fanouts=(5, 3), batch_size=32, epochs=2, dropout=0.5, **kw), _data(graph))
    return t, t.fit()


@pytest.mark.parametrize("device", DEVICES)
def test_device_batches_train_the_host_batches_model(graph, device):
    """The same batches, so the same model: losses and accuracies of a run sampling on the
    device equal those of a run sampling on the host (float tolerance on a GPU)."""
    host_t, host = _fit(graph, device=device, sample_on="host")
    dev_t, dev = _fit(graph, device=device, sample_on="device")
    assert host_t.device_batches is None and dev_t.device_batches is None  # (dropped at the end)
    for a, b in zip(host.history, dev.history, strict=True):
        assert abs(a["loss"] - b["loss"]) < (1e-6 if device == "cpu" else 1e-4)
        assert a.get("val_accuracy") == b.get("val_accuracy")
        assert b["time_split"]["sampling"] > 0 and b["time_split"]["gather"] > 0
    assert host.test_accuracy == pytest.approx(dev.test_accuracy)


def test_device_batches_equal_the_host_loaders(graph):
    t = Trainer(cfg(fanouts=(5, 3), batch_size=32, sample_on="device"), _data(graph))
    host = [(b.mb.n_id.copy(), b.x.clone(), b.y.clone()) for b in t.loader.epoch(1)]
    dev = list(t.device_batches.epoch(1))
    assert len(dev) == len(host) == 7
    for (n_id, x, y), b in zip(host, dev, strict=True):
        assert np.array_equal(n_id, b.mb.n_id.numpy())
        assert torch.equal(x, b.x) and torch.equal(y, b.y)


class _Rows:
    """A host gatherer over a matrix that counts the rows it was asked for."""

    def __init__(self, x: np.ndarray) -> None:
        self.x, self.asked = x, 0

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        self.asked += len(ids)
        return torch.from_numpy(self.x[ids])


@pytest.mark.parametrize("device", DEVICES)
def test_a_partial_cache_holds_the_highest_degrees(device):
    """Room for 4 rows: the 4 highest in-degrees (a tie broken by id) are held on the device,
    the others gathered by the host's store; the rows equal the matrix's either way."""
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    deg = np.array([1, 9, 3, 9, 0, 7, 2, 8, 8, 5], np.float32)
    host = _Rows(x)
    rows = DeviceRows(host, num_rows=10, dim=4, degrees=deg, device=device, budget=4 * (16 + 4))
    assert rows.cached == 4 and host.asked == 4  # the fill
    cached = sorted(np.flatnonzero(rows.slot.cpu().numpy() >= 0).tolist())
    assert cached == [1, 3, 7, 8]
    ids = torch.tensor([8, 0, 1, 4, 4, 9], device=device)
    got = rows.gather(ids)
    assert torch.equal(got.cpu(), torch.from_numpy(x[[8, 0, 1, 4, 4, 9]]))
    assert (rows.rows_device, rows.rows_host, host.asked) == (2, 4, 8)
    assert rows.bytes_copied == 4 * 16


def test_every_row_fits_without_a_slot_map():
    x = np.ones((5, 2), np.float32)
    rows = DeviceRows(_Rows(x), num_rows=5, dim=2, degrees=np.zeros(5), device="cpu", budget=40)
    assert rows.slot is None and rows.cached == 5 and rows.nbytes == 40
    assert torch.equal(rows.gather(torch.tensor([4, 0])), torch.ones(2, 2))
    assert rows.rows_host == 0


def test_the_budget_defaults_to_nothing_on_the_cpu():
    assert device_memory_budget(torch.device("cpu"), None) == 0
    assert device_memory_budget(torch.device("cpu"), 123) == 123


def test_auto_samples_on_the_host_on_a_cpu(graph):
    assert Trainer(cfg(sample_on="auto", epochs=1), _data(graph)).device_batches is None


def test_config_checks_sample_on_and_the_device_memory():
    assert TrainConfig().run.sample_on == "auto"
    c = TrainConfig.from_options(sample_on="device", device_memory="2GiB")
    assert c.run.device_memory_bytes == 2 << 30
    with pytest.raises(ValueError, match="sample_on must be one of"):
        TrainConfig.from_options(sample_on="gpu")
    with pytest.raises(ValueError):
        TrainConfig.from_options(device_memory="lots")


def test_the_cli_takes_sample_on(graph, run_cli, tmp_path):
    import json

    out = tmp_path / "r.json"
    code, _, err = run_cli(
        "train",
        "--graph",
        str(graph.path),
        "--epochs",
        "1",
        "--fanouts",
        "3,2",
        "--sample-on",
        "device",
        "--device-memory",
        "1MiB",
        "--json",
        str(out),
    )
    assert code == 0, err
    r = json.loads(out.read_text())
    assert r["config"]["run"]["sample_on"] == "device"
    assert r["config"]["run"]["device_memory"] == "1MiB"
