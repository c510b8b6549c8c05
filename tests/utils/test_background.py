"""ahead(): an iterator run in a background thread, in order, bounded, errors and early stops
handed back."""

from __future__ import annotations

import threading
import time

import pytest

from shoal.utils.background import ahead


def test_items_come_in_order_transformed_in_the_background_thread():
    names = []

    def double(x):
        names.append(threading.current_thread().name)
        return 2 * x

    assert list(ahead(range(50), transform=double, name="t-ahead")) == [2 * i for i in range(50)]
    assert set(names) == {"t-ahead"}


def test_an_empty_source_gives_nothing():
    assert list(ahead([])) == []


def test_setup_runs_first_in_the_thread():
    seen = []
    out = list(ahead([1, 2], setup=lambda: seen.append(threading.current_thread().name)))
    assert out == [1, 2] and seen == ["shoal-ahead"]


def test_the_producer_runs_at_most_depth_items_ahead():
    produced = []

    def source():
        for i in range(20):
            produced.append(i)
            yield i

    it = ahead(source(), depth=2)
    assert next(it) == 0
    time.sleep(0.3)
    # item 0 taken; 2 queued; one more produced and waiting to be put
    assert len(produced) <= 4
    assert list(it) == list(range(1, 20))


def test_a_producer_error_is_raised_in_the_consumer():
    def source():
        yield 1
        raise ValueError("bad row 7")

    it = ahead(source())
    assert next(it) == 1
    with pytest.raises(ValueError, match="bad row 7"):
        next(it)


def test_stopping_early_closes_the_source_and_ends_the_thread():
    closed = threading.Event()

    def source():
        try:
            yield from range(10**6)
        finally:
            closed.set()

    before = {t.ident for t in threading.enumerate()}
    it = ahead(source(), name="t-stop")
    for x in it:
        if x == 3:
            break
    it.close()
    assert closed.wait(5)
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "t-stop" and t.ident not in before]


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        list(ahead([1], depth=0))
