"""Road-like lattice generator: the exact grid, determinism, degrees, scrambled ids."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.synth.road import RoadConfig, generate_road, road_edge_blocks
from shoal.errors import ShoalInputError


def _pairs(e: np.ndarray) -> set[tuple[int, int]]:
    return {(int(min(a, b)), int(max(a, b))) for a, b in e}


def test_full_grid_without_shortcuts_is_the_lattice():
    cfg = RoadConfig(width=4, height=3, keep=1.0, shortcuts=0.0, scramble=False)
    e = np.concatenate(list(road_edge_blocks(cfg)))
    want = {(v, v + 1) for v in range(12) if v % 4 < 3} | {(v, v + 4) for v in range(8)}
    assert e.shape == (len(want), 2) and _pairs(e) == want


def test_deterministic_undirected_and_scrambled(tmp_path):
    cfg = RoadConfig(width=30, height=20, seed=3)
    a = generate_road(tmp_path / "a", cfg)
    b = generate_road(tmp_path / "b", cfg)
    c = generate_road(tmp_path / "c", RoadConfig(width=30, height=20, seed=4))
    assert a.meta["files"]["edges.bin"] == b.meta["files"]["edges.bin"]
    assert a.meta["files"]["edges.bin"] != c.meta["files"]["edges.bin"]
    assert a.num_nodes == 600 and not a.directed
    e = np.asarray(a.edge_stream().memmap())
    # both directions stored, no self-loops
    assert _pairs(e) == _pairs(e[:, ::-1]) and not (e[:, 0] == e[:, 1]).any()
    assert np.array_equal(np.sort(e, axis=0), np.sort(e[:, ::-1], axis=0))
    # a scrambled lattice: the kept right-neighbour edges are no longer (v, v + 1)
    plain = np.concatenate(
        list(road_edge_blocks(RoadConfig(width=30, height=20, seed=3, scramble=False)))
    )
    assert np.mean(np.abs(plain[:, 0] - plain[:, 1]) == 1) > 0.4
    assert np.mean(np.abs(e[:, 0] - e[:, 1]) == 1) < 0.05


def test_degrees_are_road_like():
    cfg = RoadConfig(width=200, height=200, scramble=False)
    e = np.concatenate(list(road_edge_blocks(cfg)))
    deg = np.bincount(e.ravel(), minlength=cfg.nodes)
    # mean ~ 2 * (2 * keep + shortcuts) = 3.1, no hubs
    assert 2.9 < deg.mean() < 3.3 and deg.max() <= 12
    # shortcuts stay within reach
    w = cfg.width
    dr = np.abs(e[:, 0] // w - e[:, 1] // w)
    dc = np.abs(e[:, 0] % w - e[:, 1] % w)
    assert dr.max() <= cfg.reach and dc.max() <= cfg.reach


@pytest.mark.parametrize(
    "kw", [{"width": 1, "height": 5}, {"keep": 1.5}, {"shortcuts": -0.1}, {"reach": 0}]
)
def test_bad_config(kw):
    base = {"width": 5, "height": 5, **kw}
    with pytest.raises(ShoalInputError):
        RoadConfig(**base)


def test_cli_defaults_agree_and_it_writes_the_graph(run_cli, tmp_path):
    from shoal.cli.data_synth import ROAD_DEFAULTS

    d = RoadConfig(width=2, height=2)
    assert ROAD_DEFAULTS == (d.keep, d.shortcuts, d.reach)
    road = "data synth road --width 12 --height 9 --seed 3".split()
    code, out, err = run_cli(*road, "--out", tmp_path / "r")
    assert code == 0, err
    assert "road ->" in out and "108 nodes" in out
    api = generate_road(tmp_path / "api", RoadConfig(width=12, height=9, seed=3))
    cli = GraphDir.open(tmp_path / "r")
    assert cli.num_edges == api.num_edges  # the same graph: the same edges file
    assert cli.meta["files"]["edges.bin"] == api.meta["files"]["edges.bin"]
