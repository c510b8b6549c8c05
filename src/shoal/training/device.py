"""Batches onto the training device: pinned host buffers, non-blocking copies, double buffering.

:class:`DeviceFeed` takes the host batches a loader produces and yields them on the device.
On a GPU each batch's feature rows are staged in one of two reused page-locked (pinned) host
buffers and copied with ``non_blocking=True`` on a side CUDA stream, the copy of batch ``k +
1`` issued before batch ``k`` is handed to the model (double buffering, as PyTorch's pinned
``DataLoader`` and DGL's ``DataLoader(use_uva/use_prefetch_thread)``); the compute stream
waits on each batch's copy event, and a staging buffer is reused only after its last copy
finished. On the CPU the feed passes batches through untouched.

With ``background=True`` (the single-process trainer's choice on a GPU) the host's work on a
batch (sampling, gathering, staging into the pinned buffer, issuing the copy) runs in a
background thread (:func:`shoal.utils.background.ahead`) a batch ahead of the step: without it
the GPU waits for the host most of the epoch (docs/measurements.md#gpu-runs). Each batch's
features are copied out before the next batch is produced, so the loader's reused buffers stay
safe. Batches whose production communicates collectively (the distributed engines') must not
use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from shoal.graph.blocks import Batch
from shoal.utils.background import ahead

__all__ = ["DeviceFeed", "on_current_stream"]


def on_current_stream(batch: Batch, event: torch.cuda.Event, device: torch.device) -> Batch:
    """``batch``, made on a side stream until ``event``, safe to use on ``device``'s current
    stream: the stream waits for the event, and the batch's tensors (allocated on the side
    stream, freed on this one) are recorded on it."""
    current = torch.cuda.current_stream(device)
    current.wait_event(event)
    tensors = [batch.x, batch.y]
    if isinstance(batch.mb.n_id, torch.Tensor):  # (made on the device)
        tensors.append(batch.mb.n_id)
    for b in batch.mb.blocks:
        tensors += [b.edge_index, b.rowptr, b.deg_src]
    for t in tensors:
        t.record_stream(current)
    return batch


class DeviceFeed:
    """Moves :class:`~shoal.graph.blocks.Batch` objects to ``device`` (see the module).

    Args:
        device: where the model runs.
        pin: stage feature rows in pinned host buffers (default True; CUDA only).
        background: produce and stage the next batch in a background thread while the
            current one is used (default False; CUDA only; see the module docstring).
    """

    def __init__(
        self, device: torch.device | str, *, pin: bool = True, background: bool = False
    ) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is None:  # the background thread must name it
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.pin = pin and self.cuda
        self.background = background and self.cuda
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._staging: list[torch.Tensor | None] = [None, None]
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._slot = 0
        self.bytes_copied = 0

    def _stage(self, slot: int, x: torch.Tensor) -> torch.Tensor:
        """``x`` copied into pinned staging buffer ``slot`` (grown when too small)."""
        if not self.pin or x.is_pinned() or x.numel() == 0:
            return x
        buf = self._staging[slot]
        need = x.numel()
        if buf is None or buf.numel() < need or buf.dtype != x.dtype:
            buf = torch.empty(max(need, 1), dtype=x.dtype, pin_memory=True)
            self._staging[slot] = buf
        out = buf[:need].view(x.shape)
        out.copy_(x)
        return out

    def start(self, batch: Batch) -> tuple[Batch, torch.cuda.Event | None]:
        """Begin copying ``batch`` to the device; returns the device batch and the event
        that marks the end of its copy (None on the CPU: the batch itself)."""
        if not self.cuda:
            return batch, None
        slot, self._slot = self._slot, self._slot ^ 1
        previous = self._events[slot]
        if previous is not None:
            previous.synchronize()  # the last copy out of this staging buffer is done
        x = self._stage(slot, batch.x)
        with torch.cuda.stream(self.stream):
            moved = Batch(
                batch.mb.to(self.device, non_blocking=True),
                x.to(self.device, non_blocking=True),
                batch.y.to(self.device, non_blocking=True),
                batch.step,  # a link batch's edges (host arrays)
            )
            event = torch.cuda.Event()
            event.record(self.stream)
        self._events[slot] = event
        self.bytes_copied += batch.x.numel() * batch.x.element_size()
        return moved, event

    def ready(self, moved: Batch, event: torch.cuda.Event | None) -> Batch:
        """The device batch of :meth:`start`, safe to use on the current stream."""
        if event is None:
            return moved
        return on_current_stream(moved, event, self.device)

    def to_device(self, batch: Batch) -> Batch:
        """One batch on the device, synchronously with the compute stream's order."""
        return self.ready(*self.start(batch))

    def iterate(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """``batches`` on the device, the next one's copy under way while one is used."""
        if not self.cuda:
            yield from batches
            return
        if self.background:  # start() copies each batch out before the next is produced
            staged = ahead(
                batches,
                transform=self.start,
                setup=lambda: torch.cuda.set_device(self.device),
                name="shoal-device-feed",
            )
            for moved, event in staged:
                yield self.ready(moved, event)
            return
        pending = None
        for batch in batches:
            nxt = self.start(batch)
            if pending is not None:
                yield self.ready(*pending)
            pending = nxt
        if pending is not None:
            yield self.ready(*pending)
