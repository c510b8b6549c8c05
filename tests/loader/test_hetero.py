"""Typed mini-batches as PyG ``HeteroData`` from a typed graph directory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
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


def test_a_pyg_heterogeneous_model_batches_the_igbh_graph(graph):
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
    logits = head(conv(xs, eis)["paper"][: d["paper"].batch_size])
    assert logits.shape == (64, 3)
    assert len(loader) == -(-len(graph.split("train")) // 64)
    loader.close()


def test_the_loader_draws_the_trainers_batches_and_each_relations_fanout(graph):
    """The batches of the trainer's sampler (a schema's NeighborSampler, the same seed);
    a relation with its own fanout draws fewer edges."""
    from shoal.sample.sampler import NeighborSampler
    from shoal.training.batches import batch_seed

    loader = HeteroNeighborLoader(graph, [4, 3], batch_size=32, shuffle=False, seed=5)
    d = next(iter(loader))
    csr = graph.csr("in")
    mb = NeighborSampler(csr.indptr, csr.indices, [4, 3], schema=graph.schema).sample(
        loader.seeds[:32], batch_seed(5, 0, 0)
    )
    paper = graph.schema.node_type("paper")
    on = graph.schema.type_of(mb.n_id) == graph.schema.type_index("paper")
    assert d["paper"].n_id.tolist() == (mb.n_id[on] - paper.offset).tolist()
    assert sum(d[k].edge_index.shape[1] for k in d.edge_types) == sum(
        b.num_edges for b in mb.blocks
    )
    cites = ("paper", "cites", "paper")
    few = HeteroNeighborLoader(
        graph, [4, 3], relation_fanouts={"cites": [1, 1]}, batch_size=32, shuffle=False, seed=5
    )
    e = next(iter(few))
    assert 0 < e[cites].edge_index.shape[1] < d[cites].edge_index.shape[1]
    loader.close()
    few.close()


WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")


@pytest.fixture(scope="module")
def authored(tmp_path_factory):
    """240 papers in 3 classes, each written by 3 of the 20 authors of its class and citing 2
    random papers; an author's features are a noisy one-hot of its class, a paper's are noise:
    only the authors tell a paper's class."""
    rng = np.random.default_rng(0)
    papers, authors, k = 240, 60, 3
    y = rng.integers(0, k, papers)
    author_class = np.arange(authors) % k
    writes = [
        (int(a), p)
        for p in range(papers)
        for a in rng.choice(np.flatnonzero(author_class == y[p]), 3, replace=False)
    ]
    cites = np.stack([rng.integers(0, papers, 2 * papers), np.repeat(np.arange(papers), 2)], 1)
    xa = np.eye(k, 4, dtype=np.float32)[author_class] + rng.normal(0, 0.3, (authors, 4))
    schema = HeteroSchema.of({"paper": papers, "author": authors}, [WRITES, CITES])
    out = tmp_path_factory.mktemp("authored") / "g"
    with HeteroGraphWriter(out, schema) as w:
        w.add_relation(WRITES, writes)
        w.add_relation(CITES, cites)
        w.write_node_features("paper", rng.normal(0, 1, (papers, 4)).astype(np.float32))
        w.write_node_features("author", xa.astype(np.float32))
        w.write_labels(y, num_classes=k)
        w.write_split("train", np.arange(0, papers, 2))
        w.write_split("test", np.arange(1, papers, 2))
    return GraphDir.open(out)


def _accuracy(g, edges) -> float:
    """Test accuracy of a HeteroConv model trained 5 epochs on the loader's batches, each
    batch's edge dict passed through ``edges`` first (the control's corruption)."""
    torch.manual_seed(0)
    conv = pyg_nn.HeteroConv({e: pyg_nn.SAGEConv((-1, -1), 16) for e in (WRITES, CITES)})
    head = torch.nn.Linear(16, 3)

    def logits(d):
        xs = {t: d[t].x for t in d.node_types}
        eis = edges({k: d[k].edge_index for k in d.edge_types}, d)
        return head(conv(xs, eis)["paper"][: d["paper"].batch_size])

    train = HeteroNeighborLoader(g, [3], batch_size=40, seed=1)
    logits(next(iter(train)))  # the lazy layers' sizes
    opt = torch.optim.Adam([*conv.parameters(), *head.parameters()], lr=0.05)
    for _ in range(5):
        for d in train:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                logits(d), d["paper"].y[: d["paper"].batch_size]
            )
            loss.backward()
            opt.step()
    test = HeteroNeighborLoader(g, [3], input_nodes="test", batch_size=60, shuffle=False)
    with torch.no_grad():
        hits = [(logits(d).argmax(1) == d["paper"].y[: d["paper"].batch_size]) for d in test]
    train.close()
    test.close()
    return float(torch.cat(hits).float().mean())


def _without_authors(eis, d):
    return {k: v for k, v in eis.items() if k != WRITES}


def _other_authors(eis, d):
    ei = eis[WRITES].clone()
    ei[0] = ei[0][torch.randperm(ei.shape[1])]  # a loader that mixed up the sources
    return {**eis, WRITES: ei}


@pytest.mark.filterwarnings("ignore:There exist node types")  # authors are sources only
def test_a_pyg_heterogeneous_model_learns_what_only_the_other_type_tells(authored):
    # chance is 1/3: the paper's own features and citations carry nothing of its class
    assert _accuracy(authored, lambda eis, d: eis) >= 0.9
    assert _accuracy(authored, _without_authors) < 0.55
    assert _accuracy(authored, _other_authors) < 0.55
