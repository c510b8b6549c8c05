"""Neighbour sampling with torch operations on the model's device (:class:`DeviceSampler`).

The same uniform layer-wise sampling as :class:`shoal.sample.sampler.NeighborSampler`
(GraphSAGE, Hamilton et al., NeurIPS 2017, Algorithm 2, lines 1-7), drawn with torch tensor
operations over a CSR held on a device, so that on a GPU a batch is sampled where the model
runs and the host neither samples nor copies it (DGL's GraphBolt and its UVA sampling, DGL PR
#3674; cuGraph-PyG). **The batches are the host sampler's, bit for bit**, for every seed:

- every frontier node ``i`` of hop ``h`` draws from the SplitMix64 stream ``mix64(key_h ^ i)``
  (``key_h = _kernels._stream_key(seed, h)``), evaluated on int64 tensors
  (:mod:`shoal.utils.splitmix`) for all nodes of the hop at once;
- a node with at most ``fanout`` in-neighbours takes them all, in CSR order; one with more
  takes Floyd's sample of ``fanout`` distinct positions (R. W. Floyd's algorithm, J. Bentley,
  CACM 30(9), 1987), its ``fanout`` draws vectorised over the hop's nodes: draw ``q`` of node
  ``i`` is ``below(mix64(state_i + (q + 1) * golden), d - fanout + q + 1)``, replaced by ``d -
  fanout + q`` when an earlier pick of the node took it (every pick of every row computed at
  once, repeated until nothing changes: :func:`_floyd`); above ``_FLOYD_MAX`` (64) Knuth's
  selection sampling (TAOCP vol. 2, 3.4.2, Algorithm S), one step per position over the
  hop's nodes;
- the picked neighbours get batch-local ids in order of first appearance (seeds first, then
  each hop's new nodes in the order the hop lists them), found with one sort per hop
  (``torch.unique`` and the smallest position of each id) instead of the host's sequential
  id map.

The graph is copied to the device once: ``indptr`` (int64), ``indices`` (int32 when the id
space allows, in slices, never a whole host copy) and the full in-degrees (float32):
:meth:`DeviceSampler.nbytes` says how much. Only untyped graphs, without excluded edges:
typed graphs and link batches stay with the host sampler (``--sample-on auto`` picks it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from shoal.graph.blocks import Block, MiniBatch
from shoal.sample import _kernels as K
from shoal.sample.base import parse_fanouts
from shoal.utils.arrays import unique_sorted
from shoal.utils.splitmix import GOLDEN, below, mix64, signed

__all__ = ["DeviceSampler"]

#: entries of ``indices`` copied to the device at a time
_COPY_ENTRIES = 1 << 24


def _to_device(a: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``a`` (any integer array, a memory map too) on ``device`` as ``dtype``, copied slice
    by slice (never a whole host copy in another dtype)."""
    out = torch.empty(len(a), dtype=dtype, device=device)
    for lo in range(0, len(a), _COPY_ENTRIES):
        part = np.array(a[lo : lo + _COPY_ENTRIES], dtype=np.int64)  # (a writable copy)
        out[lo : lo + len(part)] = torch.from_numpy(part).to(device=device, dtype=dtype)
    return out


class DeviceSampler:
    """Uniform neighbour sampler over an in-neighbour CSR held on ``device`` (module doc).

    Args:
        indptr: ``(R + 1,)`` row offsets; indices: ``(nnz,)`` in-neighbour ids (memory maps
            are fine: copied in slices).
        fanouts: neighbours per hop, hop 1 first (:func:`~shoal.sample.base.parse_fanouts`;
            -1 takes all).
        num_nodes: size of the id space (default ``R``; ids ``>= R`` have no neighbours).
        degrees: ``(num_nodes,)`` full in-degrees (default the CSR's row lengths).
        device: where the CSR lives and the batches are drawn (default ``"cpu"``).

    ``sample(seeds, seed)`` returns the :class:`~shoal.graph.blocks.MiniBatch`
    :meth:`NeighborSampler.sample <shoal.sample.sampler.NeighborSampler.sample>` returns for
    the same arguments, with ``n_id`` an int64 tensor on ``device`` and the blocks there.
    """

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        fanouts: Sequence[int] | str,
        *,
        num_nodes: int | None = None,
        degrees: np.ndarray | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.fanouts = parse_fanouts(fanouts)
        self.device = torch.device(device)
        rows = len(indptr) - 1
        self.num_rows = rows
        self.num_nodes = rows if num_nodes is None else int(num_nodes)
        if self.num_nodes < rows:
            raise ValueError(f"num_nodes ({self.num_nodes}) is below the CSR's {rows} rows")
        self.indptr = _to_device(indptr, torch.int64, self.device)
        small = self.num_nodes < 2**31
        self.indices = _to_device(indices, torch.int32 if small else torch.int64, self.device)
        if degrees is None:
            deg = np.zeros(self.num_nodes, np.float32)
            deg[:rows] = np.diff(np.asarray(indptr, np.int64))
        else:
            deg = np.asarray(degrees, np.float32)
            if deg.shape != (self.num_nodes,):
                raise ValueError(f"degrees must have shape ({self.num_nodes},), got {deg.shape}")
        self.degrees = torch.from_numpy(np.ascontiguousarray(deg)).to(self.device)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    @staticmethod
    def nbytes(num_rows: int, nnz: int, num_nodes: int) -> int:
        """Device memory the sampler's copy of a graph takes: offsets, entries, degrees."""
        entry = 4 if num_nodes < 2**31 else 8
        return 8 * (num_rows + 1) + entry * nnz + 4 * num_nodes

    # ------------------------------------------------------------------ one batch
    def sample(
        self,
        seeds: np.ndarray | torch.Tensor,
        seed: int = 0,
        *,
        fanouts: Sequence[int] | None = None,
    ) -> MiniBatch:
        """The blocks of ``seeds`` (unique ids; checked when given as a host array) drawn
        with the batch seed ``seed``; ``fanouts`` overrides the sampler's."""
        fan = self.fanouts if fanouts is None else parse_fanouts(fanouts)
        if isinstance(seeds, np.ndarray):
            s = np.asarray(seeds, np.int64)
            if s.size and (s.min() < 0 or s.max() >= self.num_nodes):
                bad = int(s[(s < 0) | (s >= self.num_nodes)][0])
                raise ValueError(f"seed node {bad} is out of range [0, {self.num_nodes})")
            if len(unique_sorted(s)) != len(s):
                raise ValueError("seeds must be unique")
            seeds = torch.from_numpy(s)
        nodes = seeds.to(self.device, torch.int64)
        num_seeds = int(nodes.shape[0])
        n = num_seeds
        hops = []
        for hop, f in enumerate(fan):
            key = int(K._stream_key(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), np.uint64(hop)))
            rowptr, picked, dst = self._draw_hop(nodes[:n], f, key)
            nodes, col = _relabel(nodes, picked)
            n_new = int(nodes.shape[0])
            hops.append((torch.stack([col, dst]), rowptr, n_new, n))
            n = n_new
        deg = self.degrees[nodes]
        blocks = [
            Block(ei, n_src, n_dst, rp, deg[:n_src]) for ei, rp, n_src, n_dst in reversed(hops)
        ]
        return MiniBatch(n_id=nodes, blocks=blocks, num_seeds=num_seeds)

    def _draw_hop(
        self, frontier: torch.Tensor, fanout: int, key: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rowptr, picked, dst)`` of one hop: frontier node ``i``'s neighbours (global ids)
        are ``picked[rowptr[i]:rowptr[i + 1]]``, ``dst`` their frontier positions."""
        dev = self.device
        n = int(frontier.shape[0])
        inside = frontier < self.num_rows
        v = torch.where(inside, frontier, torch.zeros_like(frontier))
        begin = torch.where(inside, self.indptr[v], torch.zeros_like(v))
        deg = torch.where(inside, self.indptr[v + 1] - begin, torch.zeros_like(v))
        counts = deg if fanout < 0 else torch.clamp(deg, max=fanout)
        rowptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
        torch.cumsum(counts, 0, out=rowptr[1:])
        m = int(rowptr[-1])  # (the hop's size: one wait for the device)
        frontier_pos = torch.arange(n, dtype=torch.int64, device=dev)
        dst = torch.repeat_interleave(frontier_pos, counts, output_size=m)
        q = torch.arange(m, dtype=torch.int64, device=dev) - rowptr[:-1][dst]  # in its row
        if 0 <= fanout <= K._FLOYD_MAX:
            # every row drawn (no wait to find the rows with more than ``fanout``); a row
            # with fewer keeps its entries in CSR order
            drawn = deg > fanout
            offsets = self._draw_floyd(frontier_pos, deg, drawn, fanout, key)
            q = torch.where(drawn[dst], offsets[dst, torch.clamp(q, max=fanout - 1)], q)
        elif fanout > K._FLOYD_MAX:
            rows = torch.nonzero(deg > fanout).squeeze(1)
            if rows.numel():
                offsets = _selection(_row_states(rows, key), deg[rows], fanout)
                slots = rowptr[rows].unsqueeze(1) + torch.arange(fanout, device=dev)
                q[slots.reshape(-1)] = offsets.reshape(-1)
        picked = self.indices[begin[dst] + q].to(torch.int64)
        return rowptr, picked, dst

    def _draw_floyd(
        self, rows: torch.Tensor, d: torch.Tensor, drawn: torch.Tensor, k: int, key: int
    ) -> torch.Tensor:
        """``(len(rows), k)`` offsets: Floyd's ``k`` distinct ones in ``[0, d)`` for the rows
        ``drawn`` (those with ``d > k``), as the host kernel's ``_draw_run`` draws them
        (module docstring); ``0..k-1`` for the others."""
        dev = self.device
        steps = torch.arange(1, k + 1, dtype=torch.int64, device=dev) * signed(GOLDEN)
        bits = mix64(_row_states(rows, key).unsqueeze(1) + steps.unsqueeze(0))  # draw q
        grid = torch.arange(k, dtype=torch.int64, device=dev).expand(len(rows), k)
        j = d.unsqueeze(1) - k + grid
        keep = drawn.unsqueeze(1)
        t = torch.where(keep, below(bits, torch.clamp(j + 1, min=1)), grid)
        return _floyd(t, torch.where(keep, j, grid))


def _row_states(rows: torch.Tensor, key: int) -> torch.Tensor:
    """The SplitMix64 state of frontier positions ``rows`` in the hop keyed ``key``."""
    return mix64(rows ^ signed(key))


#: Floyd's draws of at most this many per row resolve their collisions all at once
#: (:func:`_floyd`); above, one draw at a time
_FLOYD_AT_ONCE = 32


def _floyd(t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Floyd's picks from the draws ``t`` and the fall-backs ``j`` (``(rows, k)``): pick ``q``
    is ``t[q]`` unless an earlier pick of the row took it, then ``j[q]``.

    Up to :data:`_FLOYD_AT_ONCE` draws a row, every pick is computed at once from the
    previous estimate, ``out[q] = j[q] if t[q] in out[:q] else t[q]``, until nothing
    changes: after ``i`` rounds the first ``i`` picks equal the sequential ones, so the fixed
    point is Floyd's result, and since collisions are rare (``k * k / 2d`` a row) it comes
    after a round or two, a few kernels each instead of a few per draw."""
    k = t.shape[1]
    if k > _FLOYD_AT_ONCE:
        out = torch.empty_like(t)
        out[:, 0] = t[:, 0]
        for q in range(1, k):
            taken = (out[:, :q] == t[:, q : q + 1]).any(1)
            out[:, q] = torch.where(taken, j[:, q], t[:, q])
        return out
    earlier = torch.ones((k, k), dtype=torch.bool, device=t.device).tril(-1)  # p < q
    out = t
    for r in range(1, k + 1):
        taken = ((out.unsqueeze(1) == t.unsqueeze(2)) & earlier).any(2)
        new = torch.where(taken, j, t)
        # converged after k rounds at the latest; checked (a wait for the device) after
        # rounds 2, 4, 8, ... only
        if r == k or (r >= 2 and r & (r - 1) == 0 and torch.equal(new, out)):
            return new
        out = new
    return out


def _selection(state: torch.Tensor, d: torch.Tensor, k: int) -> torch.Tensor:
    """Knuth's selection sampling of ``k`` of ``d`` positions per row, all rows a step at a
    time: at position ``j`` a row still needing ``need`` takes ``j`` when
    ``below(bits_j, d - j) < need`` (``bits_j`` its ``j + 1``-th draw)."""
    dev = state.device
    r = state.shape[0]
    out = torch.zeros((r, k), dtype=torch.int64, device=dev)
    need = torch.full((r,), k, dtype=torch.int64, device=dev)
    rows = torch.arange(r, device=dev)
    golden = signed(GOLDEN)
    limit = int(d.max()) if r else 0
    for j in range(limit):
        state = state + golden
        active = (need > 0) & (d > j)
        take = active & (below(mix64(state), torch.clamp(d - j, min=1)) < need)
        out[rows[take], (k - need)[take]] = j
        need = need - take.to(torch.int64)
        if j % 64 == 63 and not bool((need > 0).any()):
            break
    return out


def _relabel(nodes: torch.Tensor, picked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's nodes with ``picked``'s new ids appended in order of first appearance, and
    the local id of every pick (what the host's sequential id map gives): one sort of the
    nodes so far and the picks, the smallest position of each distinct id."""
    n = int(nodes.shape[0])
    both = torch.cat([nodes, picked])
    uniq, inverse = torch.unique(both, return_inverse=True)
    positions = torch.arange(both.shape[0], dtype=torch.int64, device=both.device)
    first = torch.full(uniq.shape, both.shape[0], dtype=torch.int64, device=both.device)
    first.scatter_reduce_(0, inverse, positions, reduce="amin")
    new = first >= n
    order, _ = torch.sort(first[new])  # the new ids' first positions, in order
    local = first.clone()  # a node already in the batch: its position is its local id
    local[new] = n + torch.searchsorted(order, first[new])
    return torch.cat([nodes, both[order]]), local[inverse[n:]]
