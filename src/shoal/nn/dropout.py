"""Dropout (Srivastava et al., JMLR 15, 2014, Eq. 1-2: keep each unit with probability
``1 - p`` and scale kept units by ``1 / (1 - p)``) with a fast numba mask for float32 CPU
tensors; other tensors use ``torch.nn.functional.dropout``.

Two ways to draw the mask:

- **unkeyed** (default): the mask's seed is drawn from torch's default generator, so
  ``torch.manual_seed`` and a checkpointed ``torch.get_rng_state()`` reproduce it exactly;
- **keyed** (``key`` and ``ids`` given): the mask of a row is a function of ``key`` and the
  row's id only, ``mask[i, j] = u(key, ids[i], j) >= p`` with ``u`` SplitMix64's 16-bit
  uniforms (:mod:`shoal.nn._kernels`). Full-graph training keys it by (run seed, epoch, step,
  layer) and the *original* id of the node (:func:`dropout_key`, :func:`layer_key`), so a node
  gets the same mask wherever and however often it is computed: on its owner, as a replica on
  another rank (NeutronStar's DepCache), or on the single process. The number of processes and
  the dependency mode then do not change the model a seed trains. On tensors that are not
  float32 CPU matrices the same mask is built with torch integer operations on their device
  (:func:`keyed_mask`; equal to the kernel's, tested).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from shoal.nn import _kernels as K
from shoal.utils.splitmix import GOLDEN as _GOLDEN
from shoal.utils.splitmix import M1 as _M1
from shoal.utils.splitmix import M2 as _M2
from shoal.utils.splitmix import lsr as _lsr
from shoal.utils.splitmix import mix64 as _mix64_t
from shoal.utils.splitmix import signed as _signed

__all__ = [
    "dropout",
    "dropout_into",
    "dropout_key",
    "dropout_seed",
    "keyed_mask",
    "layer_key",
    "relu_dropout",
]

_MASK64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    """SplitMix64's finaliser on a Python int (as :func:`shoal.nn._kernels._mix64`)."""
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def dropout_key(seed: int, epoch: int, step: int = 0) -> int:
    """The 64-bit dropout key of one optimisation step: a function of (run seed, epoch,
    step) only (full-graph training has one step per epoch: ``step`` 0)."""
    ss = np.random.SeedSequence([int(seed) & _MASK64, int(epoch), int(step), 0xD80])
    return int(ss.generate_state(1, np.uint64)[0])


def layer_key(key: int, slot: int) -> int:
    """The key of one dropout site of a step: ``slot`` = the layer whose input is dropped
    (0: the input features; ``l``: layer ``l - 1``'s output)."""
    return _mix64((int(key) ^ _mix64((int(slot) + _GOLDEN) & _MASK64)) & _MASK64)


def _threshold(p: float) -> int:
    return min(int(round(p * 65536)), 65536)


def keyed_mask(ids: torch.Tensor, key: int, cols: int, p: float) -> torch.Tensor:
    """The keep mask ``(len(ids), cols)`` (bool, on ``ids``' device) of keyed dropout with
    probability ``p``: the numba kernel's mask, computed with torch integer operations (int64
    arithmetic wraps as uint64's does)."""
    ids = ids.to(torch.int64)
    golden = _signed(_GOLDEN)
    state = _mix64_t(_signed(key) ^ _mix64_t(ids + golden))
    nb = -(-cols // 4)
    steps = torch.arange(1, nb + 1, dtype=torch.int64, device=ids.device) * golden
    bits = _mix64_t(state[:, None] + steps[None, :])  # (n, nb): one draw per 4 columns
    u = torch.stack([_lsr(bits, 16 * q) & 0xFFFF for q in range(4)], dim=2)
    return u.reshape(len(ids), nb * 4)[:, :cols] >= _threshold(p)


def _kernel_args(p: float, seed: int) -> tuple:
    return (np.uint64(seed), np.uint64(_threshold(p)), np.float32(1.0 / (1.0 - p)))


_NO_IDS = np.empty(0, np.int64)


def _ids_array(ids: np.ndarray | torch.Tensor | None) -> np.ndarray:
    if ids is None:
        return _NO_IDS
    if isinstance(ids, torch.Tensor):
        ids = ids.cpu().numpy()
    return np.ascontiguousarray(ids, dtype=np.int64)


class _FastDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int, ids: np.ndarray) -> torch.Tensor:
        ctx.args = (*_kernel_args(p, seed), ids)
        return _apply(x, ctx.args)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _apply(grad, ctx.args), None, None, None


def _apply(x: torch.Tensor, args: tuple) -> torch.Tensor:
    xc = x.contiguous()
    out = torch.empty_like(xc)
    K._dropout_apply(xc.numpy(), *args, out.numpy())
    return out


def _check_keyed(x: torch.Tensor, key: int | None, ids) -> bool:
    if key is None:
        return False
    if ids is None or len(ids) != x.shape[0] or x.dim() != 2:
        raise ValueError(
            f"keyed dropout needs a 2-D input and one id per row, got shape {tuple(x.shape)} "
            f"and {None if ids is None else len(ids)} ids"
        )
    return True


def _stream(key: int | None, ids) -> tuple[int, np.ndarray]:
    """The kernel's seed and row keys: the layer key and the ids when keyed, else a seed
    drawn from torch's generator and the row positions."""
    if key is not None:
        return key, _ids_array(ids)
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64)), _NO_IDS


def _torch_keyed(x: torch.Tensor, p: float, key: int, ids) -> torch.Tensor:
    t = ids if isinstance(ids, torch.Tensor) else torch.from_numpy(_ids_array(ids))
    mask = keyed_mask(t.to(x.device), key, x.shape[1], p)
    return x * mask.to(x.dtype) * (1.0 / (1.0 - p))


def dropout_seed() -> int:
    """A seed for :func:`dropout_into`, drawn from torch's default generator as
    :func:`dropout`'s unkeyed mask draws its own."""
    return _stream(None, None)[0]


def dropout_into(x: np.ndarray, p: float, seed: int, out: np.ndarray) -> None:
    """``out = x * mask / (1 - p)`` for a float32 numpy matrix with :func:`dropout`'s
    unkeyed mask of ``seed`` (row ``i``'s key is ``i``); the same call on the gradient of
    ``out`` gives ``x``'s. For kernels that drop out inside their own autograd function."""
    K._dropout_apply(x, *_kernel_args(p, seed), _NO_IDS, out)


def dropout(
    x: torch.Tensor,
    p: float,
    training: bool,
    *,
    key: int | None = None,
    ids: np.ndarray | torch.Tensor | None = None,
) -> torch.Tensor:
    """Dropout with probability ``p`` when ``training``; identity otherwise. With ``key``
    (a :func:`layer_key`) and ``ids`` (one id per row) the mask is keyed (module docstring)."""
    if not training or p == 0.0:
        return x
    keyed = _check_keyed(x, key, ids)
    if x.dtype != torch.float32 or x.device.type != "cpu" or x.dim() != 2:
        return _torch_keyed(x, p, key, ids) if keyed else F.dropout(x, p, training)
    return _FastDropout.apply(x, p, *_stream(key, ids))


class _FastReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int, ids: np.ndarray) -> torch.Tensor:
        args = _kernel_args(p, seed)
        xc = x.contiguous()
        out = torch.empty_like(xc)
        K._relu_dropout(xc.numpy(), *args, ids, out.numpy())
        ctx.save_for_backward(out)
        ctx.scale = args[2]
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        g = grad.contiguous()
        res = torch.empty_like(g)
        K._masked_scale(g.numpy(), out.numpy(), ctx.scale, res.numpy())
        return res, None, None, None


def relu_dropout(
    x: torch.Tensor,
    p: float,
    training: bool,
    *,
    key: int | None = None,
    ids: np.ndarray | torch.Tensor | None = None,
) -> torch.Tensor:
    """``dropout(relu(x))`` in one pass over the data (the same mask as :func:`dropout`)."""
    if not training or p == 0.0 or x.dtype != torch.float32 or x.device.type != "cpu":
        return dropout(F.relu(x), p, training, key=key, ids=ids)
    _check_keyed(x, key, ids)
    if x.dim() != 2:
        return F.dropout(F.relu(x), p, training)
    return _FastReluDropout.apply(x, p, *_stream(key, ids))
