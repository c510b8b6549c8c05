"""Synthetic generators: determinism, the model's statistics, and GNN > MLP on the DC-SBM."""

import json

import numpy as np
import pytest

from shoal.data.info import graph_info
from shoal.data.synth import (
    GEN_BLOCK,
    DCSBMConfig,
    RMATConfig,
    dcsbm_edge_blocks,
    generate_dcsbm,
    generate_rmat,
    rmat_edge_blocks,
)
from shoal.errors import ShoalInputError


def test_rmat_deterministic_and_seeded(tmp_path):
    cfg = RMATConfig(nodes=1000, edges=5000, seed=3)
    a = generate_rmat(tmp_path / "a", cfg)
    b = generate_rmat(tmp_path / "b", cfg)
    c = generate_rmat(tmp_path / "c", RMATConfig(nodes=1000, edges=5000, seed=4))
    assert a.meta["files"]["edges.bin"] == b.meta["files"]["edges.bin"]
    assert a.meta["files"]["edges.bin"] != c.meta["files"]["edges.bin"]
    e = a.edge_stream().memmap()
    assert e.shape == (5000, 2) and e.min() >= 0 and e.max() < 1000  # N not a power of two


def test_rmat_quadrant_probabilities():
    # without scrambling the top bit of src is 1 with P = c + d, of dst with P = b + d
    cfg = RMATConfig(nodes=2**12, edges=200_000, scramble=False)
    e = np.concatenate(list(rmat_edge_blocks(cfg)))
    top = 2**11
    assert abs((e[:, 0] >= top).mean() - 0.24) < 0.01
    assert abs((e[:, 1] >= top).mean() - 0.24) < 0.01
    both = ((e[:, 0] >= top) & (e[:, 1] >= top)).mean()
    assert abs(both - 0.05) < 0.005
    # scrambling is a permutation of the ids: same degree multiset
    s = np.concatenate(list(rmat_edge_blocks(RMATConfig(nodes=2**12, edges=200_000))))
    d0 = np.sort(np.bincount(e[:, 0], minlength=2**12))
    d1 = np.sort(np.bincount(s[:, 0], minlength=2**12))
    assert np.array_equal(d0, d1)


def test_rmat_blocks_are_bounded():
    cfg = RMATConfig(nodes=100, edges=GEN_BLOCK + 10)
    sizes = [b.shape[0] for b in rmat_edge_blocks(cfg)]
    assert sizes == [GEN_BLOCK, 10]


def test_rmat_is_power_law_like_and_uniform_is_not(tmp_path, make_graph):
    g = generate_rmat(tmp_path / "r", RMATConfig(nodes=2**14, edges=2**18))
    pl = graph_info(g)["degree"]["power_law"]
    assert pl["power_law_like"] and pl["max_to_mean"] > 20
    rng = np.random.default_rng(0)
    u = make_graph(rng.integers(0, 2**14, size=(2**18, 2)), num_nodes=2**14)
    pl = graph_info(u)["degree"]["power_law"]
    assert not pl["power_law_like"] and pl["max_to_mean"] < 3


def test_rmat_node_data(tmp_path):
    g = generate_rmat(tmp_path / "r", RMATConfig(nodes=500, edges=2000, features=8, classes=4))
    assert g.features().shape == (500, 8) and g.num_classes == 4
    sizes = [g.split(s).shape[0] for s in ("train", "val", "test")]
    assert sizes == [50, 50, 400]


def test_rmat_config_validation():
    with pytest.raises(ShoalInputError, match="must be 1"):
        RMATConfig(nodes=10, edges=10, a=0.5)
    with pytest.raises(ShoalInputError, match="nodes"):
        RMATConfig(nodes=1, edges=10)


def test_dcsbm_statistics(tmp_path):
    cfg = DCSBMConfig(nodes=3000, edges=30000, classes=5, features=16, homophily=0.7, seed=1)
    g = generate_dcsbm(tmp_path / "s", cfg)
    assert g.num_edges == 60000 and not g.directed and g.meta["self_loops"] == 0
    e = g.edge_stream().memmap()
    y = np.asarray(g.labels())
    assert np.bincount(y).tolist() == [600] * 5
    assert abs((y[e[:, 0]] == y[e[:, 1]]).mean() - 0.7) < 0.02
    # heavy-tailed degrees
    deg = np.bincount(e[:, 0], minlength=3000)
    assert deg.max() > 8 * deg.mean()
    # features are class-correlated: class means differ, within-class noise is unit
    x = np.asarray(g.features())
    means = np.stack([x[y == c].mean(0) for c in range(5)])
    assert np.linalg.norm(means[0] - means[1]) > 0.5
    assert abs(x[y == 0].std(0).mean() - 1.0) < 0.1
    # splits: disjoint, covering
    idx = np.concatenate([g.split(s) for s in ("train", "val", "test")])
    assert np.array_equal(np.sort(idx), np.arange(3000))
    # deterministic
    g2 = generate_dcsbm(tmp_path / "t", cfg)
    assert g2.meta["files"] == {k: v for k, v in g.meta["files"].items()}


def test_dcsbm_blocks_have_no_self_loops():
    cfg = DCSBMConfig(nodes=50, edges=5000, classes=3)
    e = np.concatenate(list(dcsbm_edge_blocks(cfg)))
    assert e.shape == (5000, 2) and not (e[:, 0] == e[:, 1]).any()


def _train_acc(g, kind: str, epochs: int = 40, seed: int = 0) -> float:
    import torch
    from torch_geometric.nn import GCNConv

    torch.manual_seed(seed)
    ei = torch.from_numpy(np.asarray(g.edge_stream().memmap()).T.astype(np.int64))
    x = torch.from_numpy(np.array(g.features()))
    y = torch.from_numpy(np.array(g.labels()))
    tr, te = torch.from_numpy(g.mask("train")), torch.from_numpy(g.mask("test"))
    f, h, c = x.shape[1], 32, g.num_classes
    if kind == "gcn":
        l1, l2 = GCNConv(f, h), GCNConv(h, c)

        def fwd():
            return l2(torch.relu(l1(x, ei)), ei)
    else:
        l1, l2 = torch.nn.Linear(f, h), torch.nn.Linear(h, c)

        def fwd():
            return l2(torch.relu(l1(x)))

    opt = torch.optim.Adam([*l1.parameters(), *l2.parameters()], lr=0.02, weight_decay=5e-4)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(fwd()[tr], y[tr]).backward()
        opt.step()
    with torch.no_grad():
        return float((fwd().argmax(1)[te] == y[te]).float().mean())


@pytest.mark.slow
def test_dcsbm_gcn_beats_mlp(tmp_path):
    g = generate_dcsbm(tmp_path / "s", DCSBMConfig(nodes=4000, edges=40000, seed=0))
    gcn, mlp = _train_acc(g, "gcn"), _train_acc(g, "mlp")
    print(f"GCN {gcn:.3f} MLP {mlp:.3f}")
    assert gcn >= mlp + 0.10, (gcn, mlp)


def test_synth_cli(run_cli, tmp_path):
    rmat = "data synth rmat --nodes 300 --edges 900".split()
    code, out, err = run_cli(
        *rmat, "--out", tmp_path / "r", "--seed", "2", "--undirected", "--json", tmp_path / "r.json"
    )
    assert code == 0, err
    s = json.loads((tmp_path / "r.json").read_text())
    assert s["num_edges"] == 1800 and s["num_nodes"] == 300 and not s["directed"]
    dcsbm = "data synth dcsbm --nodes 300 --edges 900".split()
    code, out, err = run_cli(*dcsbm, "--classes", "3", "--features", "4", "--out", tmp_path / "s")
    assert code == 0, err and "dcsbm" in out
    code, out, err = run_cli(*dcsbm, "--homophily", "2", "--out", tmp_path / "bad")
    assert code == 2 and "--homophily" in err and not (tmp_path / "bad").exists()


def test_a_test_fraction_leaves_the_other_nodes_in_no_split(tmp_path, run_cli):
    """papers100M's shape: 1.1% train, 0.11% val, 0.19% test, every other node in no split;
    the train and val splits are those of the same seed without a test fraction."""
    base = dict(nodes=3000, edges=9000, classes=3, features=4, train_frac=0.011, val_frac=0.0011)
    full = generate_dcsbm(tmp_path / "full", DCSBMConfig(**base))
    part = generate_dcsbm(tmp_path / "part", DCSBMConfig(**base, test_frac=0.0019))
    assert [len(part.split(s)) for s in ("train", "val", "test")] == [33, 3, 6]
    for s in ("train", "val"):
        assert np.array_equal(part.split(s), full.split(s))
    assert set(part.split("test").tolist()) < set(full.split("test").tolist())
    assert len(full.split("test")) == 3000 - 36
    with pytest.raises(ShoalInputError, match="sum to <= 1"):
        DCSBMConfig(**{**base, "test_frac": 0.99})
    cmd = "data synth dcsbm --nodes 300 --edges 900 --train-frac 0.5 --test-frac 0.6".split()
    code, _, err = run_cli(*cmd, "--out", tmp_path / "bad")
    assert code == 2 and "no split" in err and not (tmp_path / "bad").exists()


def test_float16_features_are_the_float32_ones_rounded(tmp_path, run_cli):
    """``feature_dtype="float16"``: half the bytes, each value the float32 one rounded (the
    same random streams); the CLI takes it and refuses a dtype it cannot write."""
    base = dict(nodes=400, edges=1200, classes=3, features=8)
    x32 = generate_dcsbm(tmp_path / "a", DCSBMConfig(**base)).features()
    x16 = generate_dcsbm(tmp_path / "b", DCSBMConfig(**base, feature_dtype="float16")).features()
    assert x16.dtype == np.float16 and x32.dtype == np.float32
    assert np.array_equal(np.asarray(x16), np.asarray(x32).astype(np.float16))
    r = generate_rmat(
        tmp_path / "r", RMATConfig(nodes=64, edges=128, features=4, feature_dtype="float16")
    )
    assert r.features().dtype == np.float16
    with pytest.raises(ShoalInputError, match="feature_dtype"):
        DCSBMConfig(**base, feature_dtype="float8")
    cmd = "data synth dcsbm --nodes 300 --edges 900 --feature-dtype float16".split()
    code, _, err = run_cli(*cmd, "--out", tmp_path / "c")
    assert code == 0, err
    with pytest.raises(SystemExit) as e:  # argparse's choices: exit 2 with the valid ones
        run_cli(*cmd[:-1], "bfloat17", "--out", tmp_path / "d")
    assert e.value.code == 2
