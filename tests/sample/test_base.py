"""BlockSampler: the hop loop, relabelling and block assembly both samplers share, on a tiny
hand-built graph whose blocks are known."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.sample.base import BlockSampler, assemble_blocks, hop_rowptr, parse_fanouts
from shoal.sample.sampler import NeighborSampler

# in-neighbours of each node (row v lists the u of edges u -> v)
_IN = {0: [3, 1], 1: [2], 2: [], 3: [4, 0], 4: [1]}


class _AllNeighbours(BlockSampler):
    """Takes every in-neighbour in list order (no randomness); records each hop's key."""

    def __init__(self, fanouts) -> None:
        super().__init__(fanouts, len(_IN))
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


def test_two_hops_give_the_known_blocks():
    s = _AllNeighbours("all,1")
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
    assert np.all(s._g2l == -1)


def test_assemble_blocks_orders_layers_input_first():
    ei = np.array([[1], [0]], np.int64)
    hops = [(ei, np.array([0, 1], np.int64), 2, 1), (ei, np.array([0, 1, 1], np.int64), 3, 2)]
    mb = assemble_blocks(hops, np.array([7, 8, 9], np.int64), np.arange(10, dtype=np.float32), 1)
    assert [(b.num_src, b.num_dst) for b in mb.blocks] == [(3, 2), (2, 1)]
    assert mb.blocks[0].deg_src.tolist() == [7.0, 8.0, 9.0]


def test_seeds_are_checked_and_the_id_map_stays_clean():
    s = _AllNeighbours((1,))
    with pytest.raises(ValueError, match="unique"):
        s._sample_hops(np.array([1, 2, 1], np.int64), s.fanouts, 0)
    with pytest.raises(ValueError, match="out of range"):
        s._sample_hops(np.array([5], np.int64), s.fanouts, 0)
    assert np.all(s._g2l == -1)


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
