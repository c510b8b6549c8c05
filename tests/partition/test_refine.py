"""Restreaming refinement in place (``copy=False``, as the default pipeline runs it)."""

from __future__ import annotations

import numpy as np

from shoal.partition.refine import refine_assignment


def test_in_place_refines_the_given_array_and_copy_leaves_it(make_graph):
    # two 6-cliques joined by one edge; node 0 starts on the wrong side
    e = [(a, b) for c in (0, 6) for a in range(c, c + 6) for b in range(c, c + 6) if a != b]
    g = make_graph(e + [(5, 6), (6, 5)], 12, directed=False)
    start = np.array([1] + [0] * 5 + [1] * 5 + [0], dtype=np.int32)
    kept = start.copy()
    out, moves = refine_assignment(g, start, 2, passes=2, balance=1.2)
    assert moves[0] > 0 and out is not start and np.array_equal(start, kept)
    assert out.tolist() == [0] * 6 + [1] * 6
    out2, moves2 = refine_assignment(g, start, 2, passes=2, balance=1.2, copy=False)
    assert out2 is start and moves2 == moves and start.tolist() == [0] * 6 + [1] * 6
    ro = kept.copy()
    ro.flags.writeable = False
    out3, _ = refine_assignment(g, ro, 2, passes=2, balance=1.2, copy=False)
    assert out3 is not ro and np.array_equal(ro, kept) and np.array_equal(out3, out)
