"""Weighted averaging of models and optimizer states over ranks (SDT-GNN's model averaging).

``theta <- sum_r (n_r / sum_s n_s) * theta_r``, one all-reduce of every parameter (and of
Adam's moments), each rank weighted by its training-node count ``n_r``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from shoal.errors import ShoalInputError

__all__ = [
    "PartModels",
    "average_optimizer_state_",
    "average_saved_ranks",
    "broadcast_local_",
    "combine_local_",
    "weighted_average_",
]


def weighted_average_(
    module: torch.nn.Module, weight: float, *, group: Any = None
) -> tuple[float, int]:
    """Replace every parameter and floating buffer by the average over ranks weighted by
    ``weight`` (this rank's training-node count). Collective; returns ``(total weight, bytes
    all-reduced)``. A rank with weight 0 receives the others' average. ``group``: the
    process group of the model's tensors (default: the default group; NCCL for GPU
    tensors, ``DistContext.model_group``)."""
    w = torch.tensor([float(weight)], dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(w)
    total = float(w.item())
    if total <= 0:
        raise ShoalInputError(
            "no rank has training nodes to average over", fix="check the store's train split"
        )
    tensors = _tensors(module)
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors]) * (weight / total)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flat, group=group)
    pos = 0
    for t in tensors:
        k = t.numel()
        t.copy_(flat[pos : pos + k].view_as(t).to(t.dtype))
        pos += k
    return total, int(sum(t.numel() * t.element_size() for t in tensors))


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [
        v
        for st in optimizer.state.values()
        for k, v in sorted(st.items())
        if torch.is_tensor(v) and torch.is_floating_point(v) and k != "step"
    ]


def _init_adam_state(optimizer: torch.optim.Optimizer) -> None:
    """Create Adam's state as its first step would (zero moments, step 0) for every
    parameter that has none, so a rank that never stepped joins the average with zeros."""
    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        raise RuntimeError(
            f"cannot average the state of {type(optimizer).__name__} on a rank that has not "
            "stepped yet (only Adam/AdamW state can be created empty)"
        )
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not optimizer.state.get(p):
                optimizer.state[p] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
                if group.get("amsgrad"):
                    optimizer.state[p]["max_exp_avg_sq"] = torch.zeros_like(p)


def average_optimizer_state_(
    optimizer: torch.optim.Optimizer, weight: float, *, group: Any = None
) -> int:
    """Average every floating tensor of the optimizer state (Adam's moments) over ranks,
    weighted like the parameters. Collective on every rank, including a rank that has not
    stepped yet (its parts have no training nodes): it joins with zero moments and weight 0,
    and receives the others' average. Returns the bytes all-reduced."""
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    tensors = _state_tensors(optimizer)
    size = torch.tensor([float(sum(t.numel() for t in tensors))], dtype=torch.float64)
    if distributed:
        dist.all_reduce(size, op=dist.ReduceOp.MAX)
    if size.item() == 0:
        return 0  # no rank has stepped: nothing to average (every rank returns here)
    if not tensors:
        _init_adam_state(optimizer)
        tensors = _state_tensors(optimizer)
    if sum(t.numel() for t in tensors) != int(size.item()):
        raise RuntimeError("optimizer states of the ranks differ in size; cannot average them")
    w = torch.tensor([float(weight)], dtype=torch.float64)
    if distributed:
        dist.all_reduce(w)
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors]) * (weight / float(w))
    if distributed:
        dist.all_reduce(flat, group=group)
    pos = 0
    for t in tensors:
        t.copy_(flat[pos : pos + t.numel()].view_as(t).to(t.dtype))
        pos += t.numel()
    return int(sum(t.numel() * t.element_size() for t in tensors))


def _weighted_into(lists: list[list[torch.Tensor]], weights: list[float], total: float) -> None:
    """``lists[0][i] <- sum_m weights[m] / total * lists[m][i]`` (in float64)."""
    for i, dst in enumerate(lists[0]):
        acc = torch.zeros_like(dst, dtype=torch.float64)
        for ts, w in zip(lists, weights, strict=True):
            acc.add_(ts[i].to(torch.float64), alpha=w / total)
        dst.copy_(acc.to(dst.dtype))


def _tensors(m: torch.nn.Module) -> list[torch.Tensor]:
    return [p.data for p in m.parameters()] + [b for b in m.buffers() if torch.is_floating_point(b)]


def combine_local_(
    models: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer],
    weights: list[float],
    *,
    moments: bool = True,
) -> float:
    """Average this rank's per-part models (and Adam moments) into ``models[0]`` /
    ``optimizers[0]``, weighted by ``weights`` (each part's training nodes); local, no
    communication. Returns the rank's total weight (for :func:`weighted_average_`). With a
    total of 0 the first model is left as it is (the rank joins the global average with
    weight 0)."""
    total = float(sum(weights))
    if total <= 0 or len(models) == 1:
        return total
    _weighted_into([_tensors(m) for m in models], weights, total)
    if moments:
        for o in optimizers:
            if not _state_tensors(o):
                _init_adam_state(o)
        _weighted_into([_state_tensors(o) for o in optimizers], weights, total)
    return total


def broadcast_local_(
    models: list[torch.nn.Module], optimizers: list[torch.optim.Optimizer], *, moments: bool = True
) -> None:
    """Copy ``models[0]`` (and its Adam moments) into every other per-part model."""
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    if moments:
        src = _state_tensors(optimizers[0])
        for o in optimizers[1:]:
            if not _state_tensors(o):
                _init_adam_state(o)
            for a, b in zip(_state_tensors(o), src, strict=True):
                a.copy_(b)


def _mean(tensors: list[torch.Tensor], w: list[float]) -> torch.Tensor:
    if not tensors[0].is_floating_point():
        return tensors[0]
    out = torch.zeros_like(tensors[0], dtype=torch.float64)
    for t, x in zip(tensors, w, strict=True):
        out += x * t.to(torch.float64)
    return out.to(tensors[0].dtype)


def _rank_models(st: dict[str, Any]) -> tuple[list[dict], list[dict], list[float]]:
    """A saved rank's models, optimizer states and their weights: its own model and, with one
    model per part, every other part's (``part_models``), weighted by their parts' training
    nodes (``part_weights``; the rank's ``weight`` shared equally where a checkpoint of an
    older version did not record them)."""
    models = [st["model"], *(m for m, _ in st.get("part_models") or [])]
    optims = [st["optimizer"], *(o for _, o in st.get("part_models") or [])]
    w = st.get("part_weights")
    if w is None or len(w) != len(models):
        w = [float(st.get("weight", 1.0)) / len(models)] * len(models)
    return models, optims, [float(x) for x in w]


def average_saved_ranks(state: dict[str, Any], *, moments: bool) -> dict[str, Any]:
    """A checkpoint saved by another number of processes (``state["peers"]``, every saved
    rank's state, :meth:`shoal.training.checkpoint.Checkpointer.load`) as one averaging round
    would leave it: every saved model (each rank's and, with ``--part-models``, each of its
    parts' models) averaged, weighted by its training nodes, and with ``moments`` Adam's
    moments alike (a part model that has not stepped yet counts with zero moments, as
    :func:`combine_local_` counts it). A checkpoint taken mid-round (``--average-every`` > 1)
    so loses no part's training. Every rank of the new world continues from it; the per-part
    models restart from it as after any round."""
    models: list[dict] = []
    optims: list[dict] = []
    w: list[float] = []
    for st in state["peers"]:
        m, o, x = _rank_models(st)
        models, optims, w = models + m, optims + o, w + x
    if sum(w) <= 0:
        w = [1.0] * len(models)
    w = [x / sum(w) for x in w]
    model = {k: _mean([sd[k] for sd in models], w) for k in models[0]}
    optimizer = state["optimizer"]
    if moments:
        optimizer = {**optimizer, "state": {}}
        for k, st0 in state["optimizer"]["state"].items():
            merged = dict(st0)
            for name, t in st0.items():
                if torch.is_tensor(t) and t.is_floating_point() and name != "step":
                    merged[name] = _mean(
                        [o["state"].get(k, {}).get(name, torch.zeros_like(t)) for o in optims], w
                    )
            optimizer["state"][k] = merged
    return {**state, "model": model, "optimizer": optimizer, "part_models": []}


class PartModels:
    """A rank's models: one per part (SDT-GNN Sec. III-C, ``per_part``) or one carried
    through its parts in turn. ``models[0]`` / ``optimizers[0]`` are the engine's own (the
    ones its checkpoint saves); the others are copies of it, each with its own optimizer
    (``make_optimizer(model)``)."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        num_parts: int,
        *,
        per_part: bool,
        make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer],
    ) -> None:
        self.models, self.optimizers = [model], [optimizer]
        if per_part:
            for _ in range(max(num_parts, 1) - 1):
                m = copy.deepcopy(model)
                self.models.append(m)
                self.optimizers.append(make_optimizer(m))

    def __getitem__(self, i: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """Part ``i``'s model and optimizer (the one model when carried)."""
        j = i if len(self.models) > 1 else 0
        return self.models[j], self.optimizers[j]

    def average(
        self, part_weights: list[float], weight: float, *, group: Any, moments: bool
    ) -> int:
        """One averaging round (collective): the parts' models (and, with ``moments``, Adam's
        moments) combined on the rank with ``part_weights`` (each part's training nodes),
        then averaged over the ranks with ``weight`` (the rank's), then copied back into every
        part's model. Returns the bytes all-reduced."""
        combine_local_(self.models, self.optimizers, part_weights, moments=moments)
        _, nbytes = weighted_average_(self.models[0], weight, group=group)
        if moments:
            nbytes += average_optimizer_state_(self.optimizers[0], weight, group=group)
        broadcast_local_(self.models, self.optimizers, moments=moments)
        return nbytes

    def weights(self, part_weights: list[float]) -> list[float]:
        """The weight of each model (``models[i]``: part ``i``'s training nodes; the one
        carried model: all of the rank's), as a checkpoint records them."""
        return list(part_weights) if len(self.models) > 1 else [float(sum(part_weights))]

    def state(self) -> list[tuple[dict, dict]]:
        """The per-part models and optimizers beyond the first (empty when carried)."""
        return [
            (m.state_dict(), o.state_dict())
            for m, o in zip(self.models[1:], self.optimizers[1:], strict=True)
        ]

    def load(self, saved: list, *, resharded: bool, moments: bool) -> None:
        """:meth:`state`'s output; after a resharded load (or with nothing saved) every part
        restarts from ``models[0]``, as after an averaging round."""
        if resharded or (not saved and len(self.models) > 1):
            broadcast_local_(self.models, self.optimizers, moments=moments)
            return
        for (ms, os_), m, o in zip(saved, self.models[1:], self.optimizers[1:], strict=False):
            m.load_state_dict(ms)
            o.load_state_dict(os_)
