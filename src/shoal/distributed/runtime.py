"""Process-group runtime shared by every distributed engine.

Reads the environment ``torchrun`` sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``; :func:`shoal.distributed.launch.launch_local` runs its
launcher in-process) and opens a process group with ``init_method="env://"``: gloo on CPU,
nccl when CUDA is present, every collective with a finite timeout. Without those variables
:func:`process_group` opens a one-process group over an in-memory store; it destroys the group
on every exit path (docs/distributed.md#runtime-pieces-shoaldistributed).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from shoal.distributed.liveness import Heartbeat, describe_failure, is_comm_failure
from shoal.errors import ShoalInputError, ShoalPeerLostError
from shoal.rows.budget import memory_cgroup
from shoal.utils.device import check_device_spec, device_key, use_device

__all__ = [
    "local_peers",
    "nccl_group",
    "DistConfig",
    "DistContext",
    "Rank0Filter",
    "env_world",
    "process_group",
]

log = logging.getLogger(__name__)

BACKENDS = ("gloo", "nccl")


@dataclass(kw_only=True)
class DistConfig:
    """How to open the process group.

    Args:
        backend: the default group's backend, ``"gloo"`` or ``"nccl"``; default ``None`` =
            gloo: the engines exchange ids and rows as host tensors.
        device: where this process's model computes: ``"cpu"``, ``"cuda"`` (the GPU of the
            local rank) or ``"cuda:i"`` (default ``"cpu"``). On a GPU with a gloo default
            group a second group over NCCL (``DistContext.model_group``) all-reduces the
            model's device tensors (gradients, averaged weights).
        timeout_s: timeout of every collective and of the rendezvous, in seconds (default
            300). A rank that dies makes the others fail after at most this long instead of
            hanging (torchrun normally kills them sooner).
        threads: intra-op threads per process (``torch.set_num_threads``); default ``None``
            leaves torch's setting (torchrun sets ``OMP_NUM_THREADS=1``).
    """

    backend: str | None = None
    timeout_s: float = 300.0
    threads: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device_spec(self.device)
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS} or None, got {self.backend!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")


@dataclass(frozen=True)
class DistContext:
    """The running process's place in the group."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    #: the group for collectives on the model's tensors (None: the default group)
    model_group: Any = None
    #: the timeout of every collective, in seconds
    timeout_s: float = 300.0

    def __post_init__(self) -> None:  # device None (hand-made contexts): the CPU
        object.__setattr__(self, "device", torch.device(self.device or "cpu"))

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (nothing to wait for in a world of one)."""
        if self.world_size > 1:
            dist.barrier()


def nccl_group(device: torch.device, ranks: list[int], *, timeout_s: float) -> Any:
    """A group of ``ranks`` over NCCL for the model's GPU tensors, or None (use gloo, which
    also all-reduces GPU tensors, staging them on the host) when one of them is not on a GPU
    or two of them share one (NCCL refuses that; GPUs are told apart by UUID). Collective
    on every rank of the default group, also those outside ``ranks``."""
    world = dist.get_world_size()
    keys: list = [None] * world
    dist.all_gather_object(keys, (socket.gethostname(), device_key(device)))
    mine = [keys[r] for r in ranks]
    if any(k[1] == "cpu" for k in mine) or len(ranks) < 2:
        return None
    if len(set(mine)) < len(mine):
        log.warning(
            "ranks %s share GPUs (%d distinct): the model's tensors are all-reduced over "
            "gloo; give each rank its own GPU for NCCL",
            ranks,
            len(set(mine)),
        )
        return None
    return dist.new_group(ranks, backend="nccl", timeout=datetime.timedelta(seconds=timeout_s))


def _open_device(spec: str, local: int, world: int) -> torch.device:
    """This rank's device (collective when ``world > 1``): when any rank cannot open its
    device every rank raises, instead of the others waiting in the next collective."""
    error = None
    try:
        device = use_device(spec, local_rank=local)
    except ShoalInputError as e:
        error, device = e, torch.device("cpu")
    if world > 1:
        ok = torch.tensor([0 if error else 1], dtype=torch.int64)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if not int(ok.item()) and error is None:
            raise ShoalInputError(
                "another rank could not open its --device",
                fix="see that rank's error; every machine needs the device",
            )
    if error is not None:
        raise error
    return device


def local_peers(ctx: DistContext) -> tuple[int, int]:
    """``(ranks on this machine, ranks in this process's memory cgroup on this machine)``,
    this rank included (collective): who shares the machine's memory and the cgroup's limit
    (:func:`shoal.rows.budget.memory_limit`)."""
    me = (socket.gethostname(), memory_cgroup())
    if ctx.world_size == 1:
        return 1, 1
    everyone: list = [None] * ctx.world_size
    dist.all_gather_object(everyone, me)
    host = sum(1 for h, _ in everyone if h == me[0])
    return host, sum(1 for x in everyone if tuple(x) == me)


def env_world() -> tuple[int, int, int] | None:
    """``(rank, world_size, local_rank)`` from torchrun's environment, or None outside it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world, local


class Rank0Filter(logging.Filter):
    """Drops records below WARNING on ranks other than 0 (so a run logs once, not N times)."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        return self.rank == 0 or record.levelno >= logging.WARNING


@contextmanager
def process_group(config: DistConfig | None = None) -> Iterator[DistContext]:
    """Open the process group described by torchrun's environment; always destroy it.

    Usage::

        with process_group(DistConfig()) as ctx:
            ... ctx.rank, ctx.world_size ...

    Outside torchrun (no ``RANK``/``WORLD_SIZE``) a world of one process is opened over an
    in-memory store. If a group is already initialised it is reused and left open.
    """
    cfg = config or DistConfig()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    backend = cfg.backend or "gloo"
    timeout = datetime.timedelta(seconds=cfg.timeout_s)
    owned = False
    handler_filter: Rank0Filter | None = None
    t0 = time.monotonic()
    try:
        if dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
            local = int(os.environ.get("LOCAL_RANK", rank))
            backend = str(dist.get_backend())
        else:
            env = env_world()
            if env is None:
                rank, world, local = 0, 1, 0
                dist.init_process_group(
                    backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
                )
            else:
                rank, world, local = env
                dist.init_process_group(
                    backend, init_method="env://", rank=rank, world_size=world, timeout=timeout
                )
            owned = True
        spec = "cuda" if backend == "nccl" and cfg.device == "cpu" else cfg.device
        device = _open_device(spec, local, world)
        model_group = None
        if device.type == "cuda" and backend != "nccl" and world > 1:
            model_group = nccl_group(device, list(range(world)), timeout_s=cfg.timeout_s)
        handler_filter = Rank0Filter(rank)
        for h in logging.getLogger().handlers:
            h.addFilter(handler_filter)
        ctx = DistContext(
            rank=rank,
            world_size=world,
            local_rank=local,
            backend=backend,
            device=device,
            model_group=model_group,
            timeout_s=cfg.timeout_s,
        )
        log.debug("rank %d/%d up (backend %s, device %s)", rank, world, backend, device)
        heartbeat = Heartbeat(rank, world).start() if owned and world > 1 else None
        try:
            yield ctx
        except BaseException as e:
            if world > 1 and not isinstance(e, (KeyboardInterrupt, SystemExit)):
                if is_comm_failure(e):  # a peer is gone: say which, in one line
                    raise describe_failure(
                        e, rank=rank, heartbeat=heartbeat, timeout_s=cfg.timeout_s, started=t0
                    ) from e
                # say which rank failed before the teardown makes its peers fail too
                if not isinstance(e, ShoalPeerLostError):
                    print(
                        f"shoal: rank {rank} failed: {type(e).__name__}: {e}",
                        file=sys.stderr,
                        flush=True,
                    )
            raise
        finally:
            if heartbeat is not None:
                heartbeat.stop()
    finally:
        if handler_filter is not None:
            for h in logging.getLogger().handlers:
                h.removeFilter(handler_filter)
        if owned and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # pragma: no cover - teardown after a failed peer
                print(f"shoal: destroy_process_group failed: {e}", file=sys.stderr)
