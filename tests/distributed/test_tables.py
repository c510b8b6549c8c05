"""NodeTables: built by chunked all-reduces over the owned parts, equal to the tables read from
the whole store in one process."""

from __future__ import annotations

import numpy as np

from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph


def _tables(rank: int, world: int, store: str, chunk: int) -> dict:
    import shoal.distributed.tables as tables
    from shoal.distributed import NodeTables, parts_of_rank
    from shoal.store import Store

    tables.TABLE_CHUNK = chunk
    st = Store.open(store)
    owner = parts_of_rank(st.num_parts, world)
    t = NodeTables(st, [p for p in st.parts() if owner[p.index] == rank])
    return {"degrees": t.degrees, "labels": t.labels, "train": t.train}


def test_tables_of_two_ranks_equal_the_whole_stores(make_graph, make_store):
    g = community_graph(make_graph, n=60)
    store = str(make_store(parts=3, graph=g))
    from shoal.store import Store

    st = Store.open(store)
    ref = {
        "degrees": np.zeros(st.num_nodes, np.float32),
        "labels": np.full(st.num_nodes, -1, np.int32),
        "train": np.zeros(st.num_nodes, bool),
    }
    for p in st.parts():
        ref["degrees"][p.start : p.stop] = np.diff(np.asarray(p.indptr))
        ref["labels"][p.start : p.stop] = np.asarray(p.labels)
        ref["train"][p.start : p.stop] = np.asarray(p.train_mask)
    assert ref["train"].sum() == 16 and (ref["degrees"] > 0).all()
    for r in run_world(_tables, 2, store, 7):  # chunks of 7 nodes: 9 all-reduces
        for k in ref:
            assert r[k].dtype == ref[k].dtype
            np.testing.assert_array_equal(r[k], ref[k])


def _local_tables(rank: int, world: int, store: str) -> dict:
    from shoal.distributed import NodeTables, parts_of_rank
    from shoal.store import Store

    st = Store.open(store)
    owner = parts_of_rank(st.num_parts, world)
    parts = [p for p in st.parts() if owner[p.index] == rank]
    t = NodeTables(st, parts, part_to_rank=owner, scope="local")
    held = np.unique(
        np.concatenate(
            [np.arange(p.start, p.stop) for p in parts]
            + [np.asarray(p.halo_ids, np.int64) for p in parts]
        )
    )
    others = np.setdiff1d(np.arange(st.num_nodes), held)
    try:
        t.degrees[others[:1]]
        missing = None
    except KeyError as e:
        missing = str(e)
    return {
        "held": held,
        "degrees": t.degrees[held],
        "labels": t.labels[held],
        "train": t.train[held],
        "num_train": t.num_train,
        "train_ids": t.train_ids_by_rank(owner),
        "missing": missing if len(others) else "none",
        "nbytes": t.nbytes,
    }


def test_local_tables_hold_own_and_halo_nodes_with_the_owners_values(make_graph, make_store):
    """Each rank's local tables answer, for its own and its parts' halo nodes, what the dense
    tables answer (halo values asked of the owners), hold nothing for other nodes, and count
    the global training set."""
    n = 60  # a ring with a few chords, in three arcs of 20: a part's halo is a few nodes
    ring = [(u, (u + 1) % n) for u in range(n)] + [(0, 30), (5, 45), (25, 50), (7, 9)]
    rng = np.random.default_rng(0)
    idx = rng.permutation(n)
    g = make_graph(
        ring,
        n,
        directed=False,
        x=rng.normal(size=(n, 3)).astype(np.float32),
        y=np.arange(n) % 2,
        train=np.sort(idx[:16]),
        val=np.sort(idx[16:24]),
        test=np.sort(idx[24:]),
    )
    store = str(make_store(np.arange(n) // 20, graph=g))
    from shoal.store import Store

    st = Store.open(store)
    deg = np.zeros(st.num_nodes, np.float32)
    lab = np.full(st.num_nodes, -1, np.int32)
    tr = np.zeros(st.num_nodes, bool)
    for p in st.parts():
        deg[p.start : p.stop] = np.diff(np.asarray(p.indptr))[: p.num_core]
        lab[p.start : p.stop] = np.asarray(p.labels)
        tr[p.start : p.stop] = np.asarray(p.train_mask)
    owner_rank = np.concatenate(
        [np.full(p.num_core, p.index % 2) for p in st.parts()]
    )  # parts_of_rank's cyclic rule
    out = run_world(_local_tables, 2, store)
    for r in out:
        held = r["held"]
        assert len(held) < st.num_nodes  # the test means something: some nodes are not held
        np.testing.assert_array_equal(r["degrees"], deg[held])
        np.testing.assert_array_equal(r["labels"], lab[held])
        np.testing.assert_array_equal(r["train"], tr[held])
        assert r["num_train"] == 16
        by_rank = [np.flatnonzero(tr & (owner_rank == q)) for q in range(2)]
        for got, want in zip(r["train_ids"], by_rank, strict=True):
            np.testing.assert_array_equal(got, want)
        assert "neither owned by this rank nor in its halo" in r["missing"]
        assert r["nbytes"] < 9 * st.num_nodes + 8 * len(held)


def test_local_index_positions():
    from shoal.distributed.tables import LocalIndex

    idx = LocalIndex([(10, 13), (0, 2)], np.array([5, 20]))
    np.testing.assert_array_equal(idx.positions([0, 1, 10, 12, 5, 20]), [0, 1, 2, 4, 5, 6])
    assert idx.positions(11) == 3
    np.testing.assert_array_equal(idx.owned(np.array([1, 2, 9, 10, 13])), [1, 0, 0, 1, 0])
    for bad in (2, 13, 21, -1):
        try:
            idx.positions([bad])
        except KeyError:
            continue
        raise AssertionError(f"{bad} is not held")


def _hold(rank: int, world: int, store: str) -> dict:
    from shoal.distributed import NodeTables, parts_of_rank
    from shoal.store import Store

    st = Store.open(store)
    owner = parts_of_rank(st.num_parts, world)
    parts = [p for p in st.parts() if owner[p.index] == rank]
    t = NodeTables(st, parts, part_to_rank=owner, scope="local")
    before = t.nbytes
    ask = np.array([0, 29, 41, 59]) if rank == 0 else np.array([], np.int64)
    t.hold(ask)  # rank 1 asks nothing but answers
    own = np.concatenate([np.arange(p.start, p.stop) for p in parts])
    return {
        "ask": ask,
        "labels": t.labels[ask],
        "degrees": t.degrees[ask],
        "own_labels": t.labels[own],
        "own": own,
        "grew": t.nbytes - before,
    }


def test_hold_adds_nodes_owned_elsewhere(make_graph, make_store):
    g = community_graph(make_graph, n=60)
    store = str(make_store(np.arange(60) // 20, graph=g))  # parts 0, 2 on rank 0; 1 on rank 1
    from shoal.store import Store

    st = Store.open(store)
    lab = np.concatenate([np.asarray(p.labels) for p in st.parts()])
    deg = np.concatenate([np.diff(np.asarray(p.indptr))[: p.num_core] for p in st.parts()])
    r0, r1 = run_world(_hold, 2, store)
    for r in (r0, r1):
        np.testing.assert_array_equal(r["labels"], lab[r["ask"]])
        np.testing.assert_array_equal(r["degrees"], deg[r["ask"]])
        np.testing.assert_array_equal(r["own_labels"], lab[r["own"]])
    assert r1["grew"] == 0


def test_released_tables_free_their_arrays_and_refuse_reads(make_graph, make_store):
    """``release`` drops the per-node arrays (their bytes returned, none held after) and
    keeps ``num_train``; reading a released table raises, naming who released it."""
    import pytest

    from shoal.distributed import NodeTables
    from shoal.store import Store

    g = community_graph(make_graph, n=60)
    st = Store.open(str(make_store(parts=1, graph=g)))
    t = NodeTables(st, list(st.parts()))
    held, n = t.nbytes, t.num_train
    assert held == 9 * st.num_nodes
    assert t.release("training ended") == held
    assert t.nbytes == 0 and t.num_train == n
    for table in (t.degrees, t.labels, t.train):
        with pytest.raises(RuntimeError, match="released \\(training ended\\)"):
            table[np.arange(3)]
