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
