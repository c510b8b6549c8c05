"""Master-mirror exchange of one level's rows for full-graph training (NeutronStar, Sec. 4.2-4.3).

Each rank owns (is the master of) its core nodes; a remote in-neighbour that a rank fetches is
a mirror there. Forward (``GetFromDepNbr``): every owner sends each peer one packed chunk with
the rows of the peer's mirrors (asked for once, at set-up). Backward (``PostToDepNbr``): every
rank sends each owner one chunk with its mirrors' gradients, which the owner sums. Chunks travel
with non-blocking ``isend``/``irecv`` in time slots (:func:`slot_peers`): the ring's ``world -
1`` slots (Sec. 4.3, Figure 8; each posted once the previous one has completed,
:meth:`Transfer.finish`: one chunk in flight per direction), or one slot with every chunk in
rank order (``ring=False``, the ablation). Every rank posts every slot of every level's
exchange it takes part in, rows or not (an empty chunk is neither sent nor received), so sends
and receives always pair (issue 37); between slots the caller computes what the slots so far
allow (the engine's overlap). More: docs/distributed.md#fullgraph-neutronstar.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats

__all__ = ["RowExchange", "Transfer", "ring_peers", "slot_peers"]


def ring_peers(rank: int, world: int, ring: bool = True) -> list[tuple[int, int]]:
    """``(send_to, receive_from)`` per ring slot ``s = 1 .. world - 1``:
    ``((rank + s) mod world, (rank - s) mod world)``; with ``ring`` false, every other rank in
    rank order (``(q, q)``)."""
    if ring:
        return [((rank + s) % world, (rank - s) % world) for s in range(1, world)]
    others = [r for r in range(world) if r != rank]
    return list(zip(others, others, strict=True))


def slot_peers(rank: int, world: int, ring: bool = True) -> list[list[tuple[int, int]]]:
    """The exchange's time slots, each a list of ``(send_to, receive_from)``: one pair per
    slot in the ring, one slot with every pair without it (none on one process)."""
    if world == 1:
        return []
    if ring:
        return [[p] for p in ring_peers(rank, world, True)]
    return [ring_peers(rank, world, False)]


class Transfer:
    """One direction of one level's exchange, slot by slot.

    Args:
        slots: :func:`slot_peers`.
        out: ``out(peer)``: the chunk for ``peer`` (called when its slot is posted).
        into: ``into(peer)``: the receive buffer for ``peer``'s chunk (a view; may be empty).
        tag: the messages' tag.
        done: ``done(peer)``, called once ``peer``'s chunk is in (e.g. to sum it somewhere).
        stats, owner: counters, and the :class:`RowExchange` whose ``seconds`` count waits.
    """

    def __init__(
        self,
        slots: list[list[tuple[int, int]]],
        out: Callable[[int], torch.Tensor],
        into: Callable[[int], torch.Tensor],
        tag: int,
        *,
        done: Callable[[int], None] | None = None,
        stats: CommStats | None = None,
        owner: RowExchange | None = None,
    ) -> None:
        self.slots, self.out, self.into, self.tag = slots, out, into, tag
        self.done, self.stats, self.owner = done, stats, owner
        self._reqs: list = []
        self._alive: list[torch.Tensor] = []
        self.posted = 0  # slots posted
        self.finished = 0  # slots completed

    @property
    def num_slots(self) -> int:
        return len(self.slots)

    def post(self) -> None:
        """Post the next slot (its previous one must have completed)."""
        if self.posted >= self.num_slots:
            return
        if self.posted > self.finished:
            raise RuntimeError("Transfer.post: the previous slot is still in flight")
        reqs, alive = [], []
        for to, frm in self.slots[self.posted]:
            chunk = self.out(to)
            if chunk.shape[0]:
                chunk = chunk.contiguous()
                alive.append(chunk)
                reqs.append(dist.isend(chunk, to, tag=self.tag))
                if self.stats is not None:
                    self.stats.bytes_sent += chunk.numel() * chunk.element_size()
                    self.stats.messages_sent += 1
            buf = self.into(frm)
            if buf.shape[0]:
                reqs.append(dist.irecv(buf, frm, tag=self.tag))
                if self.stats is not None:
                    self.stats.bytes_received += buf.numel() * buf.element_size()
                    self.stats.messages_received += 1
        if self.stats is not None:
            self.stats.rounds += 1
        self._reqs, self._alive = reqs, alive
        self.posted += 1

    def finish(self, post_next: bool = True) -> int:
        """Wait for the slot in flight, call ``done`` for its senders and (``post_next``) post
        the next slot; the number of slots completed so far."""
        if self.finished >= self.posted:
            if self.finished >= self.num_slots:
                return self.finished
            self.post()
        t0 = time.perf_counter()
        for r in self._reqs:
            r.wait()
        if self.owner is not None:
            self.owner.seconds += time.perf_counter() - t0
        self._reqs, self._alive = [], []
        if self.done is not None:
            for _, frm in self.slots[self.finished]:
                self.done(frm)
        self.finished += 1
        if post_next:
            self.post()
        return self.finished

    def finish_all(self) -> None:
        """Every remaining slot, one after the other."""
        while self.finished < self.num_slots:
            self.finish()


class RowExchange:
    """One level's exchange, fixed at set-up.

    Args:
        send_idx: per peer, the positions (in this rank's rows) of the rows it mirrors, in
            the order it asked for them (empty for this rank).
        recv_counts: per peer, how many of this rank's mirrors it owns (their rows arrive
            in the order this rank asked for them, peer after peer in rank order).
        rank, world: this process and the group size.
        tag: distinguishes this level's messages from other levels'.
        ring: ring time slots (default true) or every chunk at once.
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
        sizes = [len(s) for s in self.send_idx]
        self.send_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.rank, self.world, self.tag, self.ring = rank, world, tag, ring
        self.slots = slot_peers(rank, world, ring)
        self.stats = stats
        self.seconds = 0.0  # time spent waiting for chunks (forward and backward)

    @property
    def num_recv(self) -> int:
        return int(self.recv_off[-1])

    @property
    def num_slots(self) -> int:
        return len(self.slots)

    def recv_slot(self, owner: int) -> int:
        """The slot (1-based) in which ``owner``'s rows arrive in forward."""
        if not self.ring:
            return 1
        return (self.rank - owner) % self.world

    def mirrors(self, owner: int) -> slice:
        """The rows of ``owner``'s mirrors in the received buffer."""
        return slice(int(self.recv_off[owner]), int(self.recv_off[owner + 1]))

    # ------------------------------------------------------------------ forward
    def rows(
        self, h: torch.Tensor, done: Callable[[int], None] | None = None
    ) -> tuple[Transfer, torch.Tensor]:
        """Forward: a :class:`Transfer` of this level's rows (``h``: this rank's rows) to the
        peers that mirror them, with its first slot posted, and the buffer the mirrors' rows
        arrive in (peer after peer in rank order; complete once every slot is finished;
        ``done(owner)`` once ``owner``'s rows are in). Rows travel as host tensors (gloo); a
        device ``h`` is copied to the host first."""
        h = h.detach().cpu()
        recv = torch.empty((self.num_recv, *h.shape[1:]), dtype=h.dtype)
        send_idx = self.send_idx
        t = Transfer(
            self.slots,
            lambda to: h.index_select(0, send_idx[to]),
            lambda frm: recv[self.mirrors(frm)],
            2 * self.tag,
            done=done,
            stats=self.stats,
            owner=self,
        )
        t.post()
        return t, recv

    # ------------------------------------------------------------------ backward
    def gradients(
        self, grad_of: Callable[[], torch.Tensor | None], num_rows: int, width: int
    ) -> tuple[Transfer, torch.Tensor]:
        """Backward: a :class:`Transfer` of the mirrors' gradients to their owners, and the
        gradient of this rank's ``num_rows`` rows (``width`` columns, on the host) that the
        peers' chunks are summed into as they arrive. ``grad_of()`` gives the mirrors' gradient
        (rows as in the forward buffer; None = zero) when a slot is posted. Posts nothing yet:
        ``post()`` each slot once the gradients it sends are final. The slots go in forward's
        order, so in the ring slot ``s`` sends to the owner whose rows arrived in forward slot
        ``world - s``."""
        out = torch.zeros((num_rows, width), dtype=torch.float32)
        got = torch.empty((int(self.send_off[-1]), width), dtype=torch.float32)
        off = self.send_off

        def chunk(to: int) -> torch.Tensor:
            g = grad_of()
            sl = self.mirrors(to)
            if g is None:
                return torch.zeros((sl.stop - sl.start, width), dtype=torch.float32)
            return g[sl].detach().cpu()

        def into(frm: int) -> torch.Tensor:
            return got[int(off[frm]) : int(off[frm + 1])]

        def done(frm: int) -> None:
            if len(self.send_idx[frm]):
                out.index_add_(0, self.send_idx[frm], into(frm))

        t = Transfer(
            self.slots,
            chunk,
            into,
            2 * self.tag + 1,
            done=done,
            stats=self.stats,
            owner=self,
        )
        return t, out

    # ------------------------------------------------------------------ blocking forms
    def pull(self, h: torch.Tensor) -> torch.Tensor:
        """The mirrors' rows, every slot waited for (blocking)."""
        t, recv = self.rows(h)
        t.finish_all()
        return recv

    def push_gradients(self, grad: torch.Tensor, num_rows: int) -> torch.Tensor:
        """The summed gradients of this rank's rows from its mirrors' ``grad`` (blocking)."""
        t, out = self.gradients(lambda: grad, num_rows, int(grad.shape[1]))
        t.finish_all()
        return out
