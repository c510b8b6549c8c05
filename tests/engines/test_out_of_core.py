"""Engines under a memory budget below their feature rows: the budgeted store (static cache +
windows read ahead) trains exactly the model of the whole-in-memory run, 2 real processes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph


def _train(
    rank: int,
    world: int,
    store: str,
    engine: str,
    small: bool,
    epochs: int,
    read_ahead: bool = False,
    no_room: int | None = None,
    disk_ranks: tuple[int, ...] = (),
) -> dict:
    import shoal.distributed.windows as windows
    import shoal.engines.base as base
    import shoal.rows.budget as budget
    import shoal.rows.packing as packing
    from shoal.distributed import DistContext
    from shoal.engines import get_engine
    from shoal.store import Store
    from shoal.training import TrainConfig

    cfg = dict(
        model="sage",
        fanouts=(3, 3),
        hidden=8,
        batch_size=4,
        seed=5,
        epochs=epochs,
        lr=0.02,
        progress=False,
        normalize_features=True,
        pack_epochs=4,
    )  # packed although the small budget leaves the CSR on disk
    memory = "8GiB"
    st = Store.open(store)
    windows.READ_AHEAD = read_ahead
    if rank == no_room:  # this rank's scratch disk is full: it cannot pack
        packing.free_bytes = lambda directory: 0
    if small:  # no reserve, tiny windows: a budget of two windows and a quarter of the rows
        budget.MIN_WINDOW = 1024
        base.Engine.reserve_bytes = lambda self, num_rows: 13 * st.num_nodes  # the tables
        halo = engine == "averaging"
        rows = sum(p.num_core + halo * p.num_halo for p in st.parts() if p.index % world == rank)
        row_bytes = st.feature_dim * 4
        window = budget.batch_window(cfg["fanouts"], cfg["batch_size"], rows, row_bytes)
        # ranks with different budgets (windows and caches) must still cut windows together
        # tables, and the engine's own arrays (slot maps, cached flags; the averaging
        # engine's sampler maps and marks)
        extra = 5 * rows if engine == "minibatch" else 14 * rows
        if engine == "minibatch":  # the batches its sampling thread queues (their rows)
            from shoal.engines.minibatch.config import DEFAULT_PREFETCH_BATCHES as depth

            extra += depth * budget.batch_rows(cfg["fanouts"], cfg["batch_size"], rows) * row_bytes
        # the parts' row index (indptr) is held in memory even when the CSR stays on disk
        index = sum(p.indptr.nbytes for p in st.parts() if p.index % world == rank)
        if engine == "minibatch" and rank not in disk_ranks:  # its CSR in memory: counted
            index += sum(p.indices.nbytes for p in st.parts() if p.index % world == rank)
        memory = 13 * st.num_nodes + extra + index + (2 + 3 * rank) * window + rows * row_bytes // 4
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    if rank in disk_ranks:  # this rank's plan leaves its parts' neighbour lists on disk
        cfg["structure"] = "disk"
    eng = get_engine(engine)(st, TrainConfig.from_options(**cfg, memory=memory), ctx)
    sampled = [0]  # batches the engine's sampler drew (minibatch: in groups)
    if engine == "minibatch":
        real = eng.sampler.sample_group

        def sample_group(batches):
            sampled[0] += len(batches)
            return real(batches)

        eng.sampler.sample_group = sample_group
    spool = getattr(getattr(eng, "windows", None), "spool", None)
    # minibatch: the owners' caches described by in-degree rules (no per-batch exchange)
    rules = getattr(getattr(eng, "windows", None), "_rules", None) is not None
    records = [eng.train_epoch(e) for e in range(epochs)]
    ended = small  # the final evaluation after training's state is dropped: the same result
    if ended:
        eng.end_training()
        if engine == "minibatch":
            assert eng.sampler is None and eng.windows is None
            with pytest.raises(RuntimeError, match="only evaluates"):
                eng.train_epoch(epochs)
    acc = eng.evaluate(("val", "test"))
    eng.close_io()
    return {
        "loss": [r["loss"] for r in records],
        "io": [r["io"] for r in records],
        "params": [p.detach().numpy().copy() for p in eng.model.parameters()],
        "acc": acc,
        "windows": [r["io"]["windows"] for r in records],
        "csr_on_disk": not eng.budget.structure_in_memory,
        "rules": rules,
        "direct_samplers": [ld.sampler._reader is not None for ld in getattr(eng, "loaders", [])],
        "group_passes": getattr(getattr(eng, "sampler", None), "group_reads", None),
        "sampled": sampled[0],
        "batches": getattr(eng, "num_batches", 0),
        "spooled": None if spool is None else (spool.bytes_written, spool.bytes_read),
        "spool_left": None if spool is None else spool._path,
    }


@pytest.mark.parametrize(
    ("engine", "read_ahead", "disk"),
    [("averaging", False, False), ("minibatch", False, False), ("minibatch", True, True)],
)
def test_engine_under_a_small_budget_trains_the_same_model(
    make_graph, make_store, engine, read_ahead, disk
):
    """``disk``: both ranks' neighbour lists on disk too (minibatch): the packing round
    samples its epochs once, spools the samples, and each epoch trains from them (no second
    sampling, no collective issued for it); the spool's files are gone once the run closes."""
    g = community_graph(make_graph, n=400)
    store = str(make_store(parts=2, graph=g, halo_features=True))
    big = run_world(_train, 2, store, engine, False, 3)
    small = run_world(_train, 2, store, engine, True, 3, read_ahead, None, (0, 1) if disk else ())
    for b, s in zip(big, small, strict=True):
        assert b["loss"] == s["loss"]
        for p, q in zip(b["params"], s["params"], strict=True):
            np.testing.assert_array_equal(p, q)
        assert b["acc"] == s["acc"]
        assert all(r["bytes_read"] == 0 for r in b["io"])
        assert all(r["bytes_read"] > 0 and 0 < r["cache_hit_rate"] < 1 for r in s["io"]), s["io"]
        assert max(s["windows"]) >= 2  # epochs split into windows read ahead
        assert not b["csr_on_disk"]
        # the small budget leaves it on disk where the sampler reads it there (averaging)
        assert s["csr_on_disk"] == (engine == "averaging" or disk)
        if disk:
            assert s["sampled"] == 3 * s["batches"]  # each epoch once (twice unspooled)
            written, read = s["spooled"]
            assert written > 0 and read == written and s["spool_left"] is None
        if engine == "minibatch":
            assert s["rules"]
        if engine == "averaging":  # whose samplers read the sampled entries directly
            assert s["direct_samplers"] and all(s["direct_samplers"])
        # one sweep at the start packs the 3 epochs' rows, later epochs read their packs
        assert s["io"][0]["bytes_written"] > 0 and s["io"][0]["pack_bytes_read"] > 0
        assert all(r["pack_bytes_read"] == r["bytes_written"] == 0 for r in s["io"][1:])
    assert 0.0 < big[0]["acc"]["test"] < 1.0


def test_minibatch_rank_without_room_to_pack_trains_the_same_model(make_graph, make_store):
    """Packing is planned collectively; a rank whose scratch disk is full reads its windows
    from its rows instead, and nothing else changes."""
    g = community_graph(make_graph, n=400)
    store = str(make_store(parts=2, graph=g, halo_features=True))
    big = run_world(_train, 2, store, "minibatch", False, 3)
    small = run_world(_train, 2, store, "minibatch", True, 3, False, 1)
    for b, s in zip(big, small, strict=True):
        assert b["loss"] == s["loss"] and b["acc"] == s["acc"]
    # io records are summed over ranks: rank 0 packed, rank 1 (no room) did not
    io = small[0]["io"]
    assert io[0]["bytes_written"] > 0 and all(r["bytes_written"] == 0 for r in io[1:])
    assert all(r["bytes_read"] > r["pack_bytes_read"] for r in io)


def _idle_rank(rank: int, world: int, store: str, plan: str, small: bool) -> dict:
    import shoal.engines.base as base
    import shoal.rows.budget as budget
    from shoal.distributed import DistContext
    from shoal.engines import get_engine
    from shoal.store import Store
    from shoal.training import TrainConfig

    memory = "8GiB"
    if small:
        budget.MIN_WINDOW = 1024
        base.Engine.reserve_bytes = lambda self, num_rows: 13 * 400  # the tables
        from shoal.engines.minibatch.config import DEFAULT_PREFETCH_BATCHES as depth

        # tables, slot maps and flags, two windows, a little; the batches the sampling
        # thread queues (64 rows of 16 B each at most)
        memory = 13 * 400 + 5 * 200 + 4 * 1024 + 400 * 16 // 8 + depth * 64 * 16
        # its part's neighbour lists, held in memory and counted (the sampler draws from them
        # there; before, the plan left them on disk and sampled them through page faults)
        memory += sum(p.indices.nbytes for p in Store.open(store).parts() if p.index == rank)
    cfg = TrainConfig.from_options(
        model="sage",
        fanouts=(3, 3),
        hidden=8,
        batch_size=4,
        seed=5,
        epochs=2,
        progress=False,
        memory=memory,
        plan=plan,
    )
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = get_engine("minibatch")(Store.open(store), cfg, ctx)
    out = [eng.train_epoch(e) for e in range(2)]
    acc = eng.evaluate(("val", "test"))
    eng.close_io()
    return {
        "loss": [r["loss"] for r in out],
        "acc": acc,
        "parts": len(eng.parts),
        "windows": [r["io"]["windows"] for r in out],
        "read": [r["io"]["bytes_read"] for r in out],
    }


def test_minibatch_rank_without_parts_under_a_small_budget(make_graph, make_store, tmp_path):
    """3 ranks, 2 parts: the plan leaves rank 2 without a part (it still trains seeds it is
    handed and pulls every row); windows and evaluation stay collective and exact."""
    import json

    g = community_graph(make_graph, n=400)
    store = str(make_store(parts=2, graph=g, halo_features=False))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"workers": 3, "worker_of_part": [0, 1]}))
    big = run_world(_idle_rank, 3, store, str(plan), False)
    small = run_world(_idle_rank, 3, store, str(plan), True)
    assert [r["parts"] for r in small] == [1, 1, 0]
    for b, s in zip(big, small, strict=True):
        assert b["loss"] == s["loss"] and b["acc"] == s["acc"]
    # the small budget splits epochs into windows (summed over the 3 ranks) read from disk
    assert min(small[0]["windows"]) > max(big[0]["windows"]) and min(small[0]["read"]) > 0
    assert 0.0 < big[0]["acc"]["test"] < 1.0


def test_minibatch_with_neighbour_lists_on_disk_trains_the_same_model(make_graph, make_store):
    """A rank whose plan leaves its parts' neighbour lists on disk draws the positions of its
    picks and reads the entries with direct reads, the batches of a group read in one sorted
    pass per hop (the group's passes collective: a rank holding its lists in memory takes
    part in them); the same batches, so the same model, as with every list in memory; the
    bytes read are in the epoch records. Rank 1 on disk, rank 0 in memory: both paths and
    their agreement (every rank on disk: tests/distributed/test_sampler.py)."""
    disk_ranks = (1,)
    g = community_graph(make_graph, n=400)
    store = str(make_store(parts=2, graph=g, halo_features=True))
    mem = run_world(_train, 2, store, "minibatch", False, 2)
    disk = run_world(_train, 2, store, "minibatch", False, 2, False, None, disk_ranks)
    for rank, (m, d) in enumerate(zip(mem, disk, strict=True)):
        assert m["loss"] == d["loss"] and m["acc"] == d["acc"]
        for p, q in zip(m["params"], d["params"], strict=True):
            np.testing.assert_array_equal(p, q)
        assert not m["csr_on_disk"] and d["csr_on_disk"] == (rank in disk_ranks)
        assert all(r["structure_bytes_read"] == 0 for r in m["io"])
        # records are summed over ranks: every epoch read neighbour lists
        assert all(r["structure_bytes_read"] > 0 for r in d["io"])
        if rank in disk_ranks:  # one pass per hop of each group (the epoch is one group)
            # but hop 0's: the plan holds the training seeds' lists (first_held)
            assert d["group_passes"].passes >= 2 * 1
