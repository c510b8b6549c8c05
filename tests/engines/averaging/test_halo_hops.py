"""``--halo-hops``: a typed part grown by its halo nodes' own in-edges and rows, fetched once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from shoal.distributed import DistConfig, DistContext, process_group
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.averaging.engine import AveragingEngine
from shoal.errors import ShoalInputError
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.typed import TypedTrainer
from tests.distributed.helpers import run_world


def _grow(
    rank: int, world: int, store: str, hops: int, work: str, step_edges: int, idle: bool = False
) -> list:
    """Every part of this rank grown, as plain arrays; and the edges of a local sampler with
    every neighbour (fanout -1) on the grown part next to the distributed sampler's."""
    from shoal.distributed.tables import NodeTables
    from shoal.distributed.typed import DistTypedFeatures, DistTypedSampler
    from shoal.engines.averaging.halo_hops import grow_parts
    from shoal.engines.base import parts_of_rank
    from shoal.sample.typed import PartTypedSampler

    st = Store.open(store)
    p2r = parts_of_rank(st.num_parts, world, None) if not idle else np.zeros(st.num_parts, int)
    parts = [st.part(int(i)) for i in np.flatnonzero(p2r == rank)]
    tables = NodeTables(st, parts, part_to_rank=p2r, scope="local")

    def dist_sampler(fanouts):
        return DistTypedSampler(
            store=st,
            parts=parts,
            part_offsets=st.part_offsets,
            part_to_rank=p2r,
            rank=rank,
            world_size=world,
            fanouts=fanouts,
            degrees=tables.degrees,
        )

    pulls = DistTypedFeatures(store=st, parts=parts, part_to_rank=p2r, rank=rank, world_size=world)
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
        local = PartTypedSampler(g, g.node_type, [-1, -1], degrees=deg).sample(seeds, 3)
        edges = _edges(g.orig_ids[np.asarray(local.n_id)], local)
        ref = full.sample(seeds + g.part.start, 3)  # collective
        ref_edges = _edges(st.to_orig(ref.n_id), ref)
        out.append(
            {
                "orig": np.asarray(g.orig_ids),
                "indptr": np.asarray(g.indptr),
                "indices": np.asarray(g.indices),
                "etypes": np.asarray(g.edge_types),
                "extra": [None if x is None else np.asarray(x) for x in g.extra],
                "num_core": g.num_core,
                "num_stored": g.num_stored,
                "edges": edges,
                "ref_edges": ref_edges,
            }
        )
    return out


def _edges(orig: np.ndarray, tb) -> list[set]:
    """Per block, the set of (source, target, relation) in original ids."""
    return [
        set(
            zip(
                orig[b.edge_index[0].numpy()].tolist(),
                orig[b.edge_index[1].numpy()].tolist(),
                et.numpy().tolist(),
                strict=True,
            )
        )
        for b, et in zip(tb.blocks, tb.edge_types, strict=True)
    ]


def _in_edges(g) -> dict[int, list[tuple[int, int]]]:
    edges = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations(), np.int64)
    truth: dict[int, list[tuple[int, int]]] = {}
    for (s, d), r in zip(edges.tolist(), rel.tolist(), strict=True):
        truth.setdefault(d, []).append((s, r))
    return truth


def _reach(truth: dict, start: set, hops: int) -> set:
    """The nodes at most ``hops`` in-edges away from ``start`` (``start`` included)."""
    seen, frontier = set(start), set(start)
    for _ in range(hops):
        frontier = {s for d in frontier for s, _ in truth.get(d, [])} - seen
        seen |= frontier
    return seen


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_grown_parts_hold_the_graphs_in_edges_and_rows_hops_deep(typed, tmp_path, hops):
    g, stores = typed
    truth = _in_edges(g)
    schema = g.schema
    # 3 parts on 2 ranks: rank 0 grows two parts, rank 1 one; exchange steps of 50 edges
    grown = [x for r in run_world(_grow, 2, stores[3], hops, str(tmp_path), 50) for x in r]
    assert len(grown) == 3
    for gp in grown:
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
            row = sorted(zip(orig[gp["indices"][a:b]].tolist(), gp["etypes"][a:b].tolist()))
            assert row == sorted(truth.get(int(orig[v]), [])), v
            assert np.all(np.diff(gp["etypes"][a:b].astype(np.int64)) >= 0)
        deep = orig[gp["num_stored"] :]
        types = schema.type_of(deep)
        for t, nt in enumerate(schema.node_types):
            x = g.node_features(nt.name)
            if x is None:
                assert gp["extra"][t] is None
                continue
            ids = deep[types == t] - nt.offset
            assert np.array_equal(gp["extra"][t], np.asarray(x)[ids])
        # with rows two hops deep, a local sampler takes every neighbour the graph has
        if hops >= 2:
            assert gp["edges"] == gp["ref_edges"]
        else:  # the stored part: its halo nodes have no in-edges
            assert gp["edges"][1] == gp["ref_edges"][1]
            assert gp["edges"][0] < gp["ref_edges"][0]


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


def _cfg(**kw) -> TrainConfig:
    opts = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, "seed": 2, **kw})


def _fit(rank: int, world: int, store: str, hops: int, epochs: int) -> dict:
    from shoal.engines import get_engine

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(epochs=epochs, engine=AveragingConfig(halo_hops=hops))
    return get_engine("averaging", typed=True)(Store.open(store), cfg, ctx).fit().to_json()


def test_one_part_with_halo_hops_trains_as_the_single_process_trainer(typed):
    """The grown part (its CSR copied to the scratch directory) samples as the stored one."""
    g, stores = typed
    ref = TypedTrainer(_cfg(), g).fit().to_json()
    (got,) = run_world(_fit, 1, stores[1], 2, 3)
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-5
    )


def test_two_processes_with_halo_hops_learn_the_relational_signal(typed):
    _, stores = typed
    out = run_world(_fit, 2, stores[3], 2, 8, timeout=300)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]
    assert out[0]["test_accuracy"] > 0.6, out[0]["test_accuracy"]
    assert out[0]["config"]["engine"]["halo_hops"] == 2


def test_halo_hops_refused_where_not_implemented(make_store):
    with pytest.raises(ValueError, match="halo_hops"):
        AveragingConfig(halo_hops=0)
    store = make_store(parts=2)
    cfg = TrainConfig.from_options(engine=AveragingConfig(halo_hops=2), progress=False)
    with process_group(DistConfig()) as ctx, pytest.raises(ShoalInputError, match="typed"):
        AveragingEngine(Store.open(store), cfg, ctx)
