"""SplitMix64 on int64 torch tensors: the same bits as the numba kernels' uint64 stream on any
device.

G. L. Steele, D. Lea, C. H. Flood, "Fast splittable pseudorandom number generators", OOPSLA
2014 (the ``mix64`` finaliser and the golden-gamma increment, constants of its Figure 1). torch
has no full uint64 arithmetic on every device, so the bits live in int64 tensors: addition and
multiplication wrap as uint64's do in two's complement, and a right shift is made logical by
masking the sign's copies away (:func:`lsr`). The numba twins are
:func:`shoal.sample._kernels._mix64` and :func:`shoal.nn._kernels._mix64`.
"""

from __future__ import annotations

import torch

__all__ = ["GOLDEN", "M1", "M2", "below", "lsr", "mix64", "signed"]

#: SplitMix64's increment and finaliser multipliers (as unsigned Python ints)
GOLDEN = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB


def signed(v: int) -> int:
    """The uint64 ``v`` as the int64 with the same bits."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def lsr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift by ``s`` (1-63) of int64 tensors holding uint64 bits."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser, element-wise."""
    z = (z ^ lsr(z, 30)) * signed(M1)
    z = (z ^ lsr(z, 27)) * signed(M2)
    return z ^ lsr(z, 31)


def below(bits: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """A number in ``[0, n)`` from 64 random bits (multiply-shift on the top 32 bits), as the
    sampler kernels' ``_below``; ``n`` below 2**31."""
    return (lsr(bits, 32) * n) >> 32
