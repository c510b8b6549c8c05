"""shoal.loader.NeighborLoader: PyG Data batches a PyG model trains on, trim_to_layer exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from torch_geometric.nn.models import GraphSAGE

from shoal.data.importers import import_graph
from shoal.loader import NeighborLoader
from shoal.store import Store

CORA = Path(__file__).resolve().parents[2] / "src/shoal/data/datasets/cora/graph.npz"


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    return import_graph(CORA, tmp_path_factory.mktemp("loader") / "cora")


def test_batches_have_pygs_layout(cora):
    loader = NeighborLoader(cora, [5, 3], batch_size=64, seed=1)
    edges = {(int(u), int(v)) for u, v in cora.edge_stream().memmap()}
    x_all, y_all = np.asarray(cora.features()), np.asarray(cora.labels())
    train = np.asarray(cora.split("train"))
    seen = []
    for d in loader:
        n = d.n_id.numpy()
        assert d.batch_size == len(d.input_id) and np.array_equal(
            n[: d.batch_size], train[d.input_id.numpy()]
        )
        assert sum(d.num_sampled_nodes) == len(n) and sum(d.num_sampled_edges) == d.num_edges
        assert np.allclose(d.x.numpy(), x_all[n]) and np.array_equal(d.y.numpy(), y_all[n])
        src, dst = d.edge_index.numpy()
        assert all((int(n[a]), int(n[b])) in edges for a, b in zip(src, dst, strict=True))
        hop1 = d.num_sampled_edges[0]
        assert dst[:hop1].max() < d.batch_size  # hop 1's edges point at the seeds
        seen.append(n[: d.batch_size])
    assert sorted(np.concatenate(seen).tolist()) == sorted(train.tolist())
    assert len(loader) == len(seen)


def test_pyg_graphsage_trains_and_trim_to_layer_is_exact(cora):
    torch.manual_seed(0)
    loader = NeighborLoader(cora, [10, 10], batch_size=70, seed=0)
    model = GraphSAGE(cora.feature_dim, 32, num_layers=2, out_channels=cora.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(15):
        for d in loader:
            opt.zero_grad()
            out = model(d.x, d.edge_index)[: d.batch_size]
            F.cross_entropy(out, d.y[: d.batch_size]).backward()
            opt.step()
    model.eval()
    test = NeighborLoader(cora, [-1, -1], input_nodes="test", batch_size=500, shuffle=False)
    correct = total = 0
    with torch.no_grad():
        for d in test:
            full = model(d.x, d.edge_index)[: d.batch_size]
            trimmed = model(
                d.x,
                d.edge_index,
                num_sampled_nodes_per_hop=d.num_sampled_nodes,
                num_sampled_edges_per_hop=d.num_sampled_edges,
            )[: d.batch_size]
            assert torch.allclose(full, trimmed, atol=1e-5)
            correct += int((full.argmax(1) == d.y[: d.batch_size]).sum())
            total += d.batch_size
    assert correct / total > 0.7  # full-neighbourhood test accuracy of a trained SAGE on Cora


def test_store_part_source(cora, tmp_path, run_cli):
    code, _, err = run_cli(
        "partition", cora.path, "--algo", "hash", "--parts", "2", "--out", tmp_path / "a"
    )
    assert code == 0, err
    code, _, err = run_cli(
        "store", "build", cora.path, tmp_path / "a", "--out", tmp_path / "s", "--halo-features"
    )
    assert code == 0, err
    part = Store.open(tmp_path / "s").part(1)
    d = next(iter(NeighborLoader(part, [3, 3], batch_size=16)))
    n = d.n_id.numpy()
    assert np.array_equal(
        n[: d.batch_size],
        part.local_to_global(np.flatnonzero(np.asarray(part.train_mask))[d.input_id.numpy()]),
    )
    assert (part.start <= n[: d.batch_size]).all()  # seeds are the part's core nodes
    with pytest.raises(ValueError, match="input_nodes"):
        NeighborLoader(part, [3], input_nodes="training")
