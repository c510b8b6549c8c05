"""Batches produced on the model's device: sampled there, rows gathered there (issue 56).

On a GPU the host's sampling and gathering bound the epoch (``bench/results/gpu.md``: the
GPU waited 54% of it). :class:`DeviceBatches` produces each batch where the model runs:

- the seeds of each step and the batch seeds are :class:`~shoal.training.batches.BatchLoader`'s
  (:meth:`BatchLoader.steps <shoal.training.batches.BatchLoader.steps>`);
- the blocks are drawn by :class:`~shoal.sample.device.DeviceSampler` over a copy of the CSR
  on the device: the host sampler's batches, bit for bit, so a run trains the same model
  whichever side samples (up to the order of floating-point sums on the device);
- the input rows come from :class:`DeviceRows`: the rows of highest in-degree held in device
  memory (every row when they fit ``--device-memory``), the others gathered by the host's
  budgeted store and copied through a pinned buffer (a device feature cache in front of the
  host store, as GraphBolt's ``GPUCachedFeature`` and WholeGraph's);
- the labels from the training seeds' labels on the device.

On a GPU the next batch is produced by a background thread on its own CUDA stream while the
current step computes: its waits for the device (each hop's size, ``torch.unique``) wait for
that stream only, which has a high priority (its small kernels go before the pending blocks of
the step's large ones), and the step's stream waits for the batch's event before using it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from shoal.graph.blocks import Batch, MiniBatch
from shoal.sample.device import DeviceSampler
from shoal.training.batches import BatchLoader, Gatherer, Timer
from shoal.training.device import on_current_stream
from shoal.utils.background import ahead

__all__ = ["DeviceBatches", "DeviceRows", "device_memory_budget"]

log = logging.getLogger(__name__)

#: rows copied from the host store to the device at a time when the cache is filled
_FILL_ROWS = 1 << 16
#: share of the device's free memory ``--device-memory`` defaults to on a GPU (the rest for
#: the model, its activations and the allocator's slack)
DEVICE_MEMORY_SHARE = 0.5


def device_memory_budget(device: torch.device, spec: int | None) -> int:
    """Bytes the device's copy of the graph and cached rows may take: ``spec`` when given,
    else :data:`DEVICE_MEMORY_SHARE` of the GPU's free memory (0 on the CPU: there the
    "device" is the host, whose memory the plan of ``--memory`` already shares out)."""
    if spec is not None:
        return int(spec)
    if device.type != "cuda":
        return 0
    free, _ = torch.cuda.mem_get_info(device)
    return int(free * DEVICE_MEMORY_SHARE)


class DeviceRows:
    """Input rows gathered on ``device``: the ``budget`` bytes' worth of rows of highest
    ``degrees`` held there as float32 (every row when they fit: no slot map then), the
    others gathered by ``host`` (a :class:`~shoal.training.batches.Gatherer`, e.g. the
    budgeted store) and copied through a pinned buffer.

    Counts ``rows_device`` (rows served from device memory), ``rows_host`` and
    ``bytes_copied`` (host to device, cache fill excluded: ``fill_bytes``).
    """

    def __init__(
        self,
        host: Gatherer,
        *,
        num_rows: int,
        dim: int,
        degrees: np.ndarray,
        device: torch.device | str,
        budget: int,
    ) -> None:
        self.host = host
        self.device = torch.device(device)
        self.num_rows, self.dim = int(num_rows), int(dim)
        row = 4 * self.dim
        if np.shape(degrees) != (self.num_rows,):
            raise ValueError(f"degrees must have shape ({self.num_rows},), got {np.shape(degrees)}")
        self.whole = budget >= row * self.num_rows
        fit = self.num_rows if self.whole else max(0, int(budget) // (row + 4))
        fit = min(fit, self.num_rows)
        if self.whole:
            ids = np.arange(self.num_rows, dtype=np.int64)
            self.slot = None
        else:  # the highest in-degrees (ties by id); a slot map of int32 over every id
            order = np.argsort(-np.asarray(degrees, np.float32), kind="stable")[:fit]
            ids = np.sort(order).astype(np.int64)
            slot = np.full(self.num_rows, -1, np.int32)
            slot[ids] = np.arange(fit, dtype=np.int32)
            self.slot = torch.from_numpy(slot).to(self.device)
        self.rows = torch.empty((fit, self.dim), dtype=torch.float32, device=self.device)
        for lo in range(0, fit, _FILL_ROWS):
            part = ids[lo : lo + _FILL_ROWS]
            self.rows[lo : lo + len(part)] = host.gather(part).to(self.device)
        self.cached = fit
        self.fill_bytes = fit * row
        self._pinned: torch.Tensor | None = None
        self.rows_device = self.rows_host = self.bytes_copied = 0

    @property
    def nbytes(self) -> int:
        """Device memory held: the rows and the slot map."""
        return int(self.rows.nbytes + (0 if self.slot is None else self.slot.nbytes))

    def gather(self, n_id: torch.Tensor) -> torch.Tensor:
        """float32 ``(len(n_id), dim)`` rows of the ids ``n_id`` (on the device)."""
        if self.slot is None:
            self.rows_device += int(n_id.shape[0])
            return self.rows[n_id]
        slots = self.slot[n_id]
        hit = slots >= 0
        x = torch.empty((n_id.shape[0], self.dim), dtype=torch.float32, device=self.device)
        x[hit] = self.rows[slots[hit]]
        miss = torch.nonzero(~hit).squeeze(1)
        k = int(miss.shape[0])  # (one wait for the device)
        if k:
            ids = n_id[miss].cpu().numpy()
            x[miss] = self._copy(self.host.gather(ids))
        self.rows_device += int(n_id.shape[0]) - k
        self.rows_host += k
        return x

    def _copy(self, rows: torch.Tensor) -> torch.Tensor:
        """Host rows onto the device (through a reused pinned buffer on a GPU)."""
        self.bytes_copied += rows.numel() * 4
        if self.device.type != "cuda":
            return rows.clone()
        need = rows.numel()
        if self._pinned is None or self._pinned.numel() < need:
            self._pinned = torch.empty(max(need, 1), dtype=torch.float32, pin_memory=True)
        staged = self._pinned[:need].view(rows.shape)
        staged.copy_(rows)
        out = staged.to(self.device, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()  # the buffer is reused next
        return out


class DeviceBatches:
    """An epoch's batches produced on the device (module docstring).

    Args:
        loader: the host loader whose steps (seeds, batch seeds) and labels are followed.
        sampler: the :class:`~shoal.sample.device.DeviceSampler` drawing the blocks.
        rows: the :class:`DeviceRows` gathering the input rows.
        timer: where ``sampling`` and ``gather`` seconds are added (default the loader's).
        background: on a GPU, produce the next batch in a background thread on its own
            stream while the current one is used (default True).
    """

    def __init__(
        self,
        loader: BatchLoader,
        sampler: DeviceSampler,
        rows: DeviceRows,
        *,
        timer: Timer | None = None,
        background: bool = True,
    ) -> None:
        self.loader, self.sampler, self.rows = loader, sampler, rows
        self.device = sampler.device
        self.timer = timer or loader.timer
        self.cuda = self.device.type == "cuda"
        self.background = background and self.cuda
        self._sorted = torch.from_numpy(loader._sorted_seeds).to(self.device)
        self._labels = torch.from_numpy(loader._seed_labels).to(self.device)
        # a high-priority stream: the batch's small kernels, each hop waiting on them, are
        # scheduled before the pending blocks of the step's large ones
        self.stream = torch.cuda.Stream(self.device, priority=-1) if self.cuda else None

    def __len__(self) -> int:
        return len(self.loader)

    def batch(self, seeds: np.ndarray, seed: int) -> Batch:
        """One batch of training ``seeds`` drawn with the batch seed ``seed``."""
        t0 = time.perf_counter()
        mb: MiniBatch = self.sampler.sample(seeds, seed)
        t1 = time.perf_counter()
        x = self.rows.gather(mb.n_id)
        seeds_d = mb.n_id[: mb.num_seeds]
        y = self._labels[torch.searchsorted(self._sorted, seeds_d)]
        self.timer.add("sampling", t1 - t0)
        self.timer.add("gather", time.perf_counter() - t1)
        return Batch(mb, x, y)

    def _produced(self, step: tuple[np.ndarray, int]) -> tuple[Batch, Any]:
        """A batch made on the side stream and the event marking its end."""
        with torch.cuda.stream(self.stream):
            batch = self.batch(*step)
            event = torch.cuda.Event()
            event.record(self.stream)
        return batch, event

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """``epoch``'s batches, in the host loader's order."""
        steps = self.loader.steps(epoch)
        if not self.background:
            for seeds, seed in steps:
                yield self.batch(seeds, seed)
            return
        made = ahead(
            steps,
            transform=self._produced,
            setup=lambda: torch.cuda.set_device(self.device),
            name="shoal-device-batches",
        )
        for batch, event in made:
            yield on_current_stream(batch, event, self.device)

    def stats(self) -> dict[str, int]:
        """Rows served from device memory and from the host, bytes copied to the device."""
        r = self.rows
        return {
            "rows_device": r.rows_device,
            "rows_host": r.rows_host,
            "bytes_to_device": r.bytes_copied,
        }
