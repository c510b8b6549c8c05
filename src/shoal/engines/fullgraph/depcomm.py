"""Master-mirror exchange of one level's rows for full-graph training (NeutronStar, Sec. 4.2-4.3).

Each rank owns (is the master of) its core nodes; a remote in-neighbour that a rank fetches is
a mirror there. Forward: every owner sends each peer one packed chunk with the rows of the
peer's mirrors (the peer asked for them once, at set-up). Backward: every rank sends each owner
one chunk with its mirrors' gradients, and the owner sums them into its rows' gradients
(:class:`PullRows`). Chunks are exchanged with non-blocking ``isend``/``irecv``:

- **ring order** (Sec. 4.3, Figure 8): rank ``i`` posts its ``j``-th output chunk to rank
  ``(i + j + 1) mod m`` (and receives its ``j``-th from ``(i - j - 1) mod m``), so no two ranks
  send to the same destination in the same slot; off (``ring=False``), every rank sends in rank
  order (all to rank 0 first);
- **overlap**: :meth:`RowExchange.start` posts the chunks and returns at once; the caller
  computes what does not need them (its cached dependencies) and :class:`PullRows` waits.
  In backward, the gradients are sent once autograd has computed them all for the level.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats

__all__ = ["PullRows", "RowExchange", "ring_peers"]


def ring_peers(rank: int, world: int, ring: bool = True) -> list[tuple[int, int]]:
    """``(send_to, receive_from)`` per slot: the ring order, or rank order when ``ring`` is
    false."""
    if ring:
        return [((rank + j + 1) % world, (rank - j - 1) % world) for j in range(world - 1)]
    others = [r for r in range(world) if r != rank]
    return list(zip(others, others, strict=True))


class RowExchange:
    """One level's exchange, fixed at set-up.

    Args:
        send_idx: per peer, the positions (in this rank's rows) of the rows it mirrors, in
            the order it asked for them (empty for this rank).
        recv_counts: per peer, how many of this rank's mirrors it owns (their rows arrive
            in the order this rank asked for them, peer after peer in rank order).
        rank, world: this process and the group size.
        tag: distinguishes this level's messages from other levels'.
        ring: ring order (default true).
        stats: counters (bytes and messages).
    """

    def __init__(
        self,
        send_idx: list[np.ndarray],
        recv_counts: list[int],
        *,
        rank: int,
        world: int,
        tag: int,
        ring: bool = True,
        stats: CommStats | None = None,
    ) -> None:
        self.send_idx = [torch.from_numpy(np.asarray(s, np.int64)) for s in send_idx]
        self.recv_counts = [int(c) for c in recv_counts]
        self.recv_off = np.concatenate([[0], np.cumsum(self.recv_counts)]).astype(np.int64)
        self.rank, self.world, self.tag = rank, world, tag
        self.peers = ring_peers(rank, world, ring)
        self.stats = stats
        self._pending: list = []
        self._recv: torch.Tensor | None = None
        self.seconds = 0.0  # time spent waiting for chunks (forward and backward)

    @property
    def num_recv(self) -> int:
        return int(self.recv_off[-1])

    def _post(self, rows_for, recv: torch.Tensor, counts_in: list[int], off_in, tag: int) -> list:
        """Post one chunk per peer in slot order: ``rows_for(peer)`` out, ``recv`` slices in."""
        reqs = []
        for to, frm in self.peers:
            out = rows_for(to)
            if out.shape[0]:
                reqs.append(dist.isend(out, to, tag=tag))
                if self.stats is not None:
                    self.stats.bytes_sent += out.numel() * out.element_size()
                    self.stats.messages_sent += 1
            n = counts_in[frm]
            if n:
                buf = recv[int(off_in[frm]) : int(off_in[frm]) + n]
                reqs.append(dist.irecv(buf, frm, tag=tag))
                if self.stats is not None:
                    self.stats.bytes_received += buf.numel() * buf.element_size()
                    self.stats.messages_received += 1
        if self.stats is not None:
            self.stats.rounds += 1
        return reqs

    def start(self, h: torch.Tensor) -> None:
        """Post this level's rows (``h``: this rank's rows) to the peers that mirror them.
        Rows travel as host tensors (gloo); a device ``h`` is copied to the host first."""
        h = h.detach().cpu()
        self._recv = torch.empty((self.num_recv, *h.shape[1:]), dtype=h.dtype)
        if self.world == 1:
            return
        chunks = {to: h.index_select(0, self.send_idx[to]).contiguous() for to, _ in self.peers}
        self._pending = self._post(
            chunks.__getitem__, self._recv, self.recv_counts, self.recv_off, 2 * self.tag
        )
        self._chunks = chunks  # alive until sent

    def wait(self) -> torch.Tensor:
        """The mirrors' rows (peer after peer in rank order), once every chunk is in."""
        t0 = time.perf_counter()
        for r in self._pending:
            r.wait()
        self.seconds += time.perf_counter() - t0
        self._pending, self._chunks = [], {}
        out, self._recv = self._recv, None
        if out is None:
            raise RuntimeError("RowExchange.wait without start")
        return out

    def push_gradients(self, grad: torch.Tensor, num_rows: int) -> torch.Tensor:
        """Backward: send each owner its mirrors' gradients, sum what the peers send into the
        gradient of this rank's ``num_rows`` rows (blocking)."""
        grad = grad.contiguous()
        out = torch.zeros((num_rows, *grad.shape[1:]), dtype=grad.dtype)
        if self.world == 1:
            return out
        sizes = [len(s) for s in self.send_idx]
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        got = torch.empty((int(off[-1]), *grad.shape[1:]), dtype=grad.dtype)

        def rows_for(to: int) -> torch.Tensor:
            return grad[int(self.recv_off[to]) : int(self.recv_off[to + 1])]

        t0 = time.perf_counter()
        for r in self._post(rows_for, got, sizes, off, 2 * self.tag + 1):
            r.wait()
        self.seconds += time.perf_counter() - t0
        for peer, idx in enumerate(self.send_idx):
            if len(idx):
                out.index_add_(0, idx, got[int(off[peer]) : int(off[peer + 1])])
        return out


class PullRows(torch.autograd.Function):
    """``PullRows.apply(h, exchange)``: the mirrors' rows of a level whose exchange was
    started with ``exchange.start(h)`` (forward waits for them); backward sends the mirrors'
    gradients to their owners and returns the summed gradient of ``h``'s rows."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, exchange: RowExchange) -> torch.Tensor:  # type: ignore[override]
        ctx.exchange = exchange
        ctx.num_rows = h.shape[0]
        ctx.device = h.device
        return exchange.wait().to(h.device)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return ctx.exchange.push_gradients(grad.cpu(), ctx.num_rows).to(ctx.device), None
