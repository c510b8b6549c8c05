"""IdSet: the same answers as a Python set, over ids far beyond any dense array."""

from __future__ import annotations

import numpy as np

from shoal.utils.idset import IdSet


def test_idset_matches_a_python_set_while_it_grows():
    rng = np.random.default_rng(0)
    s, ref = IdSet(4), {5}
    s.add(np.array([5]))
    for _ in range(6):
        ids = rng.integers(0, 1 << 60, 3000)
        ids = np.concatenate([ids, ids[:500], rng.choice(np.fromiter(ref, np.int64), 200)])
        before = set(ref)
        new = s.add(ids)
        want = []
        for v in ids.tolist():  # first occurrences of ids not in the set before
            want.append(v not in before and v not in ref)
            ref.add(v)
        assert new.tolist() == want
        assert len(s) == len(ref)
        assert set(s.members().tolist()) == ref
        probe = np.concatenate([ids[:100], rng.integers(0, 1 << 60, 100)])
        assert s.contains(probe).tolist() == [v in ref for v in probe.tolist()]
    s.clear()
    assert len(s) == 0 and not s.contains(ids).any() and (s.keys == -1).all()
    assert s.add(np.array([7, 7, 8])).tolist() == [True, False, True]
    assert s.members().tolist() == [7, 8]


def test_empty_inputs():
    s = IdSet()
    assert s.add(np.empty(0, np.int64)).shape == (0,)
    assert s.contains(np.empty(0, np.int64)).shape == (0,)
    assert len(s.members()) == 0
