"""Devices: parse ``--device``, check it exists, and carry every random stream of a run.

``--device`` takes ``cpu``, ``cuda`` (in a distributed run: the GPU of the process's local
rank, as torchrun's ``LOCAL_RANK`` numbers them; else GPU 0) or ``cuda:i`` (GPU ``i``), the
device strings of ``torch.device``. Asking for CUDA where torch sees none is an input error
that names the fix, never a silent fall-back to the CPU.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from shoal.errors import ShoalInputError

__all__ = [
    "DEVICE_PATTERN",
    "check_device_spec",
    "device_key",
    "get_rng_states",
    "resolve_device",
    "set_rng_states",
    "use_device",
]

#: the accepted spellings of ``--device``
DEVICE_PATTERN = re.compile(r"^(cpu|cuda(:\d+)?)$")


def check_device_spec(spec: str) -> str:
    """``spec`` if it is ``cpu``, ``cuda`` or ``cuda:i``; ValueError otherwise."""
    if not isinstance(spec, str) or not DEVICE_PATTERN.match(spec):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:<index>', got {spec!r}")
    return spec


def resolve_device(spec: str, *, local_rank: int | None = None) -> torch.device:
    """The ``torch.device`` of ``spec`` on this machine. ``cuda`` is GPU ``local_rank``
    (modulo the GPUs present; default 0); ``cuda:i`` is GPU ``i``. Raises
    :class:`~shoal.errors.ShoalInputError` when CUDA is asked for and absent, or the index
    is out of range."""
    check_device_spec(spec)
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise ShoalInputError(
            f"--device {spec}: torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"{build})",
            fix="use --device cpu, or install a CUDA build of torch on a machine with a GPU "
            "(README: Installing on a GPU machine)",
        )
    count = torch.cuda.device_count()
    if spec == "cuda":
        return torch.device("cuda", (local_rank or 0) % count)
    index = int(spec.split(":")[1])
    if index >= count:
        raise ShoalInputError(
            f"--device {spec}: this machine has {count} GPU(s)",
            fix=f"use cuda:0 .. cuda:{count - 1}, or cuda",
        )
    return torch.device("cuda", index)


def use_device(spec: str, *, local_rank: int | None = None) -> torch.device:
    """:func:`resolve_device`, made the current CUDA device when it is a GPU (so pinned
    buffers and streams do not open a context on GPU 0 for a run on GPU ``i``)."""
    device = resolve_device(spec, local_rank=local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        _load_device_libraries(device)
    return device


def _load_device_libraries(device: torch.device) -> None:
    """One small matrix product, forward and backward, on ``device``: the CUDA context and
    the BLAS libraries torch loads on first use are resident before a memory plan measures
    the process's footprint: loaded later, they would raise the process's memory far above
    its measured reserve (docs/measurements.md#gpu-runs)."""
    a = torch.ones(16, 16, device=device, requires_grad=True)
    (a @ a).sum().backward()
    torch.cuda.synchronize(device)


def device_key(device: torch.device) -> str:
    """What tells two processes' devices apart across a machine: the GPU's UUID (the index
    alone repeats when each process sees only its own GPU, as under a per-rank
    ``CUDA_VISIBLE_DEVICES``), ``"cpu"`` for the host."""
    if device.type != "cuda":
        return "cpu"
    return str(torch.cuda.get_device_properties(device).uuid)


def get_rng_states(device: torch.device | str = "cpu") -> dict[str, Any]:
    """torch's random state: the CPU generator, and the CUDA generator of ``device`` when it
    is a GPU (dropout on the GPU draws from it). For a checkpoint."""
    device = torch.device(device)
    states: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(
    states: dict[str, Any] | torch.Tensor, device: torch.device | str = "cpu"
) -> None:
    """Restore :func:`get_rng_states`'s output (or a bare CPU state, as older checkpoints
    hold). A CUDA state is restored only when the run is on a GPU again."""
    if torch.is_tensor(states):
        torch.set_rng_state(states)
        return
    torch.set_rng_state(states["cpu"])
    device = torch.device(device)
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)
