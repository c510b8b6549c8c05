"""Partitioners on real shared graphs (skipped when ../shared/data is absent)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.importers import ImportConfig, import_graph
from shoal.partition.run import DEFAULT_OPTIONS, DEFAULT_REFINE_PASSES, run_partition


@pytest.fixture
def graph(shared_data, tmp_path):
    def get(name: str):
        cfg = ImportConfig(undirected=True, dedup=True, drop_self_loops=True)
        return import_graph(shared_data(name), tmp_path / name, cfg)

    return get


@pytest.mark.parametrize("name", ["cora", "amazon_photo"])
def test_default_close_to_metis_and_far_from_hash(graph, name):
    g = graph(name)
    metis = run_partition(g, "metis", num_parts=4).metrics
    default = run_partition(
        g, "grem", num_parts=4, refine_passes=DEFAULT_REFINE_PASSES, **DEFAULT_OPTIONS
    ).metrics
    hashed = run_partition(g, "hash", num_parts=4).metrics
    # measured (p = 4): cora 0.099 vs METIS 0.063 vs hash 0.756 (the one-window seed covers
    # little of a graph this small); amazon_photo 0.078 vs 0.078 vs 0.751
    assert default["edge_cut"] <= 1.7 * metis["edge_cut"]
    assert default["edge_cut"] < 0.3 * hashed["edge_cut"]
    assert default["node_balance"] <= 1.10 + 1e-9
    assert default["train_balance"] <= 1.10 + 1e-9


def test_grem_refinement_beats_fixed_greedy(graph):
    # measured: 0.105 with refinement vs 0.238 fixed greedy (1% windows, p = 4)
    g = graph("amazon_photo")
    opts = {"num_parts": 4, "window": 0.01}
    refined = run_partition(g, "grem", **opts).metrics["edge_cut"]
    fixed = run_partition(g, "grem", refine=False, **opts).metrics["edge_cut"]
    assert refined <= 0.8 * fixed


def test_refinement_never_worsens_the_cut(graph):
    g = graph("cora")
    for algo in ("spring", "hash", "grem"):
        a = run_partition(g, algo, num_parts=8).metrics["edge_cut"]
        b = run_partition(g, algo, num_parts=8, refine_passes=3).metrics["edge_cut"]
        assert b <= a
    assert np.isfinite(a)
