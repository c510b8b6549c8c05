"""The balance post-pass in place (``copy=False``, as the default pipeline runs it)."""

from __future__ import annotations

import numpy as np

from shoal.partition.balance import balance_assignment, within_balance


def _ring(make_graph, n=40):
    e = [(v, (v + 1) % n) for v in range(n)]
    return make_graph(e + [(b, a) for a, b in e], n, directed=False)


def test_in_place_moves_the_given_array_and_copy_leaves_it(make_graph):
    g = _ring(make_graph)
    start = np.zeros(40, dtype=np.int32)  # everything in part 0: far over the bound
    kept = start.copy()
    out, moved = balance_assignment(g, start, 4)
    assert moved > 0 and out is not start and np.array_equal(start, kept)
    out2, moved2 = balance_assignment(g, start, 4, copy=False)
    assert out2 is start and moved2 == moved and np.array_equal(out2, out)
    assert within_balance(start, 4, 1.10)


def test_in_place_on_a_read_only_array_copies(make_graph):
    g = _ring(make_graph)
    start = np.zeros(40, dtype=np.int32)
    start.flags.writeable = False
    out, moved = balance_assignment(g, start, 4, copy=False)
    assert moved > 0 and out is not start and not start.any()
