"""Link mini-batches: positives covered once per epoch, no leakage, negatives as specified."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shoal.sample.features import FeatureGatherer
from shoal.sample.sampler import NeighborSampler
from shoal.training.linkbatches import LinkBatchLoader, draw_negatives, positive_chunks


def undirected_graph(n=60, m=300, seed=0):
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, size=(m, 2))
    e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
    both = np.concatenate([e, e[:, ::-1], [[3, 3]]])  # with one self-loop
    order = np.argsort(both[:, 1], kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(both[:, 1], minlength=n), out=indptr[1:])
    return both, indptr, both[order, 0].copy(), e


def _unordered(pairs: np.ndarray) -> Counter:
    return Counter(map(tuple, np.sort(pairs, axis=1).tolist()))


def test_positive_chunks_cover_each_pair_once_in_a_seeded_order():
    both, _, _, pairs = undirected_graph()
    got = np.concatenate(
        list(positive_chunks(both, directed=False, seed=1, epoch=0, chunk_edges=50))
    )
    assert _unordered(got) == _unordered(pairs)
    # each pair oriented at random: both ends anchor negatives (not only the smaller id)
    flipped = np.mean(got[:, 0] > got[:, 1])
    assert 0.3 < flipped < 0.7
    again = np.concatenate(
        list(positive_chunks(both, directed=False, seed=1, epoch=0, chunk_edges=50))
    )
    other = np.concatenate(
        list(positive_chunks(both, directed=False, seed=1, epoch=1, chunk_edges=50))
    )
    assert np.array_equal(got, again) and not np.array_equal(got, other)
    d = np.concatenate(list(positive_chunks(both, directed=True, seed=0, epoch=0, chunk_edges=7)))
    assert len(d) == len(both) - 1  # directed: every edge but the self-loop


def test_negatives():
    rng = np.random.default_rng(0)
    pos = np.array([[0, 10], [1, 11], [2, 12], [3, 13]])
    inb = draw_negatives(pos, 100, 5, "in-batch", rng)
    assert inb.shape == (4, 5)
    for i in range(4):
        assert set(inb[i].tolist()) <= {10, 11, 12, 13} - {pos[i, 1]}
    uni = draw_negatives(pos, 100, 3, "uniform", rng)
    assert uni.shape == (4, 3) and uni.min() >= 0 and uni.max() < 100
    with pytest.raises(ValueError, match="at least 2"):
        draw_negatives(pos[:1], 100, 1, "in-batch", rng)
    with pytest.raises(ValueError, match="valid names: uniform, in-batch"):
        draw_negatives(pos, 100, 1, "hard", rng)


@pytest.mark.parametrize("negatives", ["uniform", "in-batch"])
def test_batches_never_see_their_own_edges(negatives):
    both, indptr, indices, pairs = undirected_graph(seed=3)
    n = 60
    x = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)
    loader = LinkBatchLoader(
        NeighborSampler(indptr, indices, (-1, -1)),
        FeatureGatherer(x),
        both,
        directed=False,
        num_nodes=n,
        batch_size=16,
        num_neg=3,
        negatives=negatives,
        seed=5,
        chunk_edges=40,
    )
    seen = []
    for b in loader.epoch(0):
        ids = b.mb.n_id
        assert np.allclose(b.x.numpy(), x[ids])
        pos = np.stack([ids[b.pos[0].numpy()], ids[b.pos[1].numpy()]], axis=1)
        seen.append(pos)
        banned = {(int(u), int(v)) for u, v in pos} | {(int(v), int(u)) for u, v in pos}
        for blk in b.mb.blocks:
            src, dst = blk.edge_index.numpy()
            used = {(int(u), int(v)) for u, v in zip(ids[src], ids[dst], strict=True)}
            assert not (used & banned)  # a positive (or its reverse) never carries a message
        neg = np.stack([ids[b.neg[0].numpy()], ids[b.neg[1].numpy()]], axis=1)
        assert len(neg) == 3 * len(pos)
        assert np.array_equal(neg[:, 0], np.repeat(pos[:, 0], 3))  # corrupt the destination
        assert b.pos.max() < b.mb.num_seeds and b.neg.max() < b.mb.num_seeds
    allpos = np.concatenate(seen)
    assert _unordered(allpos) == _unordered(pairs)
    # full fanouts: every other in-edge of a seed is used (nothing else was dropped)
    b = next(iter(loader.epoch(1)))
    ids = b.mb.n_id
    pos = {(int(ids[u]), int(ids[v])) for u, v in b.pos.numpy().T}
    banned = pos | {(v, u) for u, v in pos}
    last = b.mb.blocks[-1]
    src, dst = last.edge_index.numpy()
    used = Counter(int(ids[v]) for v in dst)
    for v in ids[: b.mb.num_seeds]:
        want = sum(1 for (u, w) in map(tuple, both.tolist()) if w == v and (u, w) not in banned)
        assert used[int(v)] == want
