"""Tiny stores for the engine tests: a two-community graph with informative features, and a
typed IGBH-shaped graph with its stores (``typed``)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.store import build_store


def community_graph(make_graph, n: int = 48, seed: int = 0):
    """``n`` nodes in two communities (labels), dense inside, a few edges across; features are
    a noisy one-hot of the community; 16 train / 8 val / the rest test."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    edges = []
    for u in range(n):
        for v in range(u + 1, n):
            p = 0.25 if y[u] == y[v] else 0.03
            if rng.random() < p:
                edges += [(u, v), (v, u)]
    x = np.eye(2, dtype=np.float32)[y] + rng.normal(0, 0.8, (n, 2)).astype(np.float32)
    x = np.hstack([x, rng.normal(0, 1, (n, 2)).astype(np.float32)])
    idx = rng.permutation(n)
    return make_graph(
        edges,
        n,
        directed=False,
        x=x,
        y=y,
        train=np.sort(idx[:16]),
        val=np.sort(idx[16:24]),
        test=np.sort(idx[24:]),
    )


@pytest.fixture
def make_store(tmp_path, make_graph):
    """``make_store(node_part, halo_features=True)`` -> store path for the community graph.

    ``node_order="id"`` (the store's default): a one-part store numbers nodes as the graph
    does, so its training equals the single-process trainer's on the graph directory, batch
    for batch."""
    counter = [0]

    def make(
        node_part=None,
        *,
        parts: int = 2,
        halo_features: bool = True,
        graph=None,
        node_order: str = "id",
    ):
        counter[0] += 1
        g = graph or community_graph(make_graph)
        if node_part is None:
            node_part = np.arange(g.num_nodes) % parts
        node_part = np.asarray(node_part, dtype=np.int32)
        a = Assignment(node_part=node_part, num_parts=int(node_part.max()) + 1, algorithm="hand")
        adir = tmp_path / f"assign{counter[0]}"
        write_assignment(adir, a, g)
        out = tmp_path / f"store{counter[0]}"
        build_store(g, adir, out, halo_features=halo_features, node_order=node_order)
        return out

    return make


@pytest.fixture(scope="session")
def typed(tmp_path_factory):
    """An IGBH-shaped graph (a featureless type included), a one-part store and a
    three-part store with halo features."""
    root = tmp_path_factory.mktemp("typed_engines")
    cfg = IGBHConfig(scale=0.02, features=16, classes=4, seed=4, featureless=("conference",))
    g = generate_igbh(root / "g", cfg, show_progress=False)
    stores = {}
    for p, halo in ((1, False), (3, True)):
        part = np.random.default_rng(1).integers(0, p, g.num_nodes)
        write_assignment(root / f"a{p}", Assignment(part, p, "hash"), g)
        build_store(g, root / f"a{p}", root / f"s{p}", halo_features=halo, show_progress=False)
        stores[p] = str(root / f"s{p}")
    return g, stores
