"""The link task on every engine (issue 53: one task seam, :mod:`shoal.engines.linktask`):
positives per rank, typed target relations, and each engine trained end to end on an untyped
and a typed split store with 2 processes."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.distributed import DistContext
from shoal.engines.linktask import NegativeRanges, RankPositives
from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.store import Store, build_store
from shoal.training import TrainConfig
from tests.distributed.helpers import run_world

#: shoal's engines and the test fixture engine (tests/engines/fixture_engine: its own step)
ENGINES = ["minibatch", "averaging", "hec", "fullgraph", "disagg", "trivial"]
FIXTURE = "trivial=tests.engines.fixture_engine:SPEC"


def clusters_graph(make_graph, k: int = 6, size: int = 10, seed: int = 0):
    """``k`` cliquish clusters of ``size`` nodes (edges inside with probability 0.6, none
    across), features a noisy one-hot of the cluster: a link is predictable from the
    features, and a uniform negative is in the positive's cluster only ``1 / k`` of the time
    (with 100 negatives a random scorer's MRR is about 0.05, a cluster-aware one's about
    0.2)."""
    rng = np.random.default_rng(seed)
    n, c = k * size, np.arange(k * size) // size
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n) if c[u] == c[v]]
    kept = [p for p in pairs if rng.random() < 0.6]
    edges = kept + [(v, u) for u, v in kept]
    x = np.eye(k, dtype=np.float32)[c] + rng.normal(0, 0.3, (n, k)).astype(np.float32)
    return make_graph(edges, n, directed=False, x=x, y=c)


@pytest.fixture
def untyped_link(make_graph, tmp_path):
    """The clusters graph split for link prediction, and its 2-part store."""
    g = clusters_graph(make_graph)
    s = split_edges(g, tmp_path / "split", EdgeSplitConfig(val=0.1, test=0.1, seed=1))
    return s, _store(s, tmp_path / "u", np.arange(g.num_nodes) % 2)


@pytest.fixture(scope="module")
def typed_link(tmp_path_factory):
    """An IGBH-shaped graph (a featureless type included) split on ``cites``, and its
    3-part store."""
    root = tmp_path_factory.mktemp("typed_link")
    cfg = IGBHConfig(scale=0.02, features=16, classes=4, seed=4, featureless=("conference",))
    t = generate_igbh(root / "t", cfg, show_progress=False)
    split = EdgeSplitConfig(val=0.1, test=0.1, seed=1, target_relation="cites")
    ts = split_edges(t, root / "tsplit", split)
    return ts, _store(ts, root / "ty", np.random.default_rng(1).integers(0, 3, ts.num_nodes))


def _store(g, where, node_part) -> str:
    node_part = np.asarray(node_part, dtype=np.int32)
    a = Assignment(node_part=node_part, num_parts=int(node_part.max()) + 1, algorithm="hand")
    adir = where.parent / f"{where.name}-assign"
    write_assignment(adir, a, g)
    build_store(g, adir, where, halo_features=True, show_progress=False)
    return str(where)


def _cfg(typed: bool, **kw) -> TrainConfig:
    base = dict(
        model="rgcn" if typed else "sage",
        fanouts=(4, 4) if typed else (-1, -1),
        batch_size=64 if typed else 8,
        hidden=16 if typed else 8,
        epochs=3,
        lr=0.02,
        dropout=0.0,
        seed=5,
        progress=False,
        threads=1,
        task="link",
    )
    return TrainConfig.from_options(**{**base, **kw})


def _fit(rank: int, world: int, store: str, engine: str, typed: bool, kw: dict) -> dict:
    import os

    from shoal.engines import get_engine

    os.environ["SHOAL_ENGINES"] = FIXTURE  # the fixture engine, in this worker
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(typed, **kw)
    cls = get_engine(engine, cfg.task, typed=typed)
    return cls(Store.open(store), cfg, ctx).fit().to_json()


def test_the_fixture_engine_trains_the_node_task_on_a_typed_store(typed_link):
    """The fixture engine writes its own step and trains both tasks on both graph kinds (the
    node task on an untyped store: tests/engines/test_registry.py)."""
    _, store = typed_link
    out = run_world(_fit, 2, store, "trivial", True, {"task": "node", "epochs": 4}, timeout=300)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]
    assert out[0]["test_accuracy"] > 0.35, out[0]["test_accuracy"]  # 4 classes


def test_rank_positives_cover_every_training_pair_once(untyped_link):
    split, path = untyped_link
    store = Store.open(path)
    got = []
    for r in range(2):
        rp = RankPositives([store.part(r)], directed=False, rank=r, chunk_edges=7)
        batches = list(rp.epoch(0, 0, 4))
        assert len(batches) == 4 and sum(len(b) for b in batches) == rp.count
        got += [tuple(e) for b in batches for e in b.tolist()]
    flipped = np.mean([u > v for u, v in got])  # oriented at random: both ends anchor negatives
    assert 0.2 < flipped < 0.8
    e = store.to_orig(np.array(got)).reshape(-1, 2)
    orig = np.asarray(split.edge_stream().memmap())
    want = {(min(u, v), max(u, v)) for u, v in orig.tolist() if u != v}
    have = [(min(u, v), max(u, v)) for u, v in e.tolist()]
    assert len(have) == len(set(have)) and set(have) == want


def test_typed_positives_are_the_target_relations_edges(typed_link):
    split, path = typed_link
    store = Store.open(path)
    target = int(store.link_split["target_relation_index"])
    rel = np.asarray(split.relations())
    edges = np.asarray(split.edge_stream().memmap())[rel == target]
    got = []
    for i in range(store.num_parts):
        rp = RankPositives([store.part(i)], directed=True, rank=i, target=target)
        got += [tuple(e) for b in rp.epoch(0, 0, 3) for e in store.to_orig(b).tolist()]
    assert sorted(got) == sorted(map(tuple, edges.tolist()))
    # held-out edges and their fixed negatives are in the store, in new ids
    neg = store.link_negatives("test")
    assert neg is not None and len(neg) == len(store.link_edges("test"))
    dst = store.schema.edge_types[target].dst
    want = [t.name for t in store.schema.node_types].index(dst)
    assert (store.type_of(np.asarray(neg).ravel()) == want).all()


def test_negative_ranges_draw_uniformly_over_their_union():
    r = NegativeRanges(np.array([10, 50, 90]), np.array([2, 0, 3]))
    d = r.draw((4000, 1), np.random.default_rng(0)).ravel()
    assert set(np.unique(d).tolist()) == {10, 11, 90, 91, 92}
    counts = np.bincount(d - 10)
    assert counts[[0, 1, 80, 81, 82]].min() > 600  # about 800 each


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_trains_link_prediction_on_two_processes(untyped_link, engine):
    _, store = untyped_link
    # fullgraph takes one full-batch step an epoch
    epochs = 40 if engine == "fullgraph" else 8
    out = run_world(_fit, 2, store, engine, False, {"epochs": epochs}, timeout=300)
    assert out[0]["test_mrr"] == out[1]["test_mrr"]  # one result, every rank
    assert out[0]["engine"] == engine and out[0]["metric"] == "mrr"
    # 100 uniform negatives: a random scorer's MRR is about 0.05, a cluster-aware one's 0.2
    # (every engine 0.15-0.17 at seed 5)
    assert out[0]["test_mrr"] > 0.1, out[0]["test_mrr"]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_trains_link_prediction_on_a_typed_store(typed_link, engine):
    _, store = typed_link
    out = run_world(_fit, 2, store, engine, True, {"epochs": 2}, timeout=300)
    assert out[0]["test_mrr"] == out[1]["test_mrr"]
    assert 0 < out[0]["test_mrr"] <= 1 and np.isfinite(out[0]["history"][-1]["loss"])


def test_the_typed_distributed_sampler_never_uses_an_excluded_edge(typed_link):
    """One rank holding all three parts (the exclusions of every part it samples)."""
    from shoal.distributed import DistNeighborSampler
    from shoal.distributed.tables import NodeTables

    _, path = typed_link
    st = Store.open(path)
    p2r = np.zeros(st.num_parts, np.int64)
    parts = [st.part(i) for i in range(st.num_parts)]
    sampler = DistNeighborSampler(
        parts=parts,
        part_offsets=st.part_offsets,
        part_to_rank=p2r,
        rank=0,
        world_size=1,
        fanouts=[-1, -1],
        degrees=NodeTables(st, parts, part_to_rank=p2r, scope="local").degrees,
        schema=st.schema,
        type_of=st.type_of,
    )
    pos = next(RankPositives(parts, directed=True, target=0).epoch(0, 0, 1))[:40]
    seeds = np.unique(pos)
    full = sampler.sample(seeds, 3)
    ex = sampler.sample(seeds, 3, exclude=np.concatenate([pos, pos[:, ::-1]]))

    def used(mb):
        n_id = np.asarray(mb.n_id)
        b = mb.blocks[-1]  # the seeds' own in-edges
        return set(zip(n_id[b.edge_index[0].numpy()], n_id[b.edge_index[1].numpy()]))

    banned = {(int(u), int(v)) for u, v in pos} | {(int(v), int(u)) for u, v in pos}
    assert banned & used(full)  # the positives are there without exclusion
    assert not banned & used(ex)
    assert used(ex) == used(full) - banned  # every neighbour but the excluded edges


# (disagg refuses one process before it reads the options)
@pytest.mark.parametrize("engine", [e for e in ENGINES if e not in ("minibatch", "disagg")])
def test_learned_rows_are_refused_by_every_engine_but_minibatch(untyped_link, engine, monkeypatch):
    """``--embedding-dim`` is refused in one place (``Engine``), naming the engine that can."""
    from shoal.distributed import DistConfig, process_group
    from shoal.engines import get_engine
    from shoal.errors import ShoalInputError

    monkeypatch.setenv("SHOAL_ENGINES", FIXTURE)
    _, store = untyped_link
    cfg = _cfg(False, link={"embedding_dim": 8})
    cls = get_engine(engine, "link")
    with process_group(DistConfig()) as ctx, pytest.raises(ShoalInputError, match="minibatch"):
        cls(Store.open(store), cfg, ctx)
