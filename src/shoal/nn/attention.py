"""Attention over a block's CSR without a row per edge: GAT's softmax-weighted sum of messages
(Veličković et al., ICLR 2018, Eqs. 1-4) as one sparse-dense product.

PyG's ``GATConv`` gathers each edge's source row, scales it by its attention coefficient and
scatters it to the target: an ``(edges, heads, channels)`` tensor forward and again backward.
:func:`attend` keeps the per-edge work to ``(edges, heads)`` scalars (scores, softmax,
dropout) and sums the messages with one ``torch.sparse.mm`` over a block-diagonal CSR whose
row ``v * heads + k`` holds target ``v``'s attention coefficients of head ``k`` (DGL's fused
``u_mul_e_sum``), whose backward gives the coefficients' gradients as a sampled product
(SDDMM) and the sources' rows' as the transposed product. Same numbers as ``GATConv`` within
float tolerance (the sums are taken in another order).
"""

from __future__ import annotations

import warnings

import torch
from torch.nn import functional as F

from shoal.graph.blocks import Block

__all__ = ["attend", "looped_csr"]


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


def _head_csr(rowptr: torch.Tensor, col: torch.Tensor, heads: int, num_src: int):
    """The block-diagonal CSR's ``(rowptr, col, order)`` for ``heads`` heads: row
    ``v * heads + k`` holds target ``v``'s entries for head ``k``, its columns
    ``u * heads + k``; ``order`` picks its values out of the ``(entries, heads)`` coefficients
    flattened row-major."""
    n = rowptr.numel() - 1
    deg = rowptr[1:] - rowptr[:-1]
    hptr = torch.zeros(n * heads + 1, dtype=torch.int64, device=rowptr.device)
    hptr[1:] = torch.cumsum(deg.repeat_interleave(heads), 0)
    k = torch.arange(heads, dtype=torch.int64, device=rowptr.device)
    # entry e of row v, head k sits at heads * rowptr[v] + k * deg[v] + (e - rowptr[v])
    row = torch.repeat_interleave(torch.arange(n, device=rowptr.device), deg)
    local = torch.arange(col.numel(), device=rowptr.device) - rowptr[row]
    at = (heads * rowptr[row] + local).unsqueeze(1) + k.unsqueeze(0) * deg[row].unsqueeze(1)
    order = torch.empty(col.numel() * heads, dtype=torch.int64, device=rowptr.device)
    order[at.reshape(-1)] = torch.arange(col.numel() * heads, device=rowptr.device)
    hcol = (col.unsqueeze(1) * heads + k.unsqueeze(0)).reshape(-1)[order]
    return hptr, hcol, order


def _csr(rowptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size) -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(rowptr, col, values, size=size, check_invariants=False)


class _WeightedSum(torch.autograd.Function):
    """``A @ x`` for the CSR ``A`` of ``(rowptr, col, values)``, differentiable in ``values``
    and ``x``; a row may hold a column twice (a sampled block's duplicate edges), whose entries
    each get their own gradient (torch's own backward through a CSR's values coalesces them
    and fails). Backward: ``A^T @ grad`` (CSC) and the sampled product ``grad @ x^T`` at
    ``A``'s entries (SDDMM, ``torch.sparse.sampled_addmm``)."""

    @staticmethod
    def forward(ctx, values, rowptr, col, size, x):  # noqa: D102
        ctx.save_for_backward(values, rowptr, col, x)
        ctx.size = size
        return torch.sparse.mm(_csr(rowptr, col, values.detach(), size), x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        values, rowptr, col, x = ctx.saved_tensors
        g_values = g_x = None
        grad = grad.contiguous()
        if ctx.needs_input_grad[0]:
            pattern = _csr(rowptr, col, torch.zeros_like(values), ctx.size)
            g_values = torch.sparse.sampled_addmm(pattern, grad, x.t(), beta=0.0).values()
        if ctx.needs_input_grad[4]:
            g_x = torch.sparse.mm(_csr(rowptr, col, values, ctx.size).t(), grad)
        return g_values, None, None, None, g_x


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
    n_src, heads, ch = h.shape
    rowptr, col, row = looped_csr(block)
    e = F.leaky_relu(a_src[col] + a_dst[row], negative_slope)  # (entries, heads)
    top = torch.full((block.num_dst, heads), float("-inf"), dtype=e.dtype, device=e.device)
    top = top.scatter_reduce(0, row.unsqueeze(1).expand_as(e), e.detach(), "amax")
    ex = (e - top[row]).exp()
    total = torch.zeros_like(top).index_add_(0, row, ex)
    alpha = ex / (total[row] + 1e-16)
    alpha = F.dropout(alpha, p=dropout, training=training)
    key = ("head_csr", heads)
    hc = block.cache.get(key)
    if hc is None:
        hc = block.cache[key] = _head_csr(rowptr, col, heads, n_src)
    hptr, hcol, order = hc
    size = (block.num_dst * heads, n_src * heads)
    flat = alpha.reshape(-1)[order]
    out = _WeightedSum.apply(flat, hptr, hcol, size, h.reshape(n_src * heads, ch))
    return out.view(block.num_dst, heads, ch)
