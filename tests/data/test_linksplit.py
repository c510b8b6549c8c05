"""Edge splits for link prediction: disjoint, covering, pair-consistent, deterministic."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.linksplit import EdgeSplitConfig, edge_split_of, split_edges
from shoal.errors import ShoalInputError


def random_undirected(n: int, m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, size=(m, 2))
    e = e[e[:, 0] != e[:, 1]]
    return np.concatenate([e, e[:, ::-1]])


def as_counter(a: np.ndarray) -> Counter:
    return Counter(map(tuple, np.asarray(a).tolist()))


def test_split_of_is_a_function_of_the_unordered_pair():
    e = np.array([[3, 7], [7, 3], [3, 7], [5, 5], [0, 9]])
    s = edge_split_of(e, 0.3, 0.3, seed=1)
    assert s[0] == s[1] == s[2] and s[3] == 0
    many = np.random.default_rng(0).integers(0, 10**6, size=(20000, 2))
    a, b = edge_split_of(many, 0.3, 0.3, 1), edge_split_of(many[:, ::-1], 0.3, 0.3, 1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, edge_split_of(many, 0.3, 0.3, 2))  # the seed matters


def test_undirected_split_covers_every_edge_once(make_graph, tmp_path):
    e = random_undirected(300, 3000)
    n = 300
    x = np.random.default_rng(1).normal(size=(n, 4))
    g = make_graph(e, n, directed=False, x=x, y=np.arange(n) % 3, train=[0, 1], val=[2], test=[3])
    out = split_edges(g, tmp_path / "s", EdgeSplitConfig(val=0.1, test=0.2, seed=3))
    train = out.edge_stream().memmap()
    val, test = out.link_edges("val"), out.link_edges("test")
    assert (val[:, 0] < val[:, 1]).all() and (test[:, 0] < test[:, 1]).all()
    # every stored edge exactly once: training edges + both directions of each held-out pair
    both = lambda p: np.concatenate([p, p[:, ::-1]])  # noqa: E731
    assert as_counter(np.concatenate([train, both(val), both(test)])) == as_counter(e)
    # disjoint by pair, and a training edge's reverse is a training edge
    key = lambda p: {(min(a, b), max(a, b)) for a, b in np.asarray(p).tolist()}  # noqa: E731
    assert not (key(train) & key(val)) and not (key(train) & key(test))
    assert not (key(val) & key(test))
    assert as_counter(train) == as_counter(train[:, ::-1])
    # node data carried over; counts in meta; the fractions drawn are near the asked ones
    assert np.allclose(out.features(), x.astype(np.float32))
    assert out.split("train").tolist() == [0, 1] and out.num_classes == 3
    ls = out.meta["link_split"]
    assert (ls["val_edges"], ls["test_edges"]) == (len(val), len(test))
    assert abs(len(val) / (len(e) / 2) - 0.1) < 0.03 and abs(len(test) / (len(e) / 2) - 0.2) < 0.03
    GraphDir.open(tmp_path / "s", verify=True)  # checksums cover the held-out files


def test_directed_reverse_pairs_share_a_split_and_self_loops_stay(make_graph, tmp_path):
    e = np.array([[0, 1], [1, 0], [1, 2], [2, 3], [3, 3], [4, 0], [0, 4], [2, 4]] * 1)
    g = make_graph(e, 5, directed=True)
    for seed in range(20):
        out = split_edges(g, tmp_path / f"s{seed}", EdgeSplitConfig(val=0.3, test=0.3, seed=seed))
        train = as_counter(out.edge_stream().memmap())
        val, test = as_counter(out.link_edges("val")), as_counter(out.link_edges("test"))
        assert train + val + test == as_counter(e)  # directed: held out as given
        assert train[(3, 3)] == 1
        for part in (train, val, test):
            for u, v in part:
                if (v, u) in as_counter(e):
                    assert (v, u) in part  # a reciprocal pair is never split


def test_same_seed_same_split_and_nothing_held_out(make_graph, tmp_path):
    e = random_undirected(50, 200, seed=2)
    g = make_graph(e, 50, directed=False)
    a = split_edges(g, tmp_path / "a", EdgeSplitConfig(seed=7))
    b = split_edges(g, tmp_path / "b", EdgeSplitConfig(seed=7))
    assert np.array_equal(a.link_edges("test"), b.link_edges("test"))
    assert np.array_equal(a.edge_stream().memmap(), b.edge_stream().memmap())
    z = split_edges(g, tmp_path / "z", EdgeSplitConfig(val=0.0, test=0.0))
    assert np.array_equal(z.edge_stream().memmap(), g.edge_stream().memmap())
    assert z.link_edges("val").shape == (0, 2)


@pytest.mark.parametrize("kw", [dict(val=0.6, test=0.5), dict(val=-0.1), dict(test=1.0)])
def test_bad_fractions(kw):
    with pytest.raises(ShoalInputError):
        EdgeSplitConfig(**kw)


def test_cli(make_graph, tmp_path, run_cli):
    g = make_graph(random_undirected(40, 100), 40, directed=False)
    code, out, err = run_cli("data", "split-edges", g.path, "--out", tmp_path / "s", "--seed", "1")
    assert code == 0, err
    assert "val" in out and (tmp_path / "s" / "link_test.npy").exists()
    code, _, err = run_cli("data", "split-edges", g.path, "--out", tmp_path / "s")
    assert code == 2 and "exists" in err
    code, _, err = run_cli(
        "data", "split-edges", g.path, "--out", tmp_path / "t", "--val", "0.9", "--test", "0.2"
    )
    assert code == 2 and "no training edges" in err and not (tmp_path / "t").exists()
