"""On a typed graph the vertex-stream partitioners cap each node type per part, as DistDGL's
``balance_ntypes``; on an untyped graph the assignment does not change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.partition.base import get_partitioner
from shoal.partition.metrics import partition_metrics


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    out = tmp_path_factory.mktemp("tb") / "g"
    return generate_igbh(out, IGBHConfig(scale=0.01, features=0, classes=3), show_progress=False)


@pytest.mark.parametrize("algo", ["ldg", "fennel"])
def test_each_node_type_stays_within_the_balance(typed, algo):
    p, balance = 3, 1.05
    a = get_partitioner(algo, num_parts=p, balance=balance).partition(typed)
    m = partition_metrics(typed, a.node_part, p)
    for t in typed.schema.node_types:
        cap = max(math.floor(balance * t.count / p), -(-t.count // p))
        assert max(m["part_type_sizes"][t.name]) <= cap, t.name
    # each type with enough nodes to fill its caps is in every part
    assert all(min(c) > 0 for t, c in m["part_type_sizes"].items() if t != "conference")
    assert (np.bincount(a.node_part, minlength=p) > 0).all()
