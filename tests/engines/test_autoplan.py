"""The automatic plan: probes, the cost model against hand computations, the choice, and
``--engine auto`` / ``shoal plan --store`` end to end."""

from __future__ import annotations

import json
import math

import pytest

from shoal.engines.autoplan import auto_candidates, choose, estimate
from shoal.engines.probe import MachineCosts, parse_rate, probe_machine, probe_network
from shoal.store import Store
from shoal.training import TrainConfig
from tests.engines.test_launch import ARGS, _launch

CFG = dict(model="sage", fanouts=(3, 3), batch_size=4, hidden=8, epochs=2, progress=False)


def _costs(**kw) -> MachineCosts:
    base = dict(
        sample_s=0.01,
        batch_edges=100.0,
        batch_rows=50.0,
        halo_fraction=0.2,
        gather_s=0.02,
        compute_s=0.03,
        layer_s=[0.5, 0.25],
        layer_nodes=10,
        layer_sources=20,
        remote_scale=1.0,
        seq_read_bytes_per_s=float("inf"),
        gather_mem_s=0.001,
        net_bytes_per_s=1e6,
        net_latency_s=1e-3,
        network="given",
    )
    return MachineCosts(**{**base, **kw})


def test_estimates_equal_the_formulas_by_hand(make_store):
    st = Store.open(make_store(parts=2))
    train = sum(p["train"] for p in st.meta["parts"])
    tc = TrainConfig.from_options(**CFG)
    c = _costs()
    est = estimate(st, tc, c, 2, params=100, widths=[4, 8, 2])
    steps = math.ceil(train / (4 * 2))
    allreduce = 2 * 4 * 100 * (2 - 1) / 2 / 1e6 + 2 * 1e-3
    pull = 50 * 0.2 * 16 / 1e6 + (2 * 2 + 2) * 1e-3  # rows * halo * 4 floats; a trip per hop
    mb = est["minibatch"]
    assert mb["communication"] == pytest.approx(steps * pull)
    assert mb["epoch_s"] == pytest.approx(steps * (0.01 + 0.02 * 0.8 + 0.03 + pull + allreduce))
    av = est["averaging"]
    assert av["epoch_s"] == pytest.approx(steps * (0.01 + 0.02 + 0.03) + 3 * allreduce)
    hec = est["hec"]  # remote rows: hidden-width embeddings
    assert hec["communication"] == pytest.approx(steps * (50 * 0.2 * 4 * 8 / 1e6 + 4e-3))
    parts = st.meta["parts"]
    core, halo = max(p["num_core"] for p in parts), max(p["num_halo"] for p in parts)
    fg = est["fullgraph"]  # one part per rank: the larger one sets the pace
    # layer 0 (4 -> 8 wide) aggregates first: its core nodes; layer 1 (8 -> 2) applies its
    # linear map to the sources first: the part's core + halo rows
    assert fg["compute"] == pytest.approx(0.5 * core / 10 + 0.25 * (core + halo) / 20)
    assert fg["communication"] == pytest.approx(2 * halo * 4 * 8 / 1e6 + 2 * 1 * 1 * 1e-3)
    dg = est["disagg"]  # 1 batch worker, 1 compute worker, ceil(train / 4) batches
    batches = math.ceil(train / 4)
    assert dg["preparation"] == pytest.approx(batches * 0.03)
    assert dg["compute"] == pytest.approx(batches * (0.03 + 50 * 16 / 1e6 + 1e-3))
    cached = estimate(st, tc, c, 2, params=100, widths=[4, 8, 2], memory_per_worker=1 << 30)
    assert cached["averaging"]["gather"] == pytest.approx(steps * 0.001)  # rows in memory
    tight = estimate(st, tc, c, 2, params=100, widths=[4, 8, 2], memory_per_worker=64)
    assert tight["averaging"]["gather"] == pytest.approx(steps * 0.02)  # direct reads
    slow_disk = estimate(st, tc, _costs(seq_read_bytes_per_s=1e3), 2, params=100, widths=[4, 8, 2])[
        "disagg"
    ]
    whole = st.num_nodes * 4 * 4 + st.num_edges * 4  # every part streamed in, one worker
    assert slow_disk["streaming"] == pytest.approx(whole / 1e3)
    one = estimate(st, tc, c, 1, params=100, widths=[4, 8, 2])  # one rank: nothing remote
    assert one["minibatch"]["communication"] == 0 and "disagg" not in one
    grown = estimate(st, tc, _costs(remote_scale=2.0), 2, params=100, widths=[4, 8, 2])
    assert grown["minibatch"]["compute"] == pytest.approx(2 * mb["compute"])  # halo expanded
    assert grown["averaging"] == av and grown["disagg"]["preparation"] == pytest.approx(
        2 * dg["preparation"]
    )


def test_a_probed_all_reduce_replaces_the_ring_formula(make_store):
    st = Store.open(make_store(parts=2))
    tc = TrainConfig.from_options(**CFG)
    probed = _costs(allreduce_s=0.5, ranks=2)
    a = estimate(st, tc, probed, 2, params=100, widths=[4, 8, 2])
    b = estimate(st, tc, _costs(), 2, params=100, widths=[4, 8, 2])
    steps = math.ceil(sum(p["train"] for p in st.meta["parts"]) / 8)
    assert a["minibatch"]["allreduce"] == pytest.approx(steps * 0.5)
    assert b["minibatch"]["allreduce"] == pytest.approx(steps * (8 * 100 / 2 / 1e6 + 2e-3))
    assert a["disagg"]["allreduce"] == 0  # one compute worker: nothing to reduce


def test_choice_is_the_cheapest_runnable_candidate(make_store):
    st = Store.open(make_store(parts=2))
    tc = TrainConfig.from_options(**CFG)
    slow_compute = _costs(compute_s=10.0, layer_s=[1e-5, 1e-5])  # full graph wins
    assert choose(st, tc, slow_compute, 2, params=10, widths=[4, 8, 2]).engine == "fullgraph"
    gat = TrainConfig.from_options(**{**CFG, "model": "gat"})
    p = choose(st, gat, slow_compute, 2, params=10, widths=[4, 8, 2])
    assert p.engine != "fullgraph" and "gat" in p.excluded["fullgraph"]
    p = choose(st, tc, _costs(), 1, params=10, widths=[4, 8, 2])
    assert "disagg" in p.excluded and p.engine in auto_candidates()
    only = choose(
        st, tc, slow_compute, 2, params=10, widths=[4, 8, 2], candidates=("minibatch", "averaging")
    )
    assert only.engine in ("minibatch", "averaging") and "fullgraph" in only.excluded
    text = "\n".join(only.reasons())
    assert f"-> {only.engine}" in text and "not among the candidates" in text
    with pytest.raises(ValueError, match="valid names"):
        choose(st, tc, _costs(), 2, params=10, widths=[4, 8, 2], candidates=("fast",))
    with pytest.raises(ValueError, match="parts for 3 workers"):
        choose(st, tc, _costs(), 3, params=10, widths=[4, 8, 2])


def test_probes_measure_this_store(make_store):
    st = Store.open(make_store(parts=2))
    c = probe_machine(st, TrainConfig.from_options(**CFG), network="10gbit", repeats=1)
    assert c.sample_s > 0 and c.gather_s > 0 and c.compute_s > 0 and len(c.layer_s) == 2
    assert 0 <= c.halo_fraction <= 1 and 4 <= c.batch_rows
    assert c.layer_nodes == max(p["num_core"] for p in st.meta["parts"])  # under 4096: all
    assert c.net_bytes_per_s == 10e9 / 8 and c.network == "10gbit (given)"
    bw, rtt = probe_network(nbytes=1 << 20, pings=5)
    assert bw > 0 and rtt > 0
    assert parse_rate("500mbit") == 62.5e6
    with pytest.raises(ValueError, match="1gbit"):
        parse_rate("fast")


def test_engine_auto_trains_with_the_chosen_engine_and_records_why(tmp_path, make_store):
    store = make_store(parts=2)
    out = tmp_path / "run.json"
    p = _launch(
        "--store", str(store), "--engine", "auto", "--nproc", "2", "--json", str(out), *ARGS
    )
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(out.read_text())
    plan = d["auto_plan"]
    assert d["engine"] == plan["engine"] and plan["engine"] in plan["estimates"]
    assert plan["costs"]["network"] == "between the run's ranks (probed)"
    best = min(plan["estimates"].values(), key=lambda e: e["epoch_s"])
    assert plan["estimates"][plan["engine"]] == best
    assert f"-> {plan['engine']}" in p.stderr


def test_shoal_plan_probes_with_the_workers_processes(make_store, capsys, tmp_path):
    from shoal.cli import main

    store = make_store(parts=2)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rc = main(
        [
            "plan",
            "--store",
            str(store),
            "--workers",
            "2",
            "--memory-per-worker",
            "1GB",
            "--scratch-dir",
            str(scratch),
            "--json",
            "-",
        ]
    )
    c = json.loads(capsys.readouterr().out)["engine"]["costs"]
    assert rc == 0 and c["ranks"] == 2 and c["allreduce_s"] > 0 and c["params"] > 0
    assert c["network"] == "between the run's ranks (probed)"
    assert list(scratch.iterdir()) == []  # the result file is removed


def test_shoal_plan_prints_the_engine_estimates(make_store, capsys):
    from shoal.cli import main

    store = make_store(parts=2)
    rc = main(
        [
            "plan",
            "--store",
            str(store),
            "--workers",
            "2",
            "--memory-per-worker",
            "1GB",
            "--network",
            "10gbit",
            "--json",
            "-",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["engine"]["engine"] in auto_candidates()
    assert set(d["engine"]["estimates"]) | set(d["engine"]["excluded"]) == set(auto_candidates())


@pytest.mark.parametrize(
    ("errors", "raised"),
    [
        (["gloo: Connection reset by peer"], None),
        (["Connection refused", "Address already in use"], None),
        (["Connection reset"] * 3, "Connection reset"),
        (["a probe failed: ValueError"], "a probe failed"),
    ],
)
def test_the_probes_rendezvous_is_tried_again_when_its_connections_fail(
    monkeypatch, tmp_path, errors, raised
):
    """A port found free may be taken before the workers bind it: a failure on the process
    group's connections is tried again on another port (3 tries in all), any other failure
    is raised at once."""
    import torch.multiprocessing as mp

    from shoal.engines.probe import spawn_probe

    left, ports = list(errors), []

    def spawn(fn, args, nprocs, join):
        ports.append(args[1])
        if left:
            raise RuntimeError(left.pop(0))
        with open(args[4], "w") as f:
            json.dump(_costs().to_dict(), f)

    monkeypatch.setattr(mp, "spawn", spawn)
    if raised is None:
        assert spawn_probe("store", TrainConfig(), 2, str(tmp_path)) == _costs()
        assert len(ports) == len(errors) + 1
    else:
        with pytest.raises(RuntimeError, match=raised):
            spawn_probe("store", TrainConfig(), 2, str(tmp_path))
        assert len(ports) == min(len(errors), 3)
    assert list(tmp_path.iterdir()) == []
