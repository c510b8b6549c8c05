"""``--halo-hops``: a part grown by its halo nodes' own in-edges and rows, fetched once; on a
typed store and on an untyped one alike (a grown part is a part with more halo in-edges and
more rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from shoal.data.graphdir import GraphDir
from shoal.distributed import DistContext
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.averaging.engine import AveragingEngine
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer
from tests.distributed.helpers import run_world


@pytest.fixture
def untyped(make_graph, make_store):
    """The community graph and its store of 3 parts with halo features."""
    from tests.engines.conftest import community_graph

    g = community_graph(make_graph, n=90)
    return g, str(make_store(parts=3, graph=g))


def _grow(
    rank: int, world: int, store: str, hops: int, work: str, step_edges: int, idle: bool = False
) -> list:
    """Every part of this rank grown, as plain arrays; and the edges of a local sampler with
    every neighbour (fanout -1) on the grown part next to the distributed sampler's."""
    from shoal.distributed import DistFeatureStore, DistNeighborSampler
    from shoal.distributed.tables import NodeTables
    from shoal.engines.averaging.halo_hops import grow_parts
    from shoal.engines.base import parts_of_rank
    from shoal.rows.gather import source_rows
    from shoal.rows.parts import part_rows
    from shoal.sample.sampler import NeighborSampler

    st = Store.open(store)
    typed = st.schema is not None
    p2r = parts_of_rank(st.num_parts, world, None) if not idle else np.zeros(st.num_parts, int)
    parts = [st.part(int(i)) for i in np.flatnonzero(p2r == rank)]
    tables = NodeTables(st, parts, part_to_rank=p2r, scope="local")

    def dist_sampler(fanouts):
        return DistNeighborSampler(
            parts=parts,
            part_offsets=st.part_offsets,
            part_to_rank=p2r,
            rank=rank,
            world_size=world,
            fanouts=fanouts,
            degrees=tables.degrees,
            schema=st.schema,
            type_of=st.type_of if typed else None,
        )

    pulls = DistFeatureStore(
        part_offsets=st.part_offsets,
        part_to_rank=p2r,
        rank=rank,
        world_size=world,
        local_parts={p.index: part_rows(p) for p in parts},
        feature_dim=int(st.feature_dim),
    )
    mine = Path(work) / f"rank{rank}"
    mine.mkdir()
    grown = grow_parts(
        parts,
        hops,
        sampler=dist_sampler([-1]),
        pulls=pulls,
        tables=tables,
        work=mine,
        world_size=world,
        step_edges=step_edges,
        step_rows=7,  # many exchange steps, ranks with different counts of them
    )
    full = dist_sampler([-1, -1])
    most = torch.tensor([len(grown)])
    if world > 1:  # every rank samples as many times as the rank with the most parts
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
    out = []
    for i in range(int(most)):
        if i >= len(grown):
            full.sample(np.empty(0, np.int64), 3)
            continue
        g = grown[i]
        seeds = np.flatnonzero(np.asarray(g.part.train_mask))[:25]
        deg = np.asarray(tables.degrees[g.ids], np.float32)
        local = NeighborSampler(
            g.indptr,
            g.indices,
            [-1, -1],
            num_nodes=g.num_nodes,
            degrees=deg,
            schema=st.schema,
            node_type=g.node_type,
            edge_types=g.edge_types,
        ).sample(seeds, 3)
        edges = _edges(g.orig_ids[np.asarray(local.n_id)], local)
        ref = full.sample(seeds + g.part.start, 3)  # collective
        ref_edges = _edges(st.to_orig(ref.n_id), ref)
        src = g.rows()
        out.append(
            {
                "orig": np.asarray(g.orig_ids),
                "indptr": np.asarray(g.indptr),
                "indices": np.asarray(g.indices),
                "etypes": None if g.edge_types is None else np.asarray(g.edge_types),
                "rows": source_rows(src, np.arange(src.num_rows)).copy(),
                "num_core": g.num_core,
                "num_stored": g.num_stored,
                "edges": edges,
                "ref_edges": ref_edges,
            }
        )
        src.close()
    return out


def _edges(orig: np.ndarray, mb) -> list[set]:
    """Per block, the set of (source, target, relation) in original ids (relation 0 when
    untyped)."""
    out = []
    for b in mb.blocks:
        src, dst = b.edge_index[0].numpy(), b.edge_index[1].numpy()
        rel = np.zeros(len(src), np.int64) if b.edge_type is None else b.edge_type.numpy()
        out.append(set(zip(orig[src].tolist(), orig[dst].tolist(), rel.tolist(), strict=True)))
    return out


def _in_edges(g: GraphDir) -> dict[int, list[tuple[int, int]]]:
    """Every node's in-edges (source, relation) of the graph."""
    truth: dict[int, list[tuple[int, int]]] = {}
    if g.schema is None:
        csr = g.csr("in")
        indptr, indices = csr.indptr, csr.indices
        for d in range(g.num_nodes):
            truth[d] = [(int(s), 0) for s in indices[indptr[d] : indptr[d + 1]]]
        return truth
    edges = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations(), np.int64)
    for (s, d), r in zip(edges.tolist(), rel.tolist(), strict=True):
        truth.setdefault(d, []).append((s, r))
    return truth


def _graph_rows(g: GraphDir, orig: np.ndarray) -> np.ndarray:
    """The input rows of original ids ``orig``: a typed graph's padded to its widest type."""
    if g.schema is None:
        return np.asarray(g.features())[orig]
    dims = [nt.feature_dim or 0 for nt in g.schema.node_types]
    out = np.zeros((len(orig), max(dims)), np.float32)
    types = g.schema.type_of(orig)
    for t, nt in enumerate(g.schema.node_types):
        x = g.node_features(nt.name)
        if x is not None:
            on = types == t
            out[on, : x.shape[1]] = np.asarray(x)[orig[on] - nt.offset]
    return out


def _reach(truth: dict, start: set, hops: int) -> set:
    """The nodes at most ``hops`` in-edges away from ``start`` (``start`` included)."""
    seen, frontier = set(start), set(start)
    for _ in range(hops):
        frontier = {s for d in frontier for s, _ in truth.get(d, [])} - seen
        seen |= frontier
    return seen


def _check_grown(g: GraphDir, gp: dict, hops: int) -> None:
    truth = _in_edges(g)
    orig, indptr = gp["orig"], gp["indptr"]
    core = set(orig[: gp["num_core"]].tolist())
    assert set(orig.tolist()) == _reach(truth, core, hops)  # every node hops deep, once
    assert len(set(orig.tolist())) == len(orig)
    with_rows = set(orig[: len(indptr) - 1].tolist())
    assert with_rows == _reach(truth, core, hops - 1)
    if hops == 1:
        assert len(orig) == gp["num_stored"] and len(indptr) - 1 == gp["num_core"]
    for v in range(len(indptr) - 1):  # each row: the node's in-edges, by relation
        a, b = indptr[v], indptr[v + 1]
        rel = gp["etypes"][a:b] if gp["etypes"] is not None else np.zeros(b - a, np.int64)
        row = sorted(zip(orig[gp["indices"][a:b]].tolist(), rel.tolist()))
        assert row == sorted(truth.get(int(orig[v]), [])), v
        assert np.all(np.diff(rel.astype(np.int64)) >= 0)
    # every local node's row, the grown ones too, through the one row source
    assert np.array_equal(gp["rows"], _graph_rows(g, orig))
    # with rows two hops deep, a local sampler takes every neighbour the graph has
    if hops >= 2:
        assert gp["edges"] == gp["ref_edges"]
    else:  # the stored part: its halo nodes have no in-edges
        assert gp["edges"][1] == gp["ref_edges"][1]
        assert gp["edges"][0] < gp["ref_edges"][0]


@pytest.mark.parametrize("hops", [1, 3])  # 2 hops: test_a_rank_without_parts_joins_every_exchange
def test_grown_typed_parts_hold_the_graphs_in_edges_and_rows_hops_deep(typed, tmp_path, hops):
    g, stores = typed
    # 3 parts on 2 ranks: rank 0 grows two parts, rank 1 one; exchange steps of 50 edges
    grown = [x for r in run_world(_grow, 2, stores[3], hops, str(tmp_path), 50) for x in r]
    assert len(grown) == 3
    for gp in grown:
        _check_grown(g, gp, hops)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_grown_untyped_parts_hold_the_graphs_in_edges_and_rows_hops_deep(untyped, tmp_path, hops):
    g, store = untyped
    grown = [x for r in run_world(_grow, 2, store, hops, str(tmp_path), 20) for x in r]
    assert len(grown) == 3
    for gp in grown:
        assert gp["etypes"] is None
        _check_grown(g, gp, hops)


def test_a_rank_without_parts_joins_every_exchange(typed, tmp_path):
    """Rank 0 grows all three parts, rank 1 (no parts) serves their in-edges and rows."""
    g, stores = typed
    out = run_world(_grow, 2, stores[3], 2, str(tmp_path), 1 << 20, True)
    assert len(out[0]) == 3 and out[1] == []
    truth = _in_edges(g)
    for gp in out[0]:
        core = set(gp["orig"][: gp["num_core"]].tolist())
        assert set(gp["orig"].tolist()) == _reach(truth, core, 2)
        assert gp["edges"] == gp["ref_edges"]


def _cfg(typed: bool, **kw) -> TrainConfig:
    opts = dict(fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
    if typed:
        opts["model"] = "rgcn"
    else:  # the untyped engine draws dropout from torch's stream, the trainer keyed masks
        opts.update(batch_size=8, dropout=0.0)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, "seed": 2, **kw})


def _fit(rank: int, world: int, store: str, hops: int | str, epochs: int) -> dict:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    st = Store.open(store)
    cfg = _cfg(st.schema is not None, epochs=epochs, engine=AveragingConfig(halo_hops=hops))
    return AveragingEngine(st, cfg, ctx).fit().to_json()


@pytest.mark.parametrize("kind", ["typed", "untyped"])
def test_one_part_with_halo_hops_trains_as_the_single_process_trainer(
    typed, make_graph, make_store, kind
):
    """The grown part (its CSR copied to the scratch directory) samples as the stored one."""
    from tests.engines.conftest import community_graph

    if kind == "typed":
        g, stores = typed
        store = stores[1]
    else:
        g = community_graph(make_graph)
        store = str(make_store(parts=1, graph=g))
    ref = Trainer(_cfg(kind == "typed"), TrainData.from_graph_dir(g)).fit().to_json()
    (got,) = run_world(_fit, 1, store, 2, 3)
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-5
    )
    assert got["config"]["halo_hops"] == 2


def test_two_processes_with_halo_hops_learn_the_relational_signal(typed):
    """The typed default (auto: min(2, layers) = 2) grows the parts."""
    _, stores = typed
    out = run_world(_fit, 2, stores[3], "auto", 8, timeout=300)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]
    assert out[0]["test_accuracy"] > 0.6, out[0]["test_accuracy"]
    assert out[0]["config"]["halo_hops"] == 2


def _first_batches(rank: int, world: int, store: str, graph: str, hops: int) -> list[float]:
    """Per part of this rank: the largest difference between the model's outputs on the
    part's first training batch (fanouts -1, sampled locally) and on the graph's full
    neighbourhoods of the same seeds (the single-process sampler on the graph)."""
    from shoal.rows.gather import source_rows
    from shoal.sample.sampler import NeighborSampler

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    st = Store.open(store)
    typed = st.schema is not None
    cfg = _cfg(
        typed,
        fanouts=(-1, -1),
        dropout=0.0,
        normalize_features=False,
        engine=AveragingConfig(halo_hops=hops),
    )
    eng = AveragingEngine(st, cfg, ctx)
    data = TrainData.from_graph_dir(graph)
    full = NeighborSampler(
        data.indptr, data.indices, [-1, -1], num_nodes=data.num_nodes, schema=data.schema
    )
    model = eng.model.eval()
    out = []
    with torch.no_grad():
        for i, loader in enumerate(eng.loaders):
            batch = next(iter(loader.epoch(0)))
            orig = eng.store.to_orig(eng.grown[i].ids if eng.grown[i] else _local(eng.parts[i]))
            n_id = orig[np.asarray(batch.mb.n_id)]
            got = model(batch.x, batch.mb.with_node_ids(n_id))
            mb = full.sample(n_id[: batch.mb.num_seeds], 0)
            x = data.features
            x = source_rows(x, mb.n_id) if data.schema is not None else np.asarray(x)[mb.n_id]
            want = model(torch.from_numpy(np.ascontiguousarray(x)), mb.with_node_ids())
            out.append(float((got - want).abs().max()))
    eng.close_io()
    return out


def _local(part) -> np.ndarray:
    return np.concatenate([part.core_ids, np.asarray(part.halo_ids, np.int64)])


@pytest.mark.parametrize("kind", ["typed", "untyped"])
def test_grown_parts_train_on_the_graphs_neighbourhoods(typed, untyped, kind):
    """With as many hops as layers and every neighbour drawn, a part's local batches are the
    graph's full neighbourhoods (the model's outputs equal); the stored part's (1 hop) are
    not: its halo nodes have no in-edges."""
    if kind == "typed":
        g, stores = typed
        store = stores[3]
    else:
        g, store = untyped
    deep = [d for r in run_world(_first_batches, 2, store, str(g.path), 2) for d in r]
    assert len(deep) == 3 and max(deep) < 1e-5, deep
    flat = [d for r in run_world(_first_batches, 2, store, str(g.path), 1) for d in r]
    assert min(flat) > 1e-3, flat


def test_halo_hops_resolve_per_graph_kind():
    with pytest.raises(ValueError, match="halo_hops"):
        AveragingConfig(halo_hops=0)
    auto = AveragingConfig()
    assert auto.resolve_halo_hops(typed=False, num_layers=3) == 1  # untyped results unchanged
    assert auto.resolve_halo_hops(typed=True, num_layers=3) == 2
    assert auto.resolve_halo_hops(typed=True, num_layers=1) == 1
    assert AveragingConfig(halo_hops=3).resolve_halo_hops(typed=False, num_layers=2) == 3
