"""SDT-GNN workload allocation (shoal.plan, ``shoal plan``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.plan import Config, default_reserve, graph_data_bytes, make_plan

MiB = 2**20


@pytest.fixture
def graph(make_graph):
    rng = np.random.default_rng(0)
    n = 64
    edges = rng.integers(0, n, size=(300, 2))
    return make_graph(edges, n, x=rng.standard_normal((n, 16)).astype(np.float32), y=np.zeros(n))


def test_data_size_counts_features_and_structure(graph):
    n, m = graph.num_nodes, graph.num_edges
    expected = n * 16 * 4 + (n + 1) * 8 + m * 4 + n * 8 + 3 * n
    assert graph_data_bytes(graph.path) == expected


def test_p_equals_workers_when_data_fits(graph):
    s = graph_data_bytes(graph.path)
    plan = make_plan(Config(workers=3, memory_per_worker=s, reserve=0), graph=graph.path)
    assert plan.num_parts == 3
    assert plan.assignment == [[0], [1], [2]]
    assert plan.fits


def test_p_from_memory_budget_and_cyclic_assignment(graph):
    s = graph_data_bytes(graph.path)
    budget = s // 7 + 1  # S / (M - T) between 6 and 7 -> p = 7 > Q = 3
    plan = make_plan(
        Config(workers=3, memory_per_worker=budget + 100, reserve=100), graph=graph.path
    )
    assert plan.num_parts == math.ceil(s / budget) == 7
    assert plan.assignment == [[0, 3, 6], [1, 4], [2, 5]]
    d = plan.to_dict()
    assert d["worker_of_part"] == [0, 1, 2, 0, 1, 2, 0]
    assert any("--parts 7" in n for n in plan.notes)


def test_default_reserve():
    assert default_reserve(3 * 2**30, accelerator=True) == 2 * 2**30
    assert default_reserve(4 * 2**30, accelerator=False) == 2**30
    assert default_reserve(1 * 2**30, accelerator=False) == 512 * MiB
    with pytest.raises(ShoalInputError, match="no memory"):
        make_plan(Config(workers=1, memory_per_worker=256 * MiB, accelerator=False), graph=".")


def test_bad_config():
    with pytest.raises(ShoalInputError, match="workers"):
        Config(workers=0, memory_per_worker=1)
    with pytest.raises(ShoalInputError, match="memory"):
        Config(workers=1, memory_per_worker=0)


@pytest.fixture
def store(graph, tmp_path):
    from shoal.store.writer import build_store

    a = tmp_path / "a"
    write_assignment(a, Assignment(np.arange(64) % 5, 5, "hash"), graph)
    build_store(graph, a, tmp_path / "s")
    return tmp_path / "s"


def test_store_plan_more_parts_than_workers(store, run_cli, tmp_path):
    opts = "--workers 2 --memory-per-worker 4GB --reserve 1GB".split()
    code, out, err = run_cli("plan", "--store", store, *opts, "--out", tmp_path / "plan.json")
    assert code == 0, err
    assert "worker 0: parts [0, 2, 4]" in out and "worker 1: parts [1, 3]" in out
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["num_parts"] == 5 and plan["workers"] == 2
    assert plan["assignment"] == [[0, 2, 4], [1, 3]]
    assert plan["reserve"] == 10**9 and plan["budget"] == 3 * 10**9
    assert len(plan["part_bytes"]) == 5 and all(b > 0 for b in plan["part_bytes"])


def test_store_plan_fewer_parts_than_workers_is_an_error(store, run_cli, tmp_path):
    opts = "--workers 8 --memory-per-worker 4GB".split()
    code, _, err = run_cli("plan", "--store", store, *opts, "--out", tmp_path / "plan.json")
    assert code == 2 and "5 parts but 8 workers" in err
    assert not (tmp_path / "plan.json").exists()


def test_store_plan_part_too_big(store, run_cli):
    opts = "--workers 2 --memory-per-worker 1000 --reserve 0".split()
    code, out, _ = run_cli("plan", "--store", store, *opts)
    assert code == 3 and "exceeds the budget" in out


def test_graph_plan_cli_json(graph, run_cli):
    opts = "--workers 2 --memory-per-worker 2GiB --json -".split()
    code, out, err = run_cli("plan", "--graph", graph.path, *opts)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["num_parts"] == 2 and plan["format"] == "shoal-plan"
    assert plan["memory_per_worker"] == 2 * 2**30


def test_plan_needs_one_source(run_cli):
    with pytest.raises(SystemExit) as e:  # argparse: one of --store/--graph is required
        run_cli("plan", "--workers", "2", "--memory-per-worker", "1GB")
    assert e.value.code == 2
    code, _, err = run_cli(
        "plan", "--graph", "/nonexistent", "--workers", "2", "--memory-per-worker", "lots"
    )
    assert code == 2 and "cannot parse size" in err
