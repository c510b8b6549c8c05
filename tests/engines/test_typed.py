"""Typed stores (node types, relations) on the engines: what they share (the distributed
sampler per relation, the padded rows, the model refusals, the CLI) and minibatch; each
engine's own typed tests are in its folder (issue 53: one engine class for every store)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.distributed import DistContext
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer
from tests.distributed.helpers import run_world


def _cfg(**kw) -> TrainConfig:
    opts = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, "seed": 2, **kw})


def _fit(rank: int, world: int, store: str, engine: str, kw: dict) -> dict:
    from shoal.engines import get_engine

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    st = Store.open(store)
    eng = get_engine(engine, typed=True)(st, _cfg(**kw), ctx)
    return eng.fit().to_json()


def test_one_process_on_one_part_trains_as_the_single_process_trainer(typed):
    """Same shuffling, batch seeds, draws and initial weights: the same losses."""
    g, stores = typed
    ref = Trainer(_cfg(), TrainData.from_graph_dir(g)).fit().to_json()
    (got,) = run_world(_fit, 1, stores[1], "minibatch", {})
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-5
    )
    # both exact (layer by layer): one node may flip at a tie
    assert got["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=1.01 / 400)


def test_two_processes_on_three_parts_learn_the_relational_signal(typed):
    _, stores = typed
    kw = {"epochs": 8, "eval_every": 2, "eval_fanouts": (5, 5)}  # a sampled validation
    out = run_world(_fit, 2, stores[3], "minibatch", kw, timeout=300)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]  # one result, every rank
    kinds = [h.get("evaluation") for h in out[0]["history"]]
    assert kinds == [None, "sampled"] * 3 + [None, "exact"]
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (tests/training)
    assert out[0]["test_accuracy"] > 0.6, out[0]["test_accuracy"]
    assert out[0]["engine"] == "minibatch" and out[0]["num_parts"] == 3


def _sample(rank: int, world: int, store: str, fanouts: list[int]) -> list:
    from shoal.distributed import DistFeatureStore, DistNeighborSampler
    from shoal.distributed.tables import NodeTables
    from shoal.engines.base import parts_of_rank
    from shoal.rows.parts import part_rows

    st = Store.open(store)
    p2r = parts_of_rank(st.num_parts, world, None)
    parts = [st.part(int(i)) for i in np.flatnonzero(p2r == rank)]
    tables = NodeTables(st, parts, part_to_rank=p2r, scope="local")
    sampler = DistNeighborSampler(
        parts=parts,
        part_offsets=st.part_offsets,
        part_to_rank=p2r,
        rank=rank,
        world_size=world,
        fanouts=fanouts,
        degrees=tables.degrees,
        schema=st.schema,
        type_of=st.type_of,
    )
    pulls = DistFeatureStore(
        part_offsets=st.part_offsets,
        part_to_rank=p2r,
        rank=rank,
        world_size=world,
        local_parts={p.index: part_rows(p) for p in parts},
        feature_dim=int(st.feature_dim),
    )
    seeds = np.flatnonzero(np.asarray(st.labels(np.arange(st.num_nodes))) >= 0)[rank::world][:40]
    mb = sampler.sample(seeds, 7)
    x = pulls.pull(mb.n_id).numpy().copy()
    orig = st.to_orig(mb.n_id)
    edges = [
        (orig[b.edge_index[0].numpy()], orig[b.edge_index[1].numpy()], b.edge_type.numpy())
        for b in mb.blocks
    ]
    return orig, mb.node_type.numpy(), edges, x


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, -1]], ids=["sampled", "every-neighbour"])
def test_the_distributed_typed_sampler_draws_per_relation_from_the_graph(typed, fanouts):
    g, stores = typed
    edges = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations(), np.int64)
    truth: dict[tuple[int, int], list[int]] = {}
    for (s, d), r in zip(edges.tolist(), rel.tolist(), strict=True):
        truth.setdefault((d, r), []).append(s)
    schema = g.schema
    for orig, types, blocks, feats in run_world(_sample, 2, stores[3], fanouts):
        assert np.array_equal(types, schema.type_of(orig))
        for i, (src, dst, et) in enumerate(blocks):
            fan = fanouts[len(blocks) - 1 - i]  # blocks come input layer (last hop) first
            got: dict[tuple[int, int], list[int]] = {}
            for s, d, r in zip(src.tolist(), dst.tolist(), et.tolist(), strict=True):
                got.setdefault((d, r), []).append(s)
            for (d, r), picks in got.items():
                full = truth[(d, r)]
                assert all(s in full for s in picks)  # real edges of that relation
                if fan < 0:
                    assert sorted(picks) == sorted(full)
                else:
                    assert len(picks) == min(len(full), fan)
        # every type's rows, padded to the widest type (a featureless type's: zeros)
        for t, nt in enumerate(schema.node_types):
            x = g.node_features(nt.name)
            mine = feats[types == t]
            if x is None:
                assert not mine.any()
                continue
            ids = orig[types == t] - nt.offset
            w = x.shape[1]
            assert np.array_equal(mine[:, :w], np.asarray(x)[ids])
            assert not mine[:, w:].any()


def test_every_engine_reads_a_typed_store_with_its_own_class(typed):
    from shoal.engines.registry import engine_names, get_engine, get_spec

    for name in engine_names():
        assert get_engine(name, typed=True) is get_engine(name), name
        assert get_spec(name).typed


def test_a_typed_store_refuses_an_untyped_model(typed):
    _, stores = typed
    with pytest.raises(Exception, match="relational model"):
        run_world(_fit, 1, stores[1], "minibatch", {"model": "sage"})


def test_the_cli_trains_a_typed_store_on_two_processes(typed, tmp_path):
    import json

    from shoal.cli import main

    _, stores = typed
    out = tmp_path / "r.json"
    args = ["train", "--store", stores[3], "--engine", "averaging", "--nproc", "2"]
    opts = ["--model", "rgcn", "--fanouts", "4,4", "--epochs", "2", "--hidden", "8"]
    assert main([*args, *opts, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["engine"] == "averaging" and r["epochs"] == 2 and 0 <= r["test_accuracy"] <= 1


@pytest.mark.parametrize("engine", ["minibatch", "averaging"])
def test_a_model_factory_trains_a_typed_store_on_two_processes(typed, engine):
    """A user's PyG ``to_hetero`` model through ``--model-factory``."""
    _, stores = typed
    kw = {"model_factory": "tests.training.typed_factories:sage_hetero", "epochs": 6}
    out = run_world(_fit, 2, stores[3], engine, kw, timeout=300)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]
    assert out[0]["test_accuracy"] > 0.55, out[0]["test_accuracy"]
