"""Collective exchange of variable-sized per-peer payloads, with communication counters.

gloo has no ``all_to_all`` over lists of unequal CPU tensors, but it has ``all_to_all_single``
with split sizes (an all-to-all-v). :func:`exchange` sends ``rows[i]`` to rank ``i`` in two
collectives: the row counts (one int64 per peer), then the rows themselves. Rows addressed to
the calling rank are never sent: callers keep local work local and pass zero rows for self.

:class:`CommStats` counts what left and entered this process: payload bytes, messages (non-empty
per-peer payloads), collective rounds, all-reduced bytes, and rows served locally vs fetched
remotely (for the remote fraction of features). Engines reset it each epoch and report the sum
over ranks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["CommStats", "all_reduce_stats", "all_to_all_rows", "exchange", "reduced"]


@dataclass
class CommStats:
    """Communication counters of one process (reset per epoch by the engines)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    rounds: int = 0
    allreduce_bytes: int = 0
    feature_rows_local: int = 0
    feature_rows_remote: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def tally(self, sent: int, received: int, row_bytes: int) -> None:
        """Count one collective round of ``sent`` and ``received`` rows of ``row_bytes``."""
        self.rounds += 1
        self.bytes_sent += sent * row_bytes
        self.bytes_received += received * row_bytes

    def as_dict(self) -> dict[str, float]:
        d: dict[str, float] = dict(asdict(self))
        total = self.feature_rows_local + self.feature_rows_remote
        d["remote_feature_fraction"] = self.feature_rows_remote / total if total else 0.0
        return d


def all_reduce_stats(stats: CommStats) -> dict[str, float]:
    """Sum the counters over every rank (a collective: every rank must call it)."""
    names = [f.name for f in fields(stats)]
    t = torch.tensor([getattr(stats, n) for n in names], dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t)
    total = CommStats(**{n: int(v) for n, v in zip(names, t.tolist())})
    return total.as_dict()


def exchange(
    send: np.ndarray | torch.Tensor,
    send_counts: np.ndarray,
    stats: CommStats | None = None,
    group: dist.ProcessGroup | None = None,
    *,
    recv_counts: np.ndarray | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """All-to-all-v: rows ``send[off[i]:off[i+1]]`` go to rank ``i``; returns what arrived.

    Args:
        send: rows grouped by destination rank, in rank order (first dimension = rows).
        send_counts: rows for each rank (length world size); ``send_counts[rank]`` must be 0.
        stats: counters to update (bytes and messages exclude the calling rank itself).
        group: the process group (default: the whole world); ranks are the group's.
        recv_counts: the rows each rank sends this one, when every rank knows them already
            (an answer to a request: as many rows as were asked, or as the counts received
            before announced); default None: exchanged first, one all-to-all more. Give them
            on every rank or on none.

    Returns:
        ``(recv, recv_counts)``: rows from each rank concatenated in rank order, and how many
        came from each. A collective: every rank must call it, in the same order.
    """
    t = torch.from_numpy(np.ascontiguousarray(send)) if isinstance(send, np.ndarray) else send
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    counts = np.asarray(send_counts, dtype=np.int64)
    if counts.shape != (world,):
        raise ValueError(f"send_counts must have length {world}, got shape {counts.shape}")
    if counts[rank] != 0:
        raise ValueError("rows addressed to the calling rank must stay local (send_counts[rank])")
    if int(counts.sum()) != t.shape[0]:
        raise ValueError(f"send has {t.shape[0]} rows but send_counts sums to {counts.sum()}")
    if recv_counts is not None:
        recv_counts = np.asarray(recv_counts, dtype=np.int64).copy()
        if recv_counts.shape != (world,) or recv_counts[rank] != 0:
            raise ValueError(f"recv_counts must have length {world} and 0 at this rank")
    if world == 1:
        return t[:0].clone(), np.zeros(1, dtype=np.int64)
    if recv_counts is None:
        recv_counts_t = torch.empty(world, dtype=torch.int64)
        dist.all_to_all_single(recv_counts_t, torch.from_numpy(counts.copy()), group=group)
        recv_counts = recv_counts_t.numpy().copy()
    row_shape = tuple(t.shape[1:])
    recv = torch.empty((int(recv_counts.sum()), *row_shape), dtype=t.dtype)
    dist.all_to_all_single(
        recv,
        t.contiguous(),
        output_split_sizes=recv_counts.tolist(),
        input_split_sizes=counts.tolist(),
        group=group,
    )
    if stats is not None:
        row_bytes = t.element_size() * int(np.prod(row_shape, dtype=np.int64))
        stats.rounds += 1
        stats.bytes_sent += int(counts.sum()) * row_bytes + 8 * (world - 1)
        stats.bytes_received += int(recv_counts.sum()) * row_bytes + 8 * (world - 1)
        stats.messages_sent += int(np.count_nonzero(counts))
        stats.messages_received += int(np.count_nonzero(recv_counts))
    return recv, recv_counts


def all_to_all_rows(
    send: np.ndarray, recv: np.ndarray, send_counts, recv_counts, *, async_op: bool = False
):
    """All-to-all-v of rows whose counts both sides know: ``send`` grouped by destination
    rank into ``recv`` grouped by source rank (one collective, no count exchange). With
    ``async_op`` it returns the collective's work handle at once (``wait()`` before ``recv``
    is read or ``send`` reused); else None once ``recv`` holds the rows."""
    return dist.all_to_all_single(
        torch.from_numpy(recv),
        torch.from_numpy(send),
        output_split_sizes=[int(c) for c in recv_counts],
        input_split_sizes=[int(c) for c in send_counts],
        async_op=async_op,
    )


def reduced(value: int, world: int, op) -> int:
    """``value`` reduced over the ranks by ``op`` (collective; as is in a world of one)."""
    t = torch.tensor([value], dtype=torch.int64)
    if world > 1:
        dist.all_reduce(t, op=op)
    return int(t.item())
