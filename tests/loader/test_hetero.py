"""Typed mini-batches as PyG ``HeteroData`` from a typed graph directory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.loader.hetero import HeteroNeighborLoader

pyg_nn = pytest.importorskip("torch_geometric.nn")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    out = tmp_path_factory.mktemp("lh") / "g"
    cfg = IGBHConfig(scale=0.01, features=5, classes=3, featureless=("journal",))
    return generate_igbh(out, cfg, show_progress=False)


def test_a_one_hop_batch_holds_every_in_edge_of_its_seeds(graph):
    s = graph.schema
    seeds = np.array([4, 9, 30], np.int64)
    loader = HeteroNeighborLoader(graph, [-1], input_nodes=seeds, shuffle=False, batch_size=3)
    d = next(iter(loader))
    paper = d["paper"]
    assert paper.batch_size == 3 and paper.n_id[:3].tolist() == seeds.tolist()
    assert torch.equal(paper.input_id, torch.arange(3))
    assert torch.equal(paper.y, torch.from_numpy(np.asarray(graph.labels())[paper.n_id.numpy()]))
    x = np.asarray(graph.node_features("paper"))
    assert np.array_equal(paper.x.numpy(), x[paper.n_id.numpy()])
    if "journal" in d.node_types:  # a type without features has no x
        assert "x" not in d["journal"]
    # every stored edge into a seed, per relation, in type-local ids
    e = np.concatenate(list(graph.edge_stream()))
    rel = np.asarray(graph.relations())
    for r, et in enumerate(s.edge_types):
        if et.dst != "paper":
            continue
        want = sorted(
            (int(a) - s.node_type(et.src).offset, int(b))
            for (a, b) in e[(rel == r) & np.isin(e[:, 1], seeds)]
        )
        got = []
        if et.key in d.edge_types:
            ei = d[et.key].edge_index
            src_ids = d[et.src].n_id[ei[0]].tolist()
            got = sorted(zip(src_ids, d["paper"].n_id[ei[1]].tolist(), strict=True))
        assert got == want, et.relation
    loader.close()


def test_a_pyg_heterogeneous_model_trains_on_the_batches(graph):
    s = graph.schema
    loader = HeteroNeighborLoader(graph, [4, 3], batch_size=64, seed=1)
    convs = {
        e.key: pyg_nn.SAGEConv((-1, -1), 8) for e in s.edge_types if e.src != "journal"
    }  # journal has no features: leave its relations out of this little model
    conv = pyg_nn.HeteroConv(convs, aggr="sum")
    head = torch.nn.Linear(8, 3)
    d = next(iter(loader))
    xs = {t: d[t].x for t in d.node_types if "x" in d[t]}
    eis = {k: d[k].edge_index for k in d.edge_types if k in convs and k[0] in xs and k[2] in xs}
    out = conv(xs, eis)
    logits = head(out["paper"][: d["paper"].batch_size])
    loss = torch.nn.functional.cross_entropy(logits, d["paper"].y[: d["paper"].batch_size])
    loss.backward()
    assert torch.isfinite(loss) and logits.shape == (64, 3)
    assert len(loader) == -(-len(graph.split("train")) // 64)
