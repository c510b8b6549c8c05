"""Attention over a block's CSR without a row per edge: GAT's softmax-weighted sum of messages
(Veličković et al., ICLR 2018, Eqs. 1-4).

PyG's ``GATConv`` gathers each edge's source row, scales it by its attention coefficient and
scatters it to the target: an ``(edges, heads, channels)`` tensor forward and again backward.
:func:`attend` keeps the per-edge work to ``(edges, heads)`` scalars (scores, softmax,
dropout) and sums the messages with numba kernels over the CSR (DGL's fused ``u_mul_e_sum``,
:func:`weighted_sum`): forward, each target's row; backward, the coefficients' gradients as
a dot product per entry (SDDMM) and the sources' rows' over the CSR by column. Same numbers as
``GATConv`` within float tolerance (the sums are taken in another order).

:func:`attend_projected` takes the rows and both scores as column blocks of one product
``y = x [W | W a_src | W a_dst]`` (one pass over ``x`` forward and for the weight's gradient,
instead of three) and runs softmax, dropout and sum in one autograd function, whose backward
writes ``y``'s gradient block by block into one tensor.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from shoal.graph.blocks import Block
from shoal.nn import _attention_kernels as K
from shoal.nn.dropout import dropout as drop
from shoal.nn.dropout import dropout_into, dropout_seed

__all__ = ["attend", "attend_projected", "edge_softmax", "looped_csr", "weighted_sum"]


def looped_csr(block: Block) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rowptr, col, row)`` of the block's edges with every target's self loop (``v -> v``:
    targets are the first sources) and no other self loops, as ``GATConv``'s
    ``remove_self_loops`` + ``add_self_loops``; each target's self loop last in its row.
    ``row``: each entry's target. Cached on the block."""
    hit = block.cache.get("looped_csr")
    if hit is not None:
        return hit
    src, dst = block.edge_index
    n, dev = block.num_dst, src.device
    ptr = block.rowptr
    keep = src != dst
    if bool(keep.all()):
        kept, col_kept, row_kept = ptr, src, dst
    else:  # the kept entries before each row
        before = torch.zeros(src.numel() + 1, dtype=torch.int64, device=dev)
        torch.cumsum(keep.to(torch.int64), 0, out=before[1:])
        kept, col_kept, row_kept = before[ptr], src[keep], dst[keep]
    ar = torch.arange(n, dtype=torch.int64, device=dev)
    rowptr = kept + torch.arange(n + 1, dtype=torch.int64, device=dev)
    col = torch.empty(int(rowptr[-1]), dtype=torch.int64, device=dev)
    row = torch.empty_like(col)
    pos = torch.arange(col_kept.numel(), dtype=torch.int64, device=dev) + row_kept
    col[pos], row[pos] = col_kept, row_kept
    col[rowptr[1:] - 1], row[rowptr[1:] - 1] = ar, ar
    out = (rowptr, col, row)
    block.cache["looped_csr"] = out
    return out


class _WeightedSum(torch.autograd.Function):
    """``out[v, k] = sum_e alpha[e, k] h[col[e], k]`` over the CSR's row ``v`` (numba kernels,
    :mod:`shoal.nn._attention_kernels`), differentiable in ``alpha`` and ``h``; a row may hold
    a column twice (a sampled block's duplicate edges), each entry its own gradient."""

    @staticmethod
    def forward(ctx, alpha, h, rowptr, col):  # noqa: D102
        ctx.save_for_backward(alpha, h, rowptr, col)
        n, heads, ch = h.shape
        out = torch.empty((rowptr.numel() - 1, heads, ch), dtype=h.dtype)
        hn = h.detach().numpy().reshape(n, heads * ch)
        K._wsum(rowptr.numpy(), col.numpy(), alpha.detach().numpy(), hn, 0, ch, _flat(out))
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        alpha, h, rowptr, col = ctx.saved_tensors
        g = _flat(grad.contiguous())
        rp, cl = rowptr.numpy(), col.numpy()
        ch = h.shape[2]
        g_alpha = g_h = None
        if ctx.needs_input_grad[0]:
            g_alpha = torch.empty_like(alpha)
            K._wsum_grad_alpha(rp, cl, _flat(h.detach()), 0, ch, g, g_alpha.numpy())
        if ctx.needs_input_grad[1]:
            g_h = torch.empty_like(h)
            tptr, entry, row = K._transpose(rp, cl, h.shape[0])
            a_t = np.ascontiguousarray(alpha.detach().numpy()[entry])  # in the by-column order
            K._wsum(tptr, row, a_t, g, 0, ch, _flat(g_h))
        return g_alpha, g_h, None, None


class _EdgeSoftmax(torch.autograd.Function):
    """:func:`edge_softmax` by numba kernels, differentiable in ``a_src`` and ``a_dst``."""

    @staticmethod
    def forward(ctx, a_src, a_dst, rowptr, col, slope):  # noqa: D102
        alpha = torch.empty((col.numel(), a_dst.shape[1]), dtype=torch.float32)
        K._edge_softmax(
            rowptr.numpy(),
            col.numpy(),
            a_src.detach().numpy(),
            0,
            a_dst.detach().numpy(),
            0,
            np.float32(slope),
            alpha.numpy(),
        )
        ctx.save_for_backward(a_src, a_dst, rowptr, col, alpha)
        ctx.slope = slope
        return alpha

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        a_src, a_dst, rowptr, col, alpha = ctx.saved_tensors
        g_raw = torch.empty_like(alpha)
        g_dst = torch.empty_like(a_dst)
        K._edge_softmax_grad(
            rowptr.numpy(),
            col.numpy(),
            a_src.detach().numpy(),
            0,
            a_dst.detach().numpy(),
            0,
            np.float32(ctx.slope),
            alpha.numpy(),
            grad.contiguous().numpy(),
            g_raw.numpy(),
            g_dst.numpy(),
            0,
        )
        g_src = torch.zeros_like(a_src).index_add_(0, col, g_raw)
        return g_src, g_dst, None, None, None


class _ProjectedAttention(torch.autograd.Function):
    """:func:`attend_projected` on the CPU in float32: ``y``'s column blocks read in place,
    the softmax, dropout and weighted sum by numba kernels, ``y``'s gradient written block by
    block into one tensor."""

    @staticmethod
    def forward(ctx, y, rowptr, col, heads, ch, num_dst, slope, p, seed):  # noqa: D102
        yn, hc = y.detach().numpy(), heads * ch
        rp, cl = rowptr.numpy(), col.numpy()
        alpha = np.empty((cl.shape[0], heads), np.float32)
        K._edge_softmax(rp, cl, yn, hc, yn, hc + heads, np.float32(slope), alpha)
        kept = alpha
        if p > 0.0:
            kept = np.empty_like(alpha)
            dropout_into(alpha, p, seed, kept)
        out = torch.empty((num_dst, heads, ch), dtype=torch.float32)
        K._wsum(rp, cl, kept, yn, 0, ch, _flat(out))
        ctx.save_for_backward(y, rowptr, col)
        ctx.alpha, ctx.kept = alpha, kept
        ctx.args = (heads, ch, num_dst, slope, p, seed)
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        y, rowptr, col = ctx.saved_tensors
        heads, ch, num_dst, slope, p, seed = ctx.args
        yn, hc = y.detach().numpy(), heads * ch
        rp, cl = rowptr.numpy(), col.numpy()
        g = _flat(grad.contiguous())
        g_kept = np.empty_like(ctx.alpha)  # the coefficients' gradient after dropout
        K._wsum_grad_alpha(rp, cl, yn, 0, ch, g, g_kept)
        g_alpha = g_kept
        if p > 0.0:
            g_alpha = np.empty_like(g_kept)
            dropout_into(g_kept, p, seed, g_alpha)
        g_y = torch.empty_like(y)
        gy = g_y.numpy()
        gy[num_dst:, hc + heads :] = 0.0  # (a_dst is read from the targets' rows only)
        g_raw = np.empty_like(g_alpha)
        K._edge_softmax_grad(
            rp,
            cl,
            yn,
            hc,
            yn,
            hc + heads,
            np.float32(slope),
            ctx.alpha,
            g_alpha,
            g_raw,
            gy,
            hc + heads,
        )
        tptr, entry, row = K._transpose(rp, cl, y.shape[0])
        K._attend_grad_src(tptr, entry, row, ctx.kept, g_raw, g, ch, gy, 0, hc)
        return g_y, None, None, None, None, None, None, None, None


def _flat(t: torch.Tensor) -> np.ndarray:
    """A contiguous tensor's rows as a 2-D numpy view (trailing dimensions flattened)."""
    return t.numpy().reshape(t.shape[0], -1)


def edge_softmax(
    a_src: torch.Tensor,
    a_dst: torch.Tensor,
    rowptr: torch.Tensor,
    col: torch.Tensor,
    row: torch.Tensor,
    negative_slope: float = 0.2,
) -> torch.Tensor:
    """``(entries, heads)`` attention coefficients (GAT Eqs. 1-3): over each row's entries, the
    softmax of ``leaky_relu(a_src[col[e]] + a_dst[row[e]], negative_slope)``. On the CPU in
    float32 by numba kernels (:class:`_EdgeSoftmax`), elsewhere by torch's scatter ops."""
    if a_src.device.type == "cpu" and a_src.dtype == a_dst.dtype == torch.float32:
        return _EdgeSoftmax.apply(
            a_src.contiguous(), a_dst.contiguous(), rowptr, col, negative_slope
        )
    e = F.leaky_relu(a_src[col] + a_dst[row], negative_slope)
    top = torch.full(a_dst.shape, float("-inf"), dtype=e.dtype, device=e.device)
    top = top.scatter_reduce(0, row.unsqueeze(1).expand_as(e), e.detach(), "amax")
    ex = (e - top[row]).exp()
    total = torch.zeros_like(top).index_add_(0, row, ex)
    return ex / (total[row] + 1e-16)


def weighted_sum(
    alpha: torch.Tensor, h: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, row: torch.Tensor
) -> torch.Tensor:
    """``(n_dst, heads, channels)``: each row's entries' source rows ``h[col[e]]`` weighted by
    ``alpha[e]`` per head and summed (DGL's ``u_mul_e_sum``). On the CPU in float32 without a
    row per entry (:class:`_WeightedSum`); elsewhere by gathering them (``row``: each entry's
    row)."""
    if h.device.type == "cpu" and h.dtype == torch.float32 and alpha.dtype == torch.float32:
        return _WeightedSum.apply(alpha.contiguous(), h.contiguous(), rowptr, col)
    out = h.new_zeros((rowptr.numel() - 1, h.shape[1], h.shape[2]))
    return out.index_add(0, row, alpha.unsqueeze(-1) * h[col])


def attend(
    h: torch.Tensor,
    a_src: torch.Tensor,
    a_dst: torch.Tensor,
    block: Block,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """GAT's aggregation (Eqs. 1-4; self loops added as ``GATConv`` does): each target's
    ``(heads, channels)`` output ``sum_u alpha_uv h_u`` with ``alpha_uv`` the softmax over the
    target's in-edges of ``leaky_relu(a_src[u] + a_dst[v], negative_slope)``, the
    coefficients dropped out with probability ``dropout`` while ``training`` (default 0.0,
    False). ``h``: ``(num_src, heads, channels)``; ``a_src``: ``(num_src, heads)``; ``a_dst``:
    ``(num_dst, heads)``. Returns ``(num_dst, heads, channels)``."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    rowptr, col, row = looped_csr(block)
    alpha = edge_softmax(a_src, a_dst, rowptr, col, row, negative_slope)
    alpha = drop(alpha, dropout, training)
    return weighted_sum(alpha, h, rowptr, col, row)


def attend_projected(
    y: torch.Tensor,
    heads: int,
    channels: int,
    block: Block,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """:func:`attend` over the column blocks of one projection of the sources' rows:
    ``y = [h | a_src | a_dst]``, ``(num_src, heads * channels + 2 * heads)``, with ``h``'s
    ``(heads, channels)`` per row and ``a_dst`` read from the first ``num_dst`` rows (the
    targets). A layer computes ``y`` as one product of its rows with its weight and the
    attention vectors folded into it (:class:`~shoal.nn.gat.GAT`). On the CPU in float32 one
    autograd function (:class:`_ProjectedAttention`); elsewhere :func:`attend` on views of the
    blocks. Returns ``(num_dst, heads, channels)``."""
    hc = heads * channels
    if y.dim() != 2 or y.shape[1] != hc + 2 * heads:
        raise ValueError(
            f"y must be (num_src, heads * channels + 2 * heads) = (*, {hc + 2 * heads}), "
            f"got {tuple(y.shape)}"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if y.device.type != "cpu" or y.dtype != torch.float32:
        h = y[:, :hc].reshape(-1, heads, channels)
        a_src, a_dst = y[:, hc : hc + heads], y[: block.num_dst, hc + heads :]
        return attend(
            h,
            a_src,
            a_dst,
            block,
            negative_slope=negative_slope,
            dropout=dropout,
            training=training,
        )
    rowptr, col, _ = looped_csr(block)
    p = dropout if training else 0.0
    seed = dropout_seed() if p > 0.0 else 0
    return _ProjectedAttention.apply(
        y.contiguous(), rowptr, col, heads, channels, block.num_dst, negative_slope, p, seed
    )
