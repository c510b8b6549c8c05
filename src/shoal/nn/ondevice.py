"""A model on a device, called with host tensors: ``on_device(model, device)``.

Exact layer-wise inference (``shoal.training.inference``, ``shoal.distributed.evaluate``) and
the full-graph engines move rows between disk, numpy buffers and other ranks on the host. To
run their arithmetic on a GPU without teaching each of them about devices, they call the
model through this wrapper: every call (``forward``, ``layer_forward``, the functions of
``inference_split`` and ``sum_layer``) copies its tensor and block arguments to the model's
device and returns its result on the host. On the CPU :func:`on_device` returns the model
itself, so nothing changes there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from shoal.graph.blocks import Block
from shoal.nn.base import SumLayer

__all__ = ["HostCalls", "on_device"]

_HOST = torch.device("cpu")


def _to(a: Any, device: torch.device) -> Any:
    if torch.is_tensor(a) or isinstance(a, Block):
        return a.to(device, non_blocking=True)
    if isinstance(a, list | tuple):
        return type(a)(_to(v, device) for v in a)
    return a


def _host(fn: Callable | None, device: torch.device) -> Callable | None:
    """``fn`` taking and returning host tensors, computing on ``device``."""
    if fn is None:
        return None

    def call(*args: Any) -> Any:
        out = fn(*(_to(a, device) for a in args))
        # blocking: the caller reads the rows at once (numpy, numba), so the copy must be done
        return out.to(_HOST) if torch.is_tensor(out) else out

    return call


class HostCalls(nn.Module):
    """``model`` (on ``device``) behind calls that take and return host tensors; exposes the
    layer interface of shoal's ``BlockGNN`` (``num_layers``, ``layer_forward``,
    ``inference_split``, ``sum_layer``) only where the model has it, so callers that test
    for it with ``hasattr`` choose the same path as for the bare model."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        super().__init__()
        self.inner = model
        self.device = torch.device(device)
        self.training = model.training

    def forward(self, x: torch.Tensor, blocks: Any, *rest: Any) -> Any:
        return _host(self.inner, self.device)(x, blocks, *rest)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            pass
        inner = super().__getattr__("inner")
        attr = getattr(inner, name)  # AttributeError when the model lacks it, as hasattr wants
        device = self.__dict__.get("device", _HOST)
        if name == "layer_forward":
            return _host(attr, device)
        if name == "inference_split":
            return lambda layer: tuple(_host(f, device) for f in attr(layer))
        if name == "sum_layer":
            return lambda layer: _host_sum_layer(attr(layer), device)
        return attr


def _host_sum_layer(sl: SumLayer | None, device: torch.device) -> SumLayer | None:
    if sl is None:
        return None
    return SumLayer(
        message=_host(sl.message, device),
        finish=_host(sl.finish, device),
        width=sl.width,
        pre=_host(sl.pre, device),
        linear=sl.linear,
        scale=sl.scale,  # elementwise on the host's degrees: no parameter on the device
    )


def on_device(model: nn.Module, device: torch.device | str) -> nn.Module:
    """``model`` (already on ``device``) callable with host tensors; the model itself when
    ``device`` is the CPU."""
    device = torch.device(device)
    return model if device.type == "cpu" else HostCalls(model, device)
