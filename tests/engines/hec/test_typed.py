"""hec on a typed store (issue 53): relational layers, caches of their inputs."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.distributed import DistContext
from shoal.engines.config import read_config
from shoal.errors import ShoalInputError
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer
from tests.distributed.helpers import run_world

# tests/engines/test_typed.py's options
OPTS = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
BASE = {"threads": 1, "progress": False, "seed": 2}


def _cfg(**kw) -> TrainConfig:
    return TrainConfig.from_options(**{**OPTS, **BASE, **kw})


def _fit(rank: int, world: int, store: str, kw: dict) -> dict:
    from shoal.engines import get_engine

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = read_config({**OPTS, **BASE, "engine": "hec", **kw})
    eng = get_engine("hec", typed=True)(Store.open(store), tc, ctx)
    out = eng.fit().to_json()
    out["cache_dims"] = [c.dim for c in eng.caches]
    if eng.caches:  # L0 lines of featureless nodes (none: their input is in the model)
        st, tags = eng.store, eng.caches[0].tags
        kinds = st.type_of(tags[tags >= 0])
        out["l0_featureless"] = int(np.isin(kinds, _featureless(st)).sum())
    return out


def _featureless(st: Store) -> list[int]:
    return [t for t, nt in enumerate(st.schema.node_types) if not nt.feature_dim]


def test_the_typed_engine_is_the_engine_itself():
    from shoal.engines import get_engine
    from shoal.engines.hec.engine import HecEngine

    assert get_engine("hec", typed=True) is HecEngine
    assert HecEngine.spec().typed


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_one_process_on_one_part_trains_as_the_single_process_trainer(typed, model):
    """No halo: the same shuffling, batch seeds, draws, keyed dropout masks and initial
    weights as the trainer's, so the same losses (as the untyped hec test asserts)."""
    g, stores = typed
    ref = Trainer(_cfg(model=model), TrainData.from_graph_dir(g)).fit().to_json()
    (got,) = run_world(_fit, 1, stores[1], {"model": model})
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-5
    )
    # both exact (layer by layer there, full neighbourhoods here): one node may flip at a tie
    assert got["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=1.01 / 400)
    assert all(r["lookups"] == 0 for h in got["history"] for r in h["hec"])  # no halo


def test_two_processes_on_three_parts_learn_the_relational_signal_from_their_caches(typed):
    _, stores = typed
    out = run_world(_fit, 2, stores[3], {"epochs": 8}, timeout=600)
    r = out[0]
    assert all(x["test_accuracy"] == r["test_accuracy"] for x in out)  # one result
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (tests/training)
    assert r["test_accuracy"] > 0.6, r["test_accuracy"]
    assert r["engine"] == "hec" and r["num_parts"] == 3
    # the caches' lines have the relational layers' input widths: the padded input rows at
    # L0, the hidden rows above
    assert r["cache_dims"] == [16, 16]
    assert all(x["l0_featureless"] == 0 for x in out)  # never pushed at L0
    for h in r["history"]:
        assert len(h["hec"]) == 2
        for layer in h["hec"]:
            assert layer["received"] == layer["pushed"]
            assert layer["hits"] + layer["dropped"] == layer["lookups"]
    late = r["history"][-1]["hec"]
    for layer in late:  # the caches serve halo rows at every layer
        assert layer["lookups"] > 0 and layer["hit_rate"] > 0, late
    assert r["comm_per_epoch"]["bytes_sent"] > 0


def test_a_hit_is_its_owners_row_and_a_featureless_halo_node_needs_no_line_at_layer_0(typed):
    """The untyped trace test's check on relational layers (every candidate pushed, lines
    never evicted), plus: at L0 a featureless type's halo node is never looked up (its input
    is its embedding row, in the model) and is fed no cached row."""
    from tests.engines.hec.test_engine import _trace

    g, stores = typed
    d, ls = 1, 1
    extra = {
        **{k: v for k, v in OPTS.items() if k != "epochs"},
        "batch_size": 64,
        "threads": 1,
        "hec_push": -1,
        "hec_lifespan": ls,
        "hec_delay": d,
    }
    res = run_world(_trace, 2, stores[3], 2, extra, timeout=600)
    st = Store.open(stores[3])
    featureless = set(_featureless(st))  # conference
    pushed = {}  # (layer, node) -> [(step, row)] as its owner fed them, pushing steps only
    for _, fed, _ in res:
        for now, layer, send, ids, rows, _, _ in fed:
            if send:
                for v, row in zip(ids, rows, strict=True):
                    pushed.setdefault((layer, v), []).append((now, row))
    checked = {True: 0, False: 0, "embedding": 0}
    for _, fed, looked in res:
        for now, layer, _, _, _, halo, rows in fed:
            hits = looked[(now, layer)]
            types = st.type_of(np.asarray(halo, np.int64))
            for v, t, row in zip(halo, types.tolist(), rows, strict=True):
                if layer == 0 and t in featureless:
                    assert v not in hits  # not looked up
                    assert not any(row)  # no row: the model's embedding is its input
                    checked["embedding"] += 1
                    continue
                past = [(s, r) for s, r in pushed.get((layer, v), []) if s <= now - d]
                s, ref = max(past, key=lambda x: x[0]) if past else (None, None)
                valid = s is not None and now - (s + d) <= ls
                assert hits[v] == valid, (now, layer, v, s)
                if valid:
                    np.testing.assert_allclose(row, ref, rtol=1e-6, atol=1e-7)
                checked[valid] += 1
    assert checked[True] > 50 and checked[False] > 0 and checked["embedding"] > 0, checked
    assert any(layer == 1 for (layer, _) in pushed)


def test_cache_off_samples_the_whole_typed_graph_and_learns(typed):
    _, stores = typed
    out = run_world(_fit, 2, stores[3], {"epochs": 8, "hec_cache": False}, timeout=600)
    r = out[0]
    assert all(x["test_accuracy"] == r["test_accuracy"] for x in out)
    assert r["test_accuracy"] > 0.6, r["test_accuracy"]
    assert r["config"]["hec_cache"] is False and r["cache_dims"] == []
    for h in r["history"]:
        assert h["hec"] == []  # nothing looked up, pushed or dropped
        assert h["comm"]["feature_rows_remote"] > 0


def test_a_model_factory_is_refused_on_a_typed_store(typed):
    _, stores = typed
    kw = {"model_factory": "tests.training.typed_factories:sage_hetero"}
    with pytest.raises(Exception, match="cannot run a --model-factory model"):
        run_world(_fit, 1, stores[1], kw)
    with pytest.raises(ShoalInputError, match="layer by layer"):
        from shoal.engines.hec.engine import HecEngine

        ctx = DistContext(rank=0, world_size=1, local_rank=0, backend="gloo", device=None)
        tc = read_config({**OPTS, **BASE, "engine": "hec", **kw})
        HecEngine(Store.open(stores[1]), tc, ctx)


def test_a_miss_keeps_a_typed_blocks_types_ids_and_its_kept_edges_relations():
    import torch

    from shoal.engines.hec.cache import drop_sources
    from shoal.graph.blocks import Block

    ei = torch.tensor([[2, 3, 4, 3, 0], [0, 0, 0, 1, 1]])
    blk = Block(
        ei,
        5,
        2,
        torch.tensor([0, 3, 5]),
        torch.ones(5),
        node_ids=np.array([10, 11, 12, 13, 14]),
        edge_type=torch.tensor([0, 1, 2, 1, 0]),
        src_type=torch.tensor([0, 0, 1, 1, 2]),
    )
    out = drop_sources(blk, np.array([3]))
    assert out.edge_index.tolist() == [[2, 4, 0], [0, 0, 1]]
    assert out.edge_type.tolist() == [0, 2, 0]
    assert out.src_type.tolist() == [0, 0, 1, 1, 2] and out.node_ids.tolist() == [
        10,
        11,
        12,
        13,
        14,
    ]
