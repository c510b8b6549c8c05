"""The automatic plan: pick the engine from this machine's probed costs (``--engine auto``,
``shoal plan --store S --workers N``).

From :func:`~shoal.engines.probe.probe_machine`'s measurements of one mini-batch on this
store (sampling, gather, compute), NeutronStar's per-dimension costs ``T_v`` and ``T_e`` and
the exchange bandwidth and latency, and the store's sizes (its ``meta.json``: part sizes,
halos, training nodes), :func:`estimate` gives each engine's training-epoch time on ``N``
workers, split into sampling, gather, compute and communication:

- ``minibatch`` (DistDGL): ``ceil(T / (B N))`` steps of sampling, gathering the batch's own
  rows, computing, pulling the halo share of the rows (and their neighbour lists: one round
  trip per hop) from their owners and all-reducing the gradients (probed, or a ring's
  ``2 P (N-1)/N`` floats); its batches are the part's grown by ``remote_scale`` (the owners
  expand the halo nodes);
- ``averaging`` (SDT-GNN): the part's own batches, every row local (parts carry their
  halos), and one all-reduce of the model (and of Adam's two moments with
  ``average_optimizer``) per ``average_every`` epochs;
- ``hec`` (DistGNN-MB): ``minibatch`` whose remote rows are the cached hidden-width embeddings
  instead of input features;
- ``disagg`` (Armada): ``ceil(N/2)`` batch workers sample and gather for ``N - ceil(N/2)``
  compute workers, which receive each batch's rows, and stream every part in once per epoch
  (its features and edge buckets, at the probed sequential read rate); the slower side sets
  the pace;
- ``fullgraph`` (NeutronStar): one pass of every layer over the largest rank's nodes (each
  probed layer scaled by the rank's core + halo rows over the probe's sources when it applies
  its linear map before aggregating -- GCN and SAGE narrowing the width -- else by its core
  nodes over the probe's), its rows read once, the mirrors' hidden rows
  exchanged forward and back at every layer above the input (DepComm; Hybrid caches only
  what is cheaper, so DepComm bounds it).

The cheapest engine that can run the configuration is chosen; the estimates and the reasons
are printed and recorded in the run JSON (``auto_plan``). An epoch is not the same amount of
training in every engine (``fullgraph`` takes one optimizer step per epoch, ``averaging``
averages models): ``candidates`` restricts the choice to the engines a user accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.engines.disagg import default_batch_workers
from shoal.engines.probe import MachineCosts
from shoal.store.reader import Store
from shoal.training import TrainConfig

__all__ = ["AUTO_CANDIDATES", "AutoPlan", "estimate", "choose"]

#: the engines the automatic plan considers, in the order of preference on a tie
AUTO_CANDIDATES = ("minibatch", "averaging", "hec", "disagg", "fullgraph")
#: share of a worker's memory its feature cache may take (the rest: structure, windows, model)
CACHE_SHARE = 0.5
#: models the fullgraph engine runs (it works layer by layer inside shoal's models)
FULLGRAPH_MODELS = ("gcn", "sage", "gin")


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
        return {
            "engine": self.engine,
            "workers": self.workers,
            "estimates": self.estimates,
            "excluded": self.excluded,
            "costs": self.costs,
            "parts_per_worker": self.parts_per_worker,
        }

    def reasons(self) -> list[str]:
        """One line per candidate, cheapest first, then the excluded ones."""
        lines = []
        for name, e in sorted(self.estimates.items(), key=lambda kv: kv[1]["epoch_s"]):
            split = ", ".join(f"{k} {v:.3g}" for k, v in e.items() if k != "epoch_s" and v)
            mark = "->" if name == self.engine else "  "
            lines.append(f"{mark} {name}: {e['epoch_s']:.3g} s per epoch ({split})")
        lines += [f"   {name}: not a candidate ({why})" for name, why in self.excluded.items()]
        return lines


def _net(nbytes: float, messages: float, c: MachineCosts) -> float:
    return nbytes / c.net_bytes_per_s + messages * c.net_latency_s


def _allreduce(params: int, n: int, c: MachineCosts) -> float:
    """One all-reduce of ``params`` floats over ``n`` ranks: probed when the probe ran with
    ``n`` ranks, else a ring's ``2 P (n-1)/n`` floats."""
    if n <= 1:
        return 0.0
    if c.allreduce_s is not None and c.ranks == n:
        return c.allreduce_s
    return _net(2 * 4 * params * (n - 1) / n, 2 * (n - 1), c)


def _split(steps: float, **parts: float) -> dict[str, float]:
    out = {k: steps * v for k, v in parts.items()}
    out["epoch_s"] = sum(out.values())
    return out


def store_bytes(store: Store) -> int:
    """The store's feature rows and neighbour lists (what the disagg engine's batch workers
    read once per epoch, every part resident in turn)."""
    item = np.dtype(store.meta.get("feature_dtype") or "float32").itemsize
    edge = np.dtype(store.meta.get("edge_dtype") or "int64").itemsize
    return store.num_nodes * int(store.feature_dim or 0) * item + store.num_edges * edge


def _fullgraph(
    store: Store, config: TrainConfig, c: MachineCosts, widths: list[int], n: int, params: int
) -> dict[str, float]:
    """The largest rank's epoch: its parts' nodes and edges through every layer."""
    parts = store.meta["parts"]
    per_rank = [[p for j, p in enumerate(parts) if j % n == r] for r in range(n)]
    core = max(sum(p["num_core"] for p in ps) for ps in per_rank)
    halo = max(sum(p["num_halo"] for p in ps) for ps in per_rank)
    compute = 0.0
    for i, t in enumerate(c.layer_s):  # each probed layer scaled to the rank's rows
        on_sources = config.model in ("gcn", "sage") and widths[i + 1] < widths[i]
        compute += (
            t * (core + halo) / max(c.layer_sources, 1)
            if on_sources
            else t * core / max(c.layer_nodes, 1)
        )
    row_s = c.gather_s / max(c.batch_rows, 1.0)
    comm = 0.0
    if n > 1:
        hidden_bytes = sum(4 * w for w in widths[1:-1])
        comm = _net(2 * halo * hidden_bytes, 2 * (len(widths) - 2) * (n - 1), c)
    return _split(
        1.0,
        gather=(core + halo) * row_s,
        compute=compute,
        communication=comm,
        allreduce=_allreduce(params, n, c),
    )


def _gather(store: Store, c: MachineCosts, n: int, memory: int | None, *, halo: bool) -> float:
    """One batch's gather: from memory when the rank's rows (its core nodes', with ``halo``
    its halo's too) fit in :data:`CACHE_SHARE` of ``memory``, else with direct reads."""
    if memory is None:
        return c.gather_s
    parts = store.meta["parts"]
    rows = max(
        sum(
            p["num_core"] + (p["num_halo"] if halo else 0)
            for j, p in enumerate(parts)
            if j % n == r
        )
        for r in range(n)
    )
    fits = rows * int(store.feature_dim or 1) * 4 <= CACHE_SHARE * memory
    return c.gather_mem_s if fits else c.gather_s


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
    """Each engine's estimated training epoch on ``workers`` ranks (module docstring);
    ``memory_per_worker``: the budget deciding whether a rank's rows are gathered from
    memory (None: always with direct reads)."""
    c, n, mem = costs, workers, memory_per_worker
    own, with_halo = _gather(store, c, n, mem, halo=False), _gather(store, c, n, mem, halo=True)
    train = sum(int(p.get("train", 0)) for p in store.meta["parts"]) or store.num_nodes
    b = config.batch_size
    steps = math.ceil(train / (b * n))
    row_bytes = int(store.feature_dim or 1) * 4
    h, rows, hops = c.halo_fraction, c.batch_rows, len(config.fanouts)
    remote = 1.0 if n > 1 else 0.0  # one rank holds every part: nothing is remote
    hidden = widths[1] if len(widths) > 2 else row_bytes // 4
    g = c.remote_scale if n > 1 else 1.0  # the owners expand the halo nodes too
    models = 3 if config.average_optimizer else 1  # the weights and Adam's two moments
    out = {
        "minibatch": _split(
            steps,
            sampling=c.sample_s * g,
            compute=c.compute_s * g,
            gather=own * g * (1 - h * remote),
            communication=remote * _net(rows * g * h * row_bytes, 2 * hops + 2, c),
            allreduce=_allreduce(params, n, c),
        ),
        "averaging": _split(
            steps,
            sampling=c.sample_s,
            gather=with_halo,
            compute=c.compute_s,
            allreduce=_allreduce(params, n, c) * models / (steps * config.average_every),
        ),
        "hec": _split(
            steps,
            sampling=c.sample_s,
            gather=own * (1 - h * remote),
            compute=c.compute_s,
            communication=remote * _net(rows * h * 4 * hidden, 4, c),
            allreduce=_allreduce(params, n, c),
        ),
    }
    if n >= 2:
        nb = default_batch_workers(n)
        nc = n - nb
        batches = math.ceil(train / b)
        stream = (
            store_bytes(store) / nb / c.seq_read_bytes_per_s
            if math.isfinite(c.seq_read_bytes_per_s)
            else 0.0
        )
        prep = batches * (c.sample_s + c.gather_s) * g / nb + stream
        comp = batches / nc * (c.compute_s * g + _net(rows * g * row_bytes, 1, c))
        e = {
            "preparation": prep,
            "streaming": stream,
            "compute": comp,
            "allreduce": math.ceil(batches / nc) * _allreduce(params, nc, c),
        }
        e["epoch_s"] = max(prep, comp) + e["allreduce"]
        out["disagg"] = e
    out["fullgraph"] = _fullgraph(store, config, c, widths, n, params)
    return out


def _excluded(store: Store, config: TrainConfig, workers: int) -> dict[str, str]:
    why = {}
    if workers < 2:
        why["disagg"] = "needs at least 2 processes (batch and compute workers)"
    elif store.num_parts < default_batch_workers(workers):
        why["disagg"] = (
            f"{store.num_parts} parts for {default_batch_workers(workers)} batch workers"
        )
    if config.model_factory:
        why["fullgraph"] = "runs shoal's own models only (--model-factory given)"
    elif config.model not in FULLGRAPH_MODELS:
        why["fullgraph"] = f"runs {', '.join(FULLGRAPH_MODELS)}, not {config.model}"
    if config.model_factory:
        why["hec"] = "runs shoal's own models only (--model-factory given)"
    if store.num_parts < workers:
        for name in AUTO_CANDIDATES:
            why.setdefault(name, f"{store.num_parts} parts for {workers} workers")
    return why


def choose(
    store: Store,
    config: TrainConfig,
    costs: MachineCosts,
    workers: int,
    *,
    params: int,
    widths: list[int],
    candidates: tuple[str, ...] = AUTO_CANDIDATES,
    memory_per_worker: int | None = None,
) -> AutoPlan:
    """The cheapest runnable engine among ``candidates`` (default :data:`AUTO_CANDIDATES`)."""
    unknown = set(candidates) - set(AUTO_CANDIDATES)
    if unknown:
        raise ValueError(
            f"unknown candidate engines {sorted(unknown)}; valid names: "
            f"{', '.join(AUTO_CANDIDATES)}"
        )
    est = estimate(
        store,
        config,
        costs,
        workers,
        params=params,
        widths=widths,
        memory_per_worker=memory_per_worker,
    )
    excluded = {k: v for k, v in _excluded(store, config, workers).items() if k in candidates}
    excluded.update({k: "not among the candidates" for k in AUTO_CANDIDATES if k not in candidates})
    ok = {k: v for k, v in est.items() if k not in excluded}
    if not ok:
        raise ValueError(
            "no engine can run this configuration: "
            + "; ".join(f"{k}: {v}" for k, v in excluded.items())
        )
    best = min(ok, key=lambda k: (ok[k]["epoch_s"], AUTO_CANDIDATES.index(k)))
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
    candidates: tuple[str, ...] = AUTO_CANDIDATES,
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
    widths = costs.widths or [width] + [config.hidden] * (config.num_layers - 1) + [2]
    if memory_per_worker is None:  # the budget an engine's rank takes by default
        from shoal.rows.budget import memory_limit

        memory_per_worker = config.memory_bytes or memory_limit(workers)[0]
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
