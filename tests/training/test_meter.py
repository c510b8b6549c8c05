"""EpochMeter's and Timer's phase timing: the wall clock on a CPU, CUDA events on a GPU."""

from __future__ import annotations

import time

import pytest
import torch

from shoal.training import batches
from shoal.training.batches import EventClock, Timer, event_device
from shoal.training.meter import EpochMeter

CUDA = torch.cuda.is_available()


def _meter(**kw) -> EpochMeter:
    return EpochMeter(0, 2, enable=False, **kw)


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
def test_on_a_cpu_time_is_the_wall_clock_whatever_the_device(device):
    m = _meter(device=device, phases=("gather",))
    assert m._events is None
    with m.time("forward_backward"):
        time.sleep(0.05)
    assert m.phases["forward_backward"] >= 0.04  # added at once, as before
    m.add("sampling", 0.5)
    m.step(1.0, 1, 2)
    b = m.close()
    assert set(b["time_split"]) == {"gather", "forward_backward", "sampling"}
    assert b["time_split"]["forward_backward"] >= 0.04 and b["time_split"]["gather"] == 0.0


def test_cpu_and_none_give_the_same_keys():
    keys = []
    for device in (None, "cpu"):
        m = _meter(device=device, phases=("sampling",))
        with m.time("forward_backward"):
            time.sleep(0.05)
        with pytest.raises(ValueError), m.time("allreduce"):
            raise ValueError
        b = m.record()
        assert b["time_split"]["forward_backward"] >= 0.04
        keys.append((sorted(b), sorted(b["time_split"])))
    assert keys[0] == keys[1]


def test_a_cuda_device_without_cuda_stays_a_wall_clock(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert event_device("cuda") is None and event_device(None) is None
    assert event_device("cpu") is None
    t = Timer(device="cuda")
    with t.phase("pull"):
        time.sleep(0.01)
    assert t.seconds["pull"] >= 0.01  # at once: no events


class _FakeEvent:
    """A CUDA event stand-in: records the host clock, finished at once unless told; waiting
    for one finishes every event recorded before it too (one stream)."""

    made = 0
    recorded: list[_FakeEvent] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t = None
        self.done = True
        self.synced = 0
        _FakeEvent.made += 1

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()
        _FakeEvent.recorded.append(self)

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synced += 1
        for e in _FakeEvent.recorded[: _FakeEvent.recorded.index(self) + 1]:
            e.done = True

    def elapsed_time(self, end: _FakeEvent) -> float:
        assert self.done and end.done, "elapsed_time before the events finished"
        return (end.t - self.t) * 1000.0


@pytest.fixture
def fake_cuda(monkeypatch):
    """The event path on a CPU: torch.cuda reports a device and hands out fake events."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    _FakeEvent.made = 0
    _FakeEvent.recorded = []
    return _FakeEvent


def test_event_phases_wait_for_close(fake_cuda):
    m = _meter(device="cuda", phases=("gather",))
    assert m._events is not None and m._events.device == torch.device("cuda")
    with m.time("forward_backward"):
        time.sleep(0.05)
    with pytest.raises(ValueError), m.time("forward_backward"):
        time.sleep(0.01)
        raise ValueError
    m.add("sampling", 0.25)  # wall seconds land at once
    assert "forward_backward" not in m.phases and m.phases["sampling"] == 0.25
    assert fake_cuda.made == 4
    b = m.close()
    assert set(b["time_split"]) == {"gather", "forward_backward", "sampling"}
    assert b["time_split"]["forward_backward"] >= 0.06 - 1e-3
    assert m._events.pending == 0


def test_close_synchronises_the_last_event_once(fake_cuda):
    m = _meter(device="cuda")
    for _ in range(3):
        with m.time("forward_backward"):
            pass
    ends = [e for _, _, e in m._events._pending]
    for e in ends:
        e.done = False  # still running on the device
    b = m.close()
    assert ends[-1].synced == 1 and ends[0].synced == 0 and ends[1].synced == 0
    assert b["time_split"]["forward_backward"] >= 0.0


def test_pending_pairs_stay_bounded_without_a_sync(fake_cuda):
    clock = EventClock(torch.device("cuda"))
    n = 3 * EventClock._DRAIN_AT
    for i in range(n):
        with clock.time("a" if i % 2 else "b"):
            pass
    assert clock.pending < EventClock._DRAIN_AT
    # a pair still running stops the draining there, and nothing after it is summed early
    with clock.time("a"):
        pass
    clock._pending[-1][2].done = False
    for _ in range(EventClock._DRAIN_AT):
        with clock.time("b"):
            pass
    assert clock.pending >= EventClock._DRAIN_AT
    s = clock.seconds()
    assert set(s) == {"a", "b"} and clock.pending == 0 and clock.seconds() == {}


def test_timer_events_land_at_flush_and_str(fake_cuda):
    t = Timer(device=torch.device("cuda", 0))
    with t.phase("pull"):
        time.sleep(0.02)
    t.add("read", 1.25)
    assert set(t.seconds) == {"read"}
    assert str(t).startswith("read 1.2 s, pull ")  # __str__ flushes first
    assert t.seconds["pull"] >= 0.02 - 1e-3
    t.flush()  # nothing pending: no change
    assert set(t.seconds) == {"read", "pull"}


def test_the_meter_flushes_its_timer(fake_cuda):
    t = Timer(device="cuda")
    with t.phase("before"):
        time.sleep(0.01)
    m = _meter(timer=t, device="cuda")  # what the timer held before is not this epoch's
    with t.phase("gather"):
        time.sleep(0.02)
    with m.time("forward_backward"):
        time.sleep(0.02)
    split = m.close()["time_split"]
    assert split["before"] == 0.0
    assert split["gather"] >= 0.02 - 1e-3 and split["forward_backward"] >= 0.02 - 1e-3


def test_the_module_exports_the_clock():
    assert {"EventClock", "event_device", "Timer"} <= set(batches.__all__)


def _matmuls(x: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = torch.tanh(x @ x)
    return x


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_events_see_the_kernels_of_a_block():
    x = torch.randn(4096, 4096, device="cuda")
    _matmuls(x, 2)
    torch.cuda.synchronize()
    n = 50
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    _matmuls(x, n)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0

    m = _meter(device="cuda")
    h0 = time.perf_counter()
    with m.time("forward_backward"):
        _matmuls(x, n)  # queued: no sync inside the block
    host = time.perf_counter() - h0
    b = m.close()
    assert "forward_backward" in b["time_split"]
    got = b["time_split"]["forward_backward"]
    assert got >= 0.5 * wall, (got, wall, host)
    assert b["seconds"] >= got * 0.9  # close waited for the device


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_timer_phase_and_flush():
    x = torch.randn(4096, 4096, device="cuda")
    _matmuls(x, 2)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    _matmuls(x, 30)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0

    t = Timer(device="cuda")
    for _ in range(3):
        with t.phase("pull"):
            _matmuls(x, 10)
    assert "pull" not in t.seconds
    t.flush()
    assert t.seconds["pull"] >= 0.5 * wall, (t.seconds, wall)
    assert t._events.pending == 0
    assert "pull" in str(t)
