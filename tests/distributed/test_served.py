"""Owner-served blocked layers (shoal.distributed.served) against the stored-halo path, whose
outputs tests/distributed/test_blocked.py checks against single-process evaluation: the same
last-layer rows for every target, on real processes, with budgets small enough for many
rounds and sweep steps, ranks holding several parts, and a rank holding none (one part per
rank on two ranks is test_blocked.py's case, served by default there)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.distributed.helpers import run_world


def _graph(make_graph, n: int = 300, seed: int = 5, dim: int = 4):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 6 * n), rng.integers(0, n, 6 * n)
    keep = (src != 11) & (dst != 11)  # node 11 is isolated
    src, dst = src[keep], dst[keep]
    src[:4], dst[:4] = [2, 2, 8, 8], [2, 2, 8, 8]  # self-loops and duplicates
    y = rng.integers(0, 3, n)
    x = rng.random((n, dim)).astype(np.float32)
    idx = rng.permutation(n)
    return make_graph(
        np.stack([src, dst], 1),
        n,
        x=x,
        y=y,
        train=np.sort(idx[:30]),
        val=np.sort(idx[30:60]),
        test=np.sort(idx[60:]),
    )


def _rank_view(rank: int, world: int, store: str, part_to_rank):
    """This rank's ``(ctx, store, part_to_rank, parts, local node tables)``."""
    from shoal.distributed import DistContext
    from shoal.distributed.tables import NodeTables
    from shoal.store import Store

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    st = Store.open(store)
    p2r = np.asarray(part_to_rank, np.int64)
    parts = [st.part(int(i)) for i in np.flatnonzero(p2r == rank)]
    return ctx, st, p2r, parts, NodeTables(st, parts, part_to_rank=p2r, scope="local")


def _outputs(
    rank: int,
    world: int,
    store: str,
    part_to_rank,
    budget: int,
    hidden: int,
    normalize: bool = True,
    halos: tuple[str, ...] = ("served", "stored"),
    pull: bool = False,
):
    """Every target's last-layer row by each of ``halos``, and the collective rounds each
    took; served rounds are swept unless ``pull`` (rounds whose sources fit are pulled:
    tests/distributed/test_pulled.py)."""
    import shoal.distributed.pulled as P
    from shoal.distributed.blocked import blocked_dist_outputs
    from shoal.distributed.comm import CommStats
    from shoal.nn.sage import GraphSAGE
    from shoal.training.blocked import sum_layers
    from shoal.training.inference import Scratch

    P.PULL_ROUNDS = pull
    ctx, st, p2r, parts, tables = _rank_view(rank, world, store, part_to_rank)
    torch.manual_seed(3)
    model = GraphSAGE(in_dim=st.feature_dim, hidden=hidden, out_dim=3, num_layers=2).eval()
    layers = sum_layers(model)
    got, rounds = {}, {}
    for halo in halos:
        rows: dict[int, np.ndarray] = {}

        def keep(start, rows=rows):
            def f(pos, h, todo):
                for i, v in zip(pos, h, strict=True):
                    rows[start + int(todo[i])] = v.copy()

            return f

        stats = CommStats()
        with Scratch(None, beside=st.path) as scratch:
            blocked_dist_outputs(
                layers,
                st,
                parts,
                p2r,
                ctx,
                tables,
                {p.index: np.arange(p.num_core, dtype=np.int64) for p in parts},
                {p.index: keep(p.start) for p in parts},
                scratch=scratch,
                budget=budget,
                normalize=normalize,
                stats=stats,
                halo=halo,
            )
        got[halo], rounds[halo] = rows, stats.rounds
    return got, rounds


@pytest.mark.parametrize(
    ("world", "part_to_rank", "halo_features", "hidden"),
    [
        # rank 0 holds two parts; layer 0 shrinks the rows (its input is the projection)
        (2, [0, 1, 0], False, 2),
        # rank 1 holds nothing: it serves nothing, asks nothing; halo rows stored too
        (2, [0, 0], True, 8),
        (3, [2, 0, 1, 0], False, 8),  # several peers per step
    ],
)
def test_served_equals_stored(make_graph, make_store, world, part_to_rank, halo_features, hidden):
    g = _graph(make_graph)
    nparts = len(part_to_rank)
    node_part = np.random.default_rng(1).integers(0, nparts, g.num_nodes)
    store = str(make_store(node_part, graph=g, halo_features=halo_features))
    res = run_world(_outputs, world, store, part_to_rank, 6000, hidden, timeout=240)
    served, stored = {}, {}
    for got, rounds in res:
        served.update(got["served"])
        stored.update(got["stored"])
        assert rounds["served"] > 0 or world == 1
    assert sorted(served) == list(range(g.num_nodes))  # every node, once
    assert sorted(stored) == sorted(served)
    a = np.stack([served[v] for v in sorted(served)])
    b = np.stack([stored[v] for v in sorted(stored)])
    assert np.abs(b).max() > 0.1  # the outputs are not all zero
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("halo_features", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_served_rows_sent_as_stored(make_graph, tmp_path, caplog, dtype, halo_features):
    """16-bit rows not normalised, a layer whose message is its input row (GraphSAGE that
    does not shrink): the sweep reads, sends and sums them as stored (the log says so), and
    every output equals the stored-halo path's, which decodes them to float32 first. Without
    halo rows in the store, the stored-halo path pulls them from their owners and stacks
    them with the core rows in their 16-bit kind (a float32 halo beside 16-bit core rows
    was refused as rows of two dtypes)."""
    from shoal.partition.base import Assignment
    from shoal.partition.io import write_assignment
    from shoal.store import build_store

    g = _graph(make_graph)
    node_part = np.random.default_rng(1).integers(0, 3, g.num_nodes).astype(np.int32)
    adir = tmp_path / "assign"
    write_assignment(adir, Assignment(node_part=node_part, num_parts=3, algorithm="hand"), g)
    store = tmp_path / "store"
    build_store(g, adir, store, halo_features=halo_features, feature_dtype=dtype)
    res = run_world(_outputs, 2, str(store), [0, 1, 0], 6000, 8, False, timeout=240)
    served, stored = {}, {}
    for got, rounds in res:
        served.update(got["served"])
        stored.update(got["stored"])
        assert rounds["served"] > 1  # several rounds or steps: the rows were exchanged
    assert sorted(served) == sorted(stored) == list(range(g.num_nodes))
    a = np.stack([served[v] for v in sorted(served)])
    b = np.stack([stored[v] for v in sorted(stored)])
    assert np.abs(b).max() > 0.1
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_stored_halo_refuses_int8_rows_on_every_rank(make_graph, tmp_path):
    """An int8 store's rows cannot be stacked with halo rows pulled without their scales:
    every rank (the one without parts too) raises the same error naming the way out,
    instead of one rank failing while the others wait in the exchange."""
    from shoal.partition.base import Assignment
    from shoal.partition.io import write_assignment
    from shoal.store import build_store

    g = _graph(make_graph)
    node_part = np.random.default_rng(1).integers(0, 2, g.num_nodes).astype(np.int32)
    adir = tmp_path / "assign"
    write_assignment(adir, Assignment(node_part=node_part, num_parts=2, algorithm="hand"), g)
    store = tmp_path / "store"
    build_store(g, adir, store, feature_dtype="int8")
    with pytest.raises(Exception) as err:
        run_world(_outputs, 2, str(store), [0, 0], 6000, 8, False, ("stored",), timeout=120)
    text = str(err.value)
    assert "--eval-halo served" in text and "int8" in text, text


def test_served_raw_mode_agreed(monkeypatch):
    """Rows go as stored only when the layer's message is the row and every rank with rows
    stores them in the same 16 bits; a rank without rows agrees with any."""
    import shoal.distributed.served as S
    from shoal.nn.sage import GraphSAGE
    from shoal.training.blocked import sum_layers

    monkeypatch.setattr(S, "reduced", lambda v, w, op: v)  # one rank
    wide, narrow = (sum_layers(GraphSAGE(in_dim=4, hidden=h, out_dim=3))[0] for h in (8, 2))

    class Rows:
        def __init__(self, code):
            self.code = code

        def stored16(self):
            return self.code

    assert S._raw(wide, None, Rows(1), 4, 1) == np.float16
    assert S._raw(wide, None, Rows(2), 4, 1) == np.uint16
    assert S._raw(wide, None, Rows(0), 4, 1) is None  # float32 rows, or normalised
    assert S._raw(narrow, narrow.pre, Rows(1), 4, 1) is None  # the message is a projection
    assert S._raw(wide, None, None, 4, 1) is None  # no rows anywhere


def _budgets(rank: int, world: int, store: str, id_book: int):
    """The working memory each served layer is given with ``id_book`` bytes set aside for
    the layers' node sets, and those sets' bytes."""
    import shoal.distributed.blocked as B
    from shoal.nn.sage import GraphSAGE
    from shoal.training.blocked import sum_layers
    from shoal.training.inference import Scratch

    ctx, st, p2r, parts, tables = _rank_view(rank, world, store, [0, 1])
    seen, sets = [], []
    served, needed = B.served_layer, B.needed_nodes_dist

    def record(*args, budget, **kw):
        seen.append(budget)
        return served(*args, budget=budget, **kw)

    def count(*args, **kw):
        core, halo = needed(*args, **kw)
        sets.append(sum(a.nbytes for level in core + halo for a in level.values()))
        return core, halo

    B.served_layer, B.needed_nodes_dist = record, count
    layers = sum_layers(GraphSAGE(in_dim=4, hidden=8, out_dim=3, num_layers=2).eval())
    with Scratch(None, beside=st.path) as scratch:
        B.blocked_dist_outputs(
            layers,
            st,
            parts,
            p2r,
            ctx,
            tables,
            {parts[0].index: np.arange(5, dtype=np.int64)},
            {parts[0].index: lambda pos, h, todo: None},
            scratch=scratch,
            budget=6000,
            id_book=id_book,
        )
    return seen, sets


def test_unused_node_set_book_goes_to_the_layers(make_graph, make_store):
    """Bytes set aside for the layers' node sets (every core node at every layer) that the
    sets, known once computed, do not take are added to the layers' working memory; none
    are added without a book, or when the sets take it all."""
    g = _graph(make_graph)
    node_part = np.random.default_rng(1).integers(0, 2, g.num_nodes)
    store = str(make_store(node_part, graph=g))
    for book, extra in ((0, False), (100_000, True), (1, False)):
        for seen, sets in run_world(_budgets, 2, store, book, timeout=120):
            assert len(seen) == 2 and len(sets) == 1 and 0 < sets[0] < 100_000
            want = 6000 + (book - sets[0] if extra else 0)
            assert seen == [want, want]
