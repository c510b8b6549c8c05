"""A PyG ``HeteroData`` round trip through a typed graph directory keeps every type,
relation, feature, label and split."""

from __future__ import annotations

import pytest
import torch

from shoal.data.importers.pyg_hetero import from_hetero_data, to_hetero_data
from shoal.errors import ShoalInputError

pyg = pytest.importorskip("torch_geometric.data")


def _data():
    d = pyg.HeteroData()
    d["paper"].x = torch.randn(4, 3)
    d["paper"].y = torch.tensor([0, 1, 1, 0])
    d["paper"].train_mask = torch.tensor([True, True, False, False])
    d["paper"].test_mask = torch.tensor([False, False, False, True])
    d["author"].num_nodes = 3  # featureless
    d["field"].x = torch.randn(2, 5)
    d["author", "writes", "paper"].edge_index = torch.tensor([[0, 1, 2, 2], [0, 1, 2, 3]])
    d["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1], [1, 3]])
    d["paper", "has", "field"].edge_index = torch.tensor([[0, 3], [1, 0]])
    return d


def test_a_round_trip_keeps_every_type_relation_and_feature(tmp_path):
    d = _data()
    g = from_hetero_data(d, tmp_path / "g")
    assert g.schema.target == "paper" and g.num_nodes == 9
    back = to_hetero_data(g)
    assert back.node_types == d.node_types and back.edge_types == d.edge_types
    for t in d.node_types:
        assert back[t].num_nodes == d[t].num_nodes
        if "x" in d[t]:
            assert torch.equal(back[t].x, d[t].x)
        else:
            assert "x" not in back[t]
    for k in d.edge_types:
        assert torch.equal(back[k].edge_index, d[k].edge_index)
    assert torch.equal(back["paper"].y, d["paper"].y)
    assert torch.equal(back["paper"].train_mask, d["paper"].train_mask)
    assert torch.equal(back["paper"].test_mask, d["paper"].test_mask)
    assert "val_mask" not in back["paper"]  # no validation split was given


def test_reverse_relations_come_back_as_pyg_s_to_undirected_names(tmp_path):
    g = from_hetero_data(_data(), tmp_path / "g", add_reverse=True)
    back = to_hetero_data(g)
    assert ("paper", "rev_writes", "author") in back.edge_types
    rev = back["paper", "rev_writes", "author"].edge_index
    assert torch.equal(rev, _data()["author", "writes", "paper"].edge_index.flip(0))
    cites = back["paper", "cites", "paper"].edge_index  # made symmetric in place
    assert sorted(map(tuple, cites.T.tolist())) == [(0, 1), (1, 0), (1, 3), (3, 1)]


def test_an_edge_beyond_its_type_is_refused(tmp_path):
    d = _data()
    d["author", "writes", "paper"].edge_index = torch.tensor([[0, 3], [0, 1]])
    with pytest.raises(ShoalInputError, match=r"row 1: source id 3 is out of range for node "):
        from_hetero_data(d, tmp_path / "g")
    assert list(tmp_path.iterdir()) == []
