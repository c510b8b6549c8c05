"""Dropout (Srivastava et al., JMLR 15, 2014, Eq. 1-2: keep each unit with probability
``1 - p`` and scale kept units by ``1 / (1 - p)``) with a fast numba mask for float32 CPU
tensors; other tensors use ``torch.nn.functional.dropout``.

The mask's seed is drawn from torch's default generator, so ``torch.manual_seed`` and a
checkpointed ``torch.get_rng_state()`` reproduce it exactly.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from shoal.nn import _kernels as K

__all__ = ["dropout", "relu_dropout"]


class _FastDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.args = (np.uint64(seed), np.uint64(min(int(round(p * 65536)), 65536)),
                    np.float32(1.0 / (1.0 - p)))  # fmt: skip
        return _apply(x, ctx.args)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _apply(grad, ctx.args), None, None


def _apply(x: torch.Tensor, args: tuple) -> torch.Tensor:
    xc = x.contiguous()
    out = torch.empty_like(xc)
    K._dropout_apply(xc.numpy(), *args, out.numpy())
    return out


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout with probability ``p`` when ``training``; identity otherwise."""
    if not training or p == 0.0:
        return x
    if x.dtype != torch.float32 or x.device.type != "cpu" or x.dim() != 2:
        return F.dropout(x, p, training)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))
    return _FastDropout.apply(x, p, seed)


class _FastReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        args = (np.uint64(seed), np.uint64(min(int(round(p * 65536)), 65536)),
                np.float32(1.0 / (1.0 - p)))  # fmt: skip
        xc = x.contiguous()
        out = torch.empty_like(xc)
        K._relu_dropout(xc.numpy(), *args, out.numpy())
        ctx.save_for_backward(out)
        ctx.scale = args[2]
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        g = grad.contiguous()
        res = torch.empty_like(g)
        K._masked_scale(g.numpy(), out.numpy(), ctx.scale, res.numpy())
        return res, None, None


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(x))`` in one pass over the data (the same mask as :func:`dropout`)."""
    if not training or p == 0.0 or x.dtype != torch.float32 or x.device.type != "cpu":
        return dropout(F.relu(x), p, training)
    if x.dim() != 2:
        return F.dropout(F.relu(x), p, training)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))
    return _FastReluDropout.apply(x, p, seed)
