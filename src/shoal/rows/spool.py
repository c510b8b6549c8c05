"""Sampled mini-batches kept on the scratch disk until they are trained (DiskGNN's offline
sampling).

Packing epochs (:mod:`shoal.rows.packing`) samples each future epoch once to learn its rows;
with the structure on disk every later pass reads the sampled neighbour lists again
(docs/measurements.md#epoch-packs-and-spooled-samples). DiskGNN (Liu et al., VLDB 2025, Sec. 3:
"offline sampling") samples once and stores the samples; :class:`SampleSpool` does it per epoch:
each mini-batch is written to the epoch's file on its first pass and read back in order or by
step. Files go through the page cache and are dropped from it as they go (written ones every
:data:`SYNC_BYTES`, after an ``fdatasync``); an epoch's file is removed once it is trained.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from shoal.graph.blocks import Block, MiniBatch
from shoal.utils.io import scratch_space

__all__ = ["SYNC_BYTES", "SampleSpool", "decode", "encode"]


def encode(mb: MiniBatch) -> bytes:
    """``mb`` as bytes (its arrays as numpy; the blocks' caches are not kept)."""
    blocks = [
        (
            b.edge_index.numpy(),
            int(b.num_src),
            int(b.num_dst),
            b.rowptr.numpy(),
            b.deg_src.numpy(),
            b.node_ids,
        )
        for b in mb.blocks
    ]
    return pickle.dumps((np.asarray(mb.n_id), int(mb.num_seeds), blocks), protocol=5)


def decode(data: bytes) -> MiniBatch:
    """The mini-batch :func:`encode` wrote."""
    n_id, num_seeds, blocks = pickle.loads(data)
    return MiniBatch(
        n_id=n_id,
        blocks=[
            Block(
                edge_index=torch.from_numpy(e),
                num_src=ns,
                num_dst=nd,
                rowptr=torch.from_numpy(r),
                deg_src=torch.from_numpy(d),
                node_ids=ids,
            )
            for e, ns, nd, r, d, ids in blocks
        ],
        num_seeds=num_seeds,
    )


#: written samples are flushed to disk and dropped from the page cache every this many bytes
#: (default 16 MiB): dirty pages are charged to the process's memory cgroup and cannot be
#: reclaimed before they are written, so an epoch's samples left dirty can push a run over
#: its cap (docs/measurements.md#the-memory-plan).
SYNC_BYTES = 16 << 20


def _drop_written(fd: int, start: int, end: int) -> int:
    """Write bytes ``start..end`` of ``fd`` to disk and drop them from the page cache;
    returns ``end``."""
    if end > start:
        os.fdatasync(fd)
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
    return end


class _Epoch:
    """One epoch's spooled batches: a file and each step's ``(offset, length)``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.spans: list[tuple[int, int]] = []
        self.nbytes = 0


class SampleSpool:
    """Epochs' sampled mini-batches on the scratch disk (module docstring).

    Args:
        scratch_dir: where its private directory goes (made when the first epoch is
            written, removed by ``drop()``); None: beside ``beside``.
        beside: the directory of the data (the default place of the scratch directory).
    """

    def __init__(self, scratch_dir: str | os.PathLike | None, *, beside: str | os.PathLike) -> None:
        self.scratch_dir = scratch_dir
        self.beside = Path(beside)
        self._scratch: contextlib.ExitStack | None = None
        self._path: Path | None = None
        self._epochs: dict[int, _Epoch] = {}
        #: bytes written and read back (for the epoch's I/O record)
        self.bytes_written = 0
        self.bytes_read = 0

    @classmethod
    def beside_features(cls, features, scratch_dir: str | os.PathLike | None) -> SampleSpool:
        """A spool in ``scratch_dir``, by default beside the directory of ``features``'s
        file (a :class:`~shoal.rows.featstore.DiskFeatures`; the working directory when its
        rows are in memory)."""
        reader = features.reader
        return cls(
            scratch_dir, beside=Path(reader.path).parent if reader is not None else Path.cwd()
        )

    def has(self, epoch: int) -> bool:
        return epoch in self._epochs

    @property
    def epochs(self) -> list[int]:
        """The epochs spooled."""
        return sorted(self._epochs)

    def _directory(self) -> Path:
        if self._path is None:
            self._scratch = contextlib.ExitStack()
            self._path = self._scratch.enter_context(
                scratch_space(self.scratch_dir, beside=self.beside, prefix="shoal-samples")
            )
        return self._path

    def record(self, epoch: int, batches: Iterator[MiniBatch]) -> Iterator[MiniBatch]:
        """Pass ``batches`` (all of ``epoch``'s, in order) through, writing each to the
        epoch's file; the epoch counts as spooled only once every batch is written."""
        ep = _Epoch(self._directory() / f"samples-{epoch}.bin")
        done = False
        fd = os.open(ep.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        synced = 0
        try:
            for mb in batches:
                data = encode(mb)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                ep.spans.append((ep.nbytes, len(data)))
                ep.nbytes += len(data)
                if ep.nbytes - synced >= SYNC_BYTES:  # dirty pages count against the cap
                    synced = _drop_written(fd, synced, ep.nbytes)
                yield mb
            done = True
        finally:
            _drop_written(fd, synced, ep.nbytes)
            os.close(fd)
            if not done:
                ep.path.unlink(missing_ok=True)
        self.bytes_written += ep.nbytes
        self._epochs[epoch] = ep

    def read(self, epoch: int, steps: list[int] | None = None) -> Iterator[MiniBatch]:
        """``epoch``'s batches in order (only ``steps``, in the order given, when given)."""
        ep = self._epochs[epoch]
        fd = os.open(ep.path, os.O_RDONLY)
        try:
            for step in range(len(ep.spans)) if steps is None else steps:
                off, n = ep.spans[step]
                data = os.pread(fd, n, off)
                if len(data) != n:
                    raise OSError(f"{ep.path}: short read of step {step}")
                os.posix_fadvise(fd, off, n, os.POSIX_FADV_DONTNEED)
                self.bytes_read += n
                yield decode(data)
        finally:
            os.close(fd)

    def drop(self, epoch: int | None = None) -> None:
        """Remove ``epoch``'s file (None: every epoch's, and the scratch directory)."""
        for e in list(self._epochs) if epoch is None else [epoch]:
            ep = self._epochs.pop(e, None)
            if ep is not None:
                with contextlib.suppress(OSError):
                    ep.path.unlink()
        if epoch is None and self._scratch is not None:
            self._scratch.close()
            self._scratch = self._path = None
