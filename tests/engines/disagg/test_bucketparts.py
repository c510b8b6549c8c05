"""Parts loaded from the store's edge buckets (Armada Section 3, storage layer)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shoal.engines.disagg.bucketparts import ResidentParts, part_bytes
from shoal.store import Store


def _rows(part, r: int) -> Counter:
    """Global ids of row ``r``'s in-neighbours (a multiset)."""
    loc = part.indices[part.indptr[r] : part.indptr[r + 1]]
    core = loc < part.num_core
    ids = np.where(core, loc + part.start, 0)
    ids[~core] = np.asarray(part.halo_ids)[loc[~core] - part.num_core]
    return Counter(ids.tolist())


@pytest.mark.parametrize("parts", [1, 3])
def test_a_part_loaded_from_buckets_has_the_store_parts_neighbourhoods(make_store, parts):
    s = Store.open(make_store(parts=parts))
    res = ResidentParts(s)
    for j in range(parts):
        res.load(j)
        got, ref = res.parts[j], s.part(j)
        assert got.num_core == ref.num_core and got.start == ref.start
        assert all(_rows(got, r) == _rows(ref, r) for r in range(ref.num_core))
        assert np.array_equal(got.features, np.asarray(ref.features)[: ref.num_core])
        assert set(got.halo_ids.tolist()) == set(np.asarray(ref.halo_ids).tolist())
    assert res.buckets_read == parts * parts and res.loads == list(range(parts))
    assert res.bytes_read >= int(s.bucket_counts.sum()) * 2 * 4
    assert (part_bytes(s) > 0).all()


def test_local_sampling_keeps_only_edges_among_resident_parts(make_store):
    s = Store.open(make_store(parts=3))
    owner = s.owner
    res = ResidentParts(s, local=True)
    res.load(0)
    res.load(2)
    for j in (0, 2):
        p = res.parts[j]
        for r in range(p.num_core):
            nb = _rows(p, r)
            full = _rows(s.part(j), r)
            want = Counter({u: k for u, k in full.items() if owner(np.array([u]))[0] in (0, 2)})
            assert nb == want
    res.evict(0)  # part 2 loses its in-edges from part 0
    p = res.parts[2]
    assert all(owner(np.array([u]))[0] == 2 for r in range(p.num_core) for u in _rows(p, r))
    res.load(1)
    assert res.buckets_read == 1 + 3 + 3  # (0,0); (0,2),(2,0),(2,2); (2,1),(1,2),(1,1)


def test_loading_a_resident_part_twice_is_an_error(make_store):
    res = ResidentParts(Store.open(make_store(parts=2)))
    res.load(1)
    with pytest.raises(ValueError, match="already resident"):
        res.load(1)
