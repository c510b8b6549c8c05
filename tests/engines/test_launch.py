"""The launcher: one command starts N processes through torch.distributed.run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.engines.conftest import community_graph

ARGS = [
    "--fanouts",
    "3,3",
    "--hidden",
    "8",
    "--batch-size",
    "4",
    "--epochs",
    "8",
    "--lr",
    "0.05",
    "--dropout",
    "0",
    "--no-progress",
]


REPO = Path(__file__).resolve().parents[2]


def _launch(*args: str, hooks: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``shoal train ARGS`` in a subprocess; with ``hooks``, through tests.engines.faults."""
    cmd = ["-m", "tests.engines.faults", *hooks, "--"] if hooks else ["-m", "shoal", "train"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *cmd, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def test_averaging_two_processes_one_command(tmp_path, make_graph, make_store):
    store = make_store(parts=4, graph=community_graph(make_graph))
    out = tmp_path / "run.json"
    p = _launch(
        "--store",
        str(store),
        "--engine",
        "averaging",
        "--nproc",
        "2",
        "--json",
        str(out),
        "--device",
        "cpu",
        *ARGS,
        # one model per part (the default) steps once per part and epoch on this graph (4
        # training nodes a part, batches of 4), then the 4 are averaged: more epochs than
        # the carried model needs
        "--epochs",
        "24",
    )
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["engine"] == "averaging" and d["world_size"] == 2 and d["num_parts"] == 4
    assert d["config"]["run"]["device"] == "cpu"  # --device reaches the workers' configs
    assert d["test_accuracy"] >= 0.75
    assert d["comm_per_epoch"]["bytes_sent"] == 0  # no communication during an epoch
    assert d["comm_per_epoch"]["allreduce_bytes"] > 0
    assert "test accuracy" in p.stdout


def test_failing_rank_fails_the_run_with_its_error(make_store):
    store = make_store(parts=2)
    p = _launch(
        "--store",
        str(store),
        "--engine",
        "minibatch",
        "--nproc",
        "2",
        *ARGS,
        hooks=("fail_on_rank_1",),
    )
    assert p.returncode != 0
    assert "injected failure on rank 1" in p.stderr


def test_a_failing_disagg_batch_worker_ends_the_run_with_its_error(make_store):
    store = make_store(parts=2)
    t0 = time.monotonic()
    p = _launch(
        "--store",
        str(store),
        "--engine",
        "disagg",
        "--nproc",
        "3",
        "--batch-workers",
        "2",
        "--dist-timeout",
        "60",
        *ARGS,
        hooks=("fail_batch_worker_mid_epoch",),
    )
    assert p.returncode != 0
    assert "injected failure in a batch worker" in p.stderr
    assert time.monotonic() - t0 < 60  # ended by the failure, not by a timeout


def test_bad_store_is_an_input_error(tmp_path, capsys):
    from shoal.cli import main

    assert main(["train", "--store", str(tmp_path / "nope"), "--nproc", "2"]) == 2
    assert "meta.json is missing" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without a GPU")
def test_cuda_without_a_gpu_exits_2_before_any_process_starts(make_store, capsys):
    from shoal.cli import main

    store = make_store()
    args = ["train", "--store", str(store), "--nproc", "2", "--device", "cuda", *ARGS]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "torch.cuda.is_available() is False" in err and "--device cpu" in err


def test_restarted_workers_resume_from_the_last_checkpoint(tmp_path, make_store):
    """--max-restarts 1 with --checkpoint-dir/--resume: a worker that fails in epoch 5 makes
    torchrun restart the group, which continues after epoch 4 and ends like a run that never
    failed."""
    store = str(make_store(parts=2))
    flags = ["--store", store, "--engine", "minibatch", "--nproc", "2", *ARGS, "--dropout", "0.5"]
    ref, got = tmp_path / "ref.json", tmp_path / "got.json"
    p = _launch(*flags, "--json", str(ref))
    assert p.returncode == 0, p.stderr[-3000:]
    ckpt = tmp_path / "ckpt"
    p = _launch(
        *flags,
        "--json",
        str(got),
        "--checkpoint-dir",
        str(ckpt),
        "--resume",
        "--max-restarts",
        "1",
        hooks=("fail_at_epoch_5",),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "injected failure in epoch 5" in p.stderr
    assert "resumed from" in p.stderr + p.stdout
    a, b = json.loads(ref.read_text()), json.loads(got.read_text())
    assert b["epochs"] == 8 and [h["epoch"] for h in b["history"]] == list(range(1, 9))
    assert [h["loss"] for h in b["history"]] == [h["loss"] for h in a["history"]]
    assert b["test_accuracy"] == a["test_accuracy"]
    assert json.loads((ckpt / "last.json").read_text())["epoch"] == 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("engine", "extra"),
    [
        ("minibatch", []),
        ("averaging", []),
        ("hec", []),
        # "=": argparse takes "-1,-1" for a flag; one Adam step per full-graph epoch: 8 epochs
        # reach 0.58 on the GPU and the CPU alike, 30 pass
        ("fullgraph", ["--fanouts=-1,-1", "--epochs", "30"]),
        ("disagg", ["--nproc", "3", "--batch-workers", "2"]),
    ],
)
def test_every_engine_learns_on_the_gpu(tmp_path, make_store, engine, extra):
    store = make_store()
    out = tmp_path / "run.json"
    p = _launch(
        "--store",
        str(store),
        "--engine",
        engine,
        "--nproc",
        "2",
        "--json",
        str(out),
        "--device",
        "cuda",
        *ARGS,
        *extra,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["config"]["run"]["device"] == "cuda"
    assert d["test_accuracy"] >= 0.7


def _typed_minibatch(store: str, device: str, out: Path) -> subprocess.CompletedProcess:
    """R-GCN on a typed store (IGBH-shaped, 3 parts): minibatch, 2 processes, ``device``."""
    opts = ["--model", "rgcn", "--fanouts", "5,5", "--hidden", "16", "--batch-size", "256"]
    opts += ["--epochs", "8", "--lr", "0.01", "--seed", "2", "--threads", "1", "--no-progress"]
    args = ["--store", store, "--engine", "minibatch", "--nproc", "2", "--device", device]
    return _launch(*args, *opts, "--json", str(out))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_typed_store_learns_on_the_gpu(tmp_path, typed):
    _, stores = typed
    out = tmp_path / "run.json"
    p = _typed_minibatch(stores[3], "cuda", out)
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["config"]["run"]["device"] == "cuda" and d["engine"] == "minibatch"
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (tests/engines/test_typed)
    assert d["test_accuracy"] > 0.6, d["test_accuracy"]
