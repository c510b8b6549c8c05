"""An iterator run ahead in a background thread: :func:`ahead`.

The training loop's batches are produced on the host (sampling, gathering, staging for the
device) while the device computes the previous step, as DGL's ``DataLoader(use_prefetch_thread)``
and PyTorch's ``DataLoader`` workers do. The producing thread runs the whole iteration
(``next`` of the source and an optional ``transform`` of each item) and hands items over
through a bounded queue, so at most ``depth`` items wait beside the one being produced and the
one the consumer holds. Exceptions of the producer are raised in the consumer; closing the
consumer (``break``, an exception in the loop, garbage collection) stops the producer after
its current item and closes the source in the producer's thread.

The producer must not share anything unsynchronised with the consumer: a source whose items
reuse buffers needs a ``transform`` that copies them out (as ``DeviceFeed`` stages each batch
in pinned memory before the next one is produced), and a source that communicates
collectively must not run beside collectives of the consumer's thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["ahead"]

T = TypeVar("T")
_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def ahead(
    source: Iterable[Any],
    *,
    transform: Callable[[Any], T] | None = None,
    depth: int = 1,
    setup: Callable[[], None] | None = None,
    name: str = "shoal-ahead",
) -> Iterator[T]:
    """The items of ``source`` (each passed through ``transform`` when given), produced by a
    background thread (module docstring).

    Args:
        source: what to iterate; iterated (and closed) in the background thread only.
        transform: applied to each item in the background thread (default: none).
        depth: items queued beside the one being produced (default 1).
        setup: called first in the background thread (e.g. to select a CUDA device there).
        name: the thread's name.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        it = iter(source)
        try:
            if setup is not None:
                setup()
            for item in it:
                if stop.is_set() or not put(item if transform is None else transform(item)):
                    return
            put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put(_Failed(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    try:
        while True:
            try:
                item = q.get(timeout=0.5)
            except queue.Empty:
                if not thread.is_alive() and q.empty():
                    raise RuntimeError(
                        f"{name}: the producing thread ended without finishing"
                    ) from None
                continue
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting to put, then let it end
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)
