"""disagg on a typed store (issue 53): batch workers load typed parts from the edge buckets,
draw per relation (resident, swapped out or replicated nodes alike) and send typed blocks;
compute workers train the relational model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.distributed import DistContext
from shoal.distributed.comm import CommStats
from shoal.engines.disagg.bucketparts import ResidentParts
from shoal.engines.disagg.config import DisaggConfig
from shoal.engines.disagg.msg import group_union, pack_batch, unpack
from shoal.engines.disagg.sampling import BatchSampler, Replica
from shoal.rows.parts import part_rows
from shoal.store import Store
from shoal.training import TrainConfig
from tests.distributed.helpers import run_world
from tests.engines.disagg.test_sampling import _exclusions, _uses


def _cfg(**kw) -> TrainConfig:
    opts = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, "seed": 2, **kw})


def _degrees(store: Store) -> np.ndarray:
    return np.concatenate([np.diff(np.asarray(p.indptr)) for p in store.parts()]).astype(np.float32)


def _sampler(store: Store, parts, *, replica=None, swapped="read") -> BatchSampler:
    return BatchSampler(
        store=store,
        replica=replica,
        swapped=swapped,
        parts=parts,
        part_offsets=np.asarray(store.part_offsets, np.int64),
        part_to_rank=np.zeros(store.num_parts, np.int64),
        rank=0,
        world_size=1,
        fanouts=(3, 2),
        degrees=_degrees(store),
        stats=CommStats(),
        group=None,
        schema=store.schema,
        type_of=store.type_of,
    )


def _loaded(store: Store, which) -> list:
    res = ResidentParts(store)
    for j in which:
        res.load(j)
    return list(res.parts.values())


def _same(a, b) -> bool:
    return np.array_equal(a.n_id, b.n_id) and all(
        torch.equal(x.edge_index, y.edge_index)
        and torch.equal(x.edge_type, y.edge_type)
        and torch.equal(x.src_type, y.src_type)
        for x, y in zip(a.blocks, b.blocks, strict=True)
    )


def _seeds(store: Store) -> np.ndarray:
    return np.flatnonzero(np.asarray(store.labels(np.arange(store.num_nodes))) >= 0)


def test_the_typed_engine_is_the_engine():
    from shoal.engines import get_engine
    from shoal.engines.disagg.engine import DisaggEngine

    assert get_engine("disagg", typed=True) is DisaggEngine
    assert DisaggEngine.spec().typed


def test_a_typed_part_loaded_from_buckets_equals_the_store_part(typed):
    """Rows grouped by relation, sources by new id inside: entry for entry the store part's,
    relations and rows (every type's, padded) included."""
    _, stores = typed
    s = Store.open(stores[3])
    for got in _loaded(s, range(3)):
        ref = s.part(got.index)
        assert np.array_equal(got.indptr, np.asarray(ref.indptr))
        assert np.array_equal(got.indices, np.asarray(ref.indices, np.int64))
        assert np.array_equal(got.edge_types, np.asarray(ref.edge_types))
        assert np.array_equal(got.type_bounds, np.asarray(ref.type_bounds))
        src = part_rows(ref)
        want = np.empty((ref.num_core, src.dim), np.float32)
        src.read(np.arange(ref.num_core), want)
        src.close()
        assert np.array_equal(got.features, want)


def test_typed_draws_of_loaded_swapped_out_and_store_parts_agree(typed):
    """The store's parts, the parts loaded from buckets, and only part 1 resident (the
    others sampled from the store's files): the same typed batches; the replica's draws are
    real edges of their relation."""
    _, stores = typed
    s = Store.open(stores[3])
    ref = _sampler(s, list(s.parts()))
    loaded = _sampler(s, _loaded(s, range(3)))
    swapped = _sampler(s, _loaded(s, [1]))
    seeds = _seeds(s)
    for k, batch in enumerate([seeds[:40], seeds[-70::3]]):
        a = ref.sample(batch, 5 + k)
        assert a.typed and a.blocks[0].edge_type.numel() > 0
        assert np.array_equal(a.node_type.numpy(), s.type_of(a.n_id))
        assert _same(loaded.sample(batch, 5 + k), a)
        assert _same(swapped.sample(batch, 5 + k), a)
    assert swapped.counters["disk_sampled"] > 0 and swapped.unavailable == 0
    swapped.close()


def test_typed_exclusions_are_skipped_alike_in_resident_and_swapped_out_parts(typed):
    """Link prediction's exclusions on a typed store: the store's parts, the loaded ones and
    swapped-out ones read from the store skip them with the same per-relation draws."""
    _, stores = typed
    s = Store.open(stores[3])
    ref = _sampler(s, list(s.parts()))
    swapped = _sampler(s, _loaded(s, [1]))
    seeds = _seeds(s)
    for k, batch in enumerate([seeds[:40], seeds[-70::3]]):
        ex = _exclusions(s, batch, k)
        a = ref.sample(batch, 5 + k, exclude=ex)
        assert not _uses(a, ex) and _uses(ref.sample(batch, 5 + k), ex)
        assert _same(swapped.sample(batch, 5 + k, exclude=ex), a)
    assert swapped.counters["disk_sampled"] > 0
    swapped.close()


def test_the_typed_replica_draws_each_relations_fanout_of_real_edges(typed):
    g, stores = typed
    s = Store.open(stores[3])
    rep = Replica.build(s, _degrees(s), 300)
    assert np.array_equal(rep.features, _rows(s, rep.ids))
    assert np.array_equal(rep.row_type, s.type_of(rep.ids))
    smp = _sampler(s, list(s.parts()), replica=rep)
    smp.relations.hop = 0
    rows = np.arange(len(rep.ids), dtype=np.int64)
    counts, picked = rep.sample_relations(rows, smp.relations, np.uint64(7))
    edges = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations(), np.int64)
    truth: dict[tuple[int, int], list[int]] = {}
    for (u, v), r in zip(edges.tolist(), rel.tolist(), strict=True):
        truth.setdefault((v, r), []).append(u)
    pair = s.schema.pair_relations()
    orig_dst = s.to_orig(rep.ids)
    at = np.concatenate([[0], np.cumsum(counts)])
    for i, v in enumerate(orig_dst):
        got = s.to_orig(picked[at[i] : at[i + 1]])
        by_rel: dict[int, list[int]] = {}
        for u, r in zip(got.tolist(), pair[s.type_of(picked[at[i] : at[i + 1]]), rep.row_type[i]]):
            by_rel.setdefault(int(r), []).append(u)
        for r, us in by_rel.items():
            full = truth[(int(v), r)]
            assert all(u in full for u in us) and len(us) == min(3, len(full))


def _rows(s: Store, ids: np.ndarray) -> np.ndarray:
    """Every type's rows of new ids ``ids`` (padded), from the parts' row sources."""
    out = np.empty((len(ids), int(s.feature_dim)), np.float32)
    for p in s.parts():
        sel = np.flatnonzero((ids >= p.start) & (ids < p.start + p.num_core))
        if len(sel):
            src = part_rows(p)
            buf = np.empty((len(sel), src.dim), np.float32)
            src.read(ids[sel] - p.start, buf)
            out[sel] = buf
            src.close()
    return out


def test_a_typed_global_batch_survives_packing(typed):
    _, stores = typed
    s = Store.open(stores[3])
    smp = _sampler(s, list(s.parts()))
    seeds = _seeds(s)
    mbs = [smp.sample(seeds[:20], 1), smp.sample(seeds[20:45], 2)]
    ids, pos = group_union(mbs, True)
    sent = np.arange(len(ids))[::3]
    rows = np.random.default_rng(0).random((len(sent), 4)).astype(np.float32)
    nodes = (s.type_of(ids), s.to_orig(ids))
    gb = unpack(*pack_batch(2, mbs, ids, pos, sent, rows, nodes), typed=True)
    for k, mb in enumerate(mbs):
        p, blocks = gb.blocks(k, _degrees(s))
        assert np.array_equal(gb.ids[p], mb.n_id)
        for got, want in zip(blocks, mb.blocks, strict=True):
            assert torch.equal(got.edge_index, want.edge_index)
            assert torch.equal(got.edge_type, want.edge_type)
            assert torch.equal(got.src_type, want.src_type)
            assert np.array_equal(got.node_ids, s.to_orig(mb.n_id[: want.num_src]))


def _fit(rank: int, world: int, store: str, kw: dict) -> dict:
    from shoal.engines import get_engine

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    opts = {k: kw.pop(k) for k in list(kw) if k in DisaggConfig.__dataclass_fields__}
    cfg = _cfg(**kw, engine=DisaggConfig(**opts)) if opts else _cfg(**kw)
    eng = get_engine("disagg", typed=True)(Store.open(store), cfg, ctx)
    return eng.fit().to_json()


def test_two_processes_on_three_parts_learn_the_relational_signal(typed):
    """One compute worker, one batch worker (the smallest layout) holding the three parts."""
    _, stores = typed
    out = run_world(_fit, 2, stores[3], {"epochs": 8}, timeout=600)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]  # one result, every rank
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (tests/training)
    assert out[0]["test_accuracy"] > 0.6, out[0]["test_accuracy"]
    assert out[0]["engine"] == "disagg" and out[0]["num_parts"] == 3


@pytest.mark.parametrize(
    "extra",
    [
        {"resident_parts": 1, "replicate_top": "10%", "batch_workers": 2},
        {
            "local_sampling": True,
            "resident_parts": 1,
            "batch_workers": 2,
            "replicas": 2,
            "replica_exec": "threads",
        },
    ],
    ids=["swapped-and-replicated", "local-sampling-replicas-in-threads"],
)
def test_typed_options_train(typed, extra):
    """Swapped-out parts and replicated nodes (two batch workers sampling for each other);
    local sampling with two replicas in threads: typed epochs run and learn."""
    _, stores = typed
    out = run_world(_fit, 3, stores[3], {"epochs": 2, **extra}, timeout=600)
    assert all(r["test_accuracy"] == out[0]["test_accuracy"] for r in out)
    assert out[0]["history"][-1]["loss"] < out[0]["history"][0]["loss"]
    d = out[0]["history"][-1]["disagg"]
    assert d["unavailable"] == 0
    if "replicate_top" in extra:
        assert d["disk_sampled"] > 0 and d["replica_sampled"] > 0 and d["replica_rows"] > 0
