"""A lost peer ends every rank in one line naming it (shoal.distributed.liveness)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

from shoal.distributed.liveness import _operation, is_comm_failure
from shoal.errors import ShoalPeerLostError
from tests.distributed.helpers import torchrun_env

GLOO_CLOSED = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:23207"
)
GLOO_TIMEOUT = (
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 60000ms "
    "for send operation to complete"
)


@pytest.mark.parametrize("message", [GLOO_CLOSED, GLOO_TIMEOUT])
def test_transport_errors_are_comm_failures(message):
    assert is_comm_failure(RuntimeError(message))


def test_other_errors_are_not():
    assert not is_comm_failure(RuntimeError("simulated crash in epoch 3"))
    assert not is_comm_failure(ValueError("Connection closed by peer"))  # not the transport's
    assert not is_comm_failure(ShoalPeerLostError("rank 0 lost rank 1"))


def test_operation_names_the_public_collective():
    def fails():
        dist.all_reduce(None)  # no group: raises inside distributed_c10d

    try:
        fails()
    except Exception as e:
        op = _operation(e)
    assert op == "all_reduce"  # not its helper _check_single_tensor; no shoal caller here


def _worker_env(rank: int, world: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC")}
    return {**env, **torchrun_env(rank, world, port)}


def test_a_killed_peer_ends_every_rank_naming_it(make_store, tmp_path):
    """Three `shoal train` workers (each as torchrun starts one, the rendezvous store hosted
    here as torchrun's agent hosts it); rank 2 is SIGKILLed during training. Ranks 0 and 1
    exit non-zero well within --dist-timeout, each with one line that names rank 2 and its
    host, and no traceback."""
    store = make_store(parts=3)
    timeout_s = 60
    metrics = tmp_path / "metrics.jsonl"
    rdzv = dist.TCPStore("127.0.0.1", 0, 3, True, wait_for_workers=False)
    cmd = [sys.executable, "-m", "shoal", "train", "--store", str(store), "--engine"]
    cmd += ["minibatch", "--model", "sage", "--fanouts", "3,3", "--batch-size", "4"]
    cmd += ["--hidden", "8", "--epochs", "1000", "--dist-timeout", str(timeout_s)]
    cmd += ["--metrics-file", str(metrics), "--eval-every", "1000", "--no-progress"]
    procs = [
        subprocess.Popen(
            cmd,
            env=_worker_env(r, 3, rdzv.port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(3)
    ]
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert time.monotonic() < deadline, "training did not start"
            assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs]
            time.sleep(0.2)
        procs[2].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        codes = [p.wait(timeout=timeout_s + 30) for p in procs[:2]]
        took = time.monotonic() - killed
        errs = [p.stderr.read() for p in procs[:2]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [1, 1], errs
    assert took < timeout_s, f"the ranks took {took:.0f} s to end"
    for rank, err in enumerate(errs):
        lines = [x for x in err.splitlines() if x.startswith("shoal: ")]
        assert len(lines) == 1, err
        assert lines[0].startswith(f"shoal: error: rank {rank} (host ")
        assert "lost rank 2 (host " in lines[0] and "--dist-timeout" in lines[0], lines[0]
        assert "Traceback" not in err, err
