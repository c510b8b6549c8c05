"""BlockSampler: the hop loop, relabelling and block assembly both samplers share, on a tiny
hand-built graph whose blocks are known."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.sample.base import (
    BlockSampler,
    DenseIdMap,
    HashedIdMap,
    assemble_blocks,
    hop_rowptr,
    parse_fanouts,
)
from shoal.sample.sampler import NeighborSampler

# in-neighbours of each node (row v lists the u of edges u -> v)
_IN = {0: [3, 1], 1: [2], 2: [], 3: [4, 0], 4: [1]}


class _AllNeighbours(BlockSampler):
    """Takes every in-neighbour in list order (no randomness); records each hop's key."""

    def __init__(self, fanouts, id_map: str = "dense") -> None:
        super().__init__(fanouts, len(_IN), id_map=id_map)
        self.degrees = np.array([len(_IN[v]) for v in range(len(_IN))], np.float32)
        self.keys: list[int] = []

    def _draw_hop(self, n, fanout, key, exclude):
        self.keys.append(int(key))
        frontier = self._nodes[:n].tolist()
        rows = [_IN[v][: None if fanout == -1 else fanout] for v in frontier]
        rowptr = hop_rowptr(np.array([len(r) for r in rows], np.int64), n)
        picked = np.array([u for r in rows for u in r], np.int64)
        dst = np.repeat(np.arange(n, dtype=np.int64), [len(r) for r in rows])
        return rowptr, picked, dst


def _clean(s: BlockSampler) -> bool:
    m = s._ids
    return bool(np.all(m.g2l == -1)) if isinstance(m, DenseIdMap) else bool(np.all(m.keys == -1))


@pytest.mark.parametrize("id_map", ["dense", "hashed"])
def test_two_hops_give_the_known_blocks(id_map):
    s = _AllNeighbours("all,1", id_map)
    mb = s._sample_hops(np.array([0], np.int64), s.fanouts, 5)
    # hop 1: 0 <- 3, 1 (new ids 1, 2); hop 2 (fanout 1): 0 <- 3, 3 <- 4 (new), 1 <- 2 (new)
    assert mb.n_id.tolist() == [0, 3, 1, 4, 2] and mb.num_seeds == 1
    inner, outer = mb.blocks  # input layer (hop 2) first
    assert (outer.num_src, outer.num_dst) == (3, 1)
    assert outer.edge_index.tolist() == [[1, 2], [0, 0]] and outer.rowptr.tolist() == [0, 2]
    assert (inner.num_src, inner.num_dst) == (5, 3)
    assert inner.edge_index.tolist() == [[1, 3, 4], [0, 1, 2]]
    assert inner.rowptr.tolist() == [0, 1, 2, 3]
    assert inner.deg_src.tolist() == [2.0, 2.0, 1.0, 1.0, 0.0]
    assert outer.deg_src.tolist() == [2.0, 2.0, 1.0]
    for b in mb.blocks:
        assert str(b.edge_index.dtype) == "torch.int64" and str(b.rowptr.dtype) == "torch.int64"
        assert str(b.deg_src.dtype) == "torch.float32"
    assert mb.n_id.dtype == np.int64
    # one stream per hop, the same for the same batch seed; the id map is clean afterwards
    assert len(set(s.keys)) == 2
    again = s._sample_hops(np.array([0], np.int64), s.fanouts, 5)
    assert s.keys[2:] == s.keys[:2] and again.n_id.tolist() == mb.n_id.tolist()
    assert _clean(s)


def test_assemble_blocks_orders_layers_input_first():
    ei = np.array([[1], [0]], np.int64)
    hops = [(ei, np.array([0, 1], np.int64), 2, 1), (ei, np.array([0, 1, 1], np.int64), 3, 2)]
    mb = assemble_blocks(hops, np.array([7, 8, 9], np.int64), np.arange(10, dtype=np.float32), 1)
    assert [(b.num_src, b.num_dst) for b in mb.blocks] == [(3, 2), (2, 1)]
    assert mb.blocks[0].deg_src.tolist() == [7.0, 8.0, 9.0]


@pytest.mark.parametrize("id_map", ["dense", "hashed"])
def test_seeds_are_checked_and_the_id_map_stays_clean(id_map):
    s = _AllNeighbours((1,), id_map)
    with pytest.raises(ValueError, match="unique"):
        s._sample_hops(np.array([1, 2, 1], np.int64), s.fanouts, 0)
    with pytest.raises(ValueError, match="out of range"):
        s._sample_hops(np.array([5], np.int64), s.fanouts, 0)
    assert _clean(s)
    with pytest.raises(ValueError, match="id_map"):
        _AllNeighbours((1,), "sparse")


def test_hashed_id_map_gives_the_dense_maps_local_ids_and_grows():
    """Random picks with repeats over a large id space, batches larger than the table's first
    size (it grows and rehashes mid-batch): the same local ids and node order as the dense map,
    and both maps are clean after each batch."""
    rng = np.random.default_rng(0)
    n_ids = 1 << 40  # ids far beyond any dense map: only the hashed one is built over them
    dense, hashed = DenseIdMap(100_000), HashedIdMap()
    first = hashed.keys.shape[0]
    for _batch in range(4):
        space = rng.choice(100_000, 30_000, replace=False)
        seeds = space[:500]
        picks = [rng.choice(space, 9_000 * (h + 1)) for h in range(2)]
        out = []
        for m, shift in ((dense, 0), (hashed, n_ids - 100_000)):
            nodes = np.empty(60_000, np.int64)
            assert m.seed(seeds + shift, nodes) == -1
            n, cols = len(seeds), []
            for p in picks:
                col = np.empty(len(p), np.int64)
                n = m.relabel(p + shift, len(p), nodes, n, col)
                cols.append(col)
            out.append((nodes[:n] - shift, cols))
            m.reset(nodes, n)
        np.testing.assert_array_equal(out[0][0], out[1][0])
        for a, b in zip(out[0][1], out[1][1], strict=True):
            np.testing.assert_array_equal(a, b)
        assert np.all(dense.g2l == -1) and np.all(hashed.keys == -1)
    assert hashed.keys.shape[0] > first
    nodes = np.empty(4, np.int64)
    assert hashed.seed(np.array([3, 5, 3], np.int64), nodes) == 2 and np.all(hashed.keys == -1)


def test_fanouts_are_validated_once_in_the_base():
    assert _AllNeighbours([2, -1]).fanouts == (2, -1) and _AllNeighbours("3").num_layers == 1
    for bad in ("", "0", (3, -2)):
        with pytest.raises(ValueError):
            _AllNeighbours(bad)
    # the public name stays where callers import it
    from shoal.sample import parse_fanouts as exported
    from shoal.sample.sampler import parse_fanouts as from_sampler

    assert exported is parse_fanouts and from_sampler is parse_fanouts
    assert issubclass(NeighborSampler, BlockSampler)
