"""The automatic plan: pick the engine from this machine's probed costs (``--engine auto``,
``shoal plan --store S --workers N``).

From :func:`~shoal.engines.probe.probe_machine`'s measurements and the store's sizes,
:func:`estimate` gives each engine's training-epoch time on ``N`` workers, split into phases,
by the engine's own estimate (``shoal.engines.<name>.costs``, registered in its
:class:`~shoal.engines.spec.EngineSpec`; the shared pieces in :mod:`shoal.engines.costs`).
The cheapest engine that can run the configuration is chosen; ``candidates`` restricts the
choice, as an epoch is not the same amount of training in every engine
(docs/distributed.md#choosing-an-engine-automatically).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shoal.engines.costs import CostInputs
from shoal.engines.probe import MachineCosts
from shoal.engines.registry import engine_names, get_spec
from shoal.store.reader import Store
from shoal.training import TrainConfig

__all__ = ["AutoPlan", "auto_candidates", "choose", "estimate", "plan_engine"]


@dataclass(kw_only=True)
class AutoPlan:
    """The choice, each candidate's estimated epoch (seconds, and its split), the reasons
    some could not run, and the probed costs."""

    engine: str
    workers: int
    estimates: dict[str, dict[str, float]]
    excluded: dict[str, str] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    parts_per_worker: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def reasons(self) -> list[str]:
        """One line per candidate, cheapest first, then the excluded ones."""
        lines = []
        for name, e in sorted(self.estimates.items(), key=lambda kv: kv[1]["epoch_s"]):
            split = ", ".join(f"{k} {v:.3g}" for k, v in e.items() if k != "epoch_s" and v)
            mark = "->" if name == self.engine else "  "
            lines.append(f"{mark} {name}: {e['epoch_s']:.3g} s per epoch ({split})")
        lines += [f"   {name}: not a candidate ({why})" for name, why in self.excluded.items()]
        return lines


def auto_candidates() -> tuple[str, ...]:
    """The engines with a cost estimate, in the registry's order (the preference on a tie)."""
    return tuple(n for n in engine_names() if get_spec(n).estimate is not None)


def estimate(
    store: Store,
    config: TrainConfig,
    costs: MachineCosts,
    workers: int,
    *,
    params: int,
    widths: list[int],
    memory_per_worker: int | None = None,
) -> dict[str, dict[str, float]]:
    """Each engine's estimated training epoch on ``workers`` ranks (its spec's
    ``estimate``); ``memory_per_worker``: the budget deciding whether a rank's rows are
    gathered from memory (None: always with direct reads)."""
    return _estimates(
        CostInputs(
            store=store,
            config=config,
            costs=costs,
            workers=workers,
            params=params,
            widths=widths,
            memory_per_worker=memory_per_worker,
        )
    )


def _estimates(x: CostInputs) -> dict[str, dict[str, float]]:
    out = {}
    for name in auto_candidates():
        e = get_spec(name).estimate(x)
        if e is not None:
            out[name] = e
    return out


def _excluded(x: CostInputs) -> dict[str, str]:
    why = {}
    for name in auto_candidates():
        spec = get_spec(name)
        reason = spec.excluded(x) if spec.excluded is not None else None
        if reason:
            why[name] = reason
    if x.store.num_parts < x.workers:
        for name in auto_candidates():
            why.setdefault(name, f"{x.store.num_parts} parts for {x.workers} workers")
    return why


def choose(
    store: Store,
    config: TrainConfig,
    costs: MachineCosts,
    workers: int,
    *,
    params: int,
    widths: list[int],
    candidates: tuple[str, ...] | None = None,
    memory_per_worker: int | None = None,
) -> AutoPlan:
    """The cheapest runnable engine among ``candidates`` (default: every engine with a cost
    estimate, :func:`auto_candidates`)."""
    every = auto_candidates()
    candidates = every if candidates is None else tuple(candidates)
    unknown = set(candidates) - set(every)
    if unknown:
        raise ValueError(
            f"unknown candidate engines {sorted(unknown)}; valid names: {', '.join(every)}"
        )
    x = CostInputs(
        store=store,
        config=config,
        costs=costs,
        workers=workers,
        params=params,
        widths=widths,
        memory_per_worker=memory_per_worker,
    )
    est = _estimates(x)
    excluded = {k: v for k, v in _excluded(x).items() if k in candidates}
    excluded.update({k: "not among the candidates" for k in every if k not in candidates})
    ok = {k: v for k, v in est.items() if k not in excluded}
    if not ok:
        raise ValueError(
            "no engine can run this configuration: "
            + "; ".join(f"{k}: {v}" for k, v in excluded.items())
        )
    best = min(ok, key=lambda k: (ok[k]["epoch_s"], every.index(k)))
    return AutoPlan(
        engine=best,
        workers=workers,
        estimates=ok,
        excluded=excluded,
        costs=costs.to_dict(),
        parts_per_worker=store.num_parts / workers,
    )


def plan_engine(
    store: Store,
    config: TrainConfig,
    workers: int,
    *,
    network: str | None = None,
    candidates: tuple[str, ...] | None = None,
    ctx: Any = None,
    scratch: str | None = None,
    memory_per_worker: int | None = None,
) -> AutoPlan | None:
    """Probe this machine for ``config`` on ``store`` and :func:`choose` among ``candidates``
    for ``workers`` ranks. In a run (``ctx``: its process group; a collective, the plan is
    returned on rank 0, None elsewhere) every rank probes at once
    (:func:`~shoal.engines.probe.probe_in_group`); otherwise, with ``network`` loopback and
    several workers, they are started here to probe the same way
    (:func:`~shoal.engines.probe.spawn_probe`, result file in ``scratch``), and with a given
    rate one process probes alone (the workers are on other machines). ``memory_per_worker``
    (default ``--memory``, else this machine's share per worker) decides whether a rank's
    rows are gathered from memory."""
    import tempfile

    from shoal.engines.probe import probe_in_group, probe_machine, spawn_probe
    from shoal.training.presets import resolve_for_data

    train = sum(int(p.get("train", 0)) for p in store.meta["parts"])
    config = resolve_for_data(
        config,
        train_nodes=train,
        ranks=workers,
        features=store.part(0).features if store.num_parts else None,
    )
    if ctx is not None:
        costs = probe_in_group(store, config, ctx)
        if ctx.rank != 0:
            return None
    elif workers > 1 and network in (None, "loopback"):
        costs = spawn_probe(str(store.path), config, workers, scratch or tempfile.gettempdir())
    else:
        costs = probe_machine(store, config, network=network)
    width = int(store.feature_dim or 1)
    widths = costs.widths or [width] + [config.model.hidden] * (config.num_layers - 1) + [2]
    if memory_per_worker is None:  # the budget an engine's rank takes by default
        from shoal.rows.budget import memory_limit

        memory_per_worker = config.memory.limit_bytes or memory_limit(workers)[0]
    return choose(
        store,
        config,
        costs,
        workers,
        params=costs.params,
        widths=widths,
        candidates=candidates,
        memory_per_worker=memory_per_worker,
    )
