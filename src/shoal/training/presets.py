"""Hyper-parameter presets: each model's paper settings (``paper``, the default) or one
setting for large graphs (``large``), filling the ``TrainConfig`` fields left unset, with the
link-prediction settings over them for ``--task link``; and the two choices that depend on the
data (:func:`resolve_for_data`)."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import numpy as np

from shoal.rows.gather import gather_rows, source_rows


class _DataChoices(Protocol):
    """The fields of a ``TrainConfig`` that :func:`resolve_for_data` reads (a protocol, so
    this module needs no import of ``shoal.training.config``, which imports it)."""

    model: Any  # normalize_features
    optim: Any  # min_steps, epochs
    sampling: Any  # batch_size


_Config = TypeVar("_Config", bound=_DataChoices)

__all__ = [
    "AUTO_NORMALIZE_MAX_NNZ",
    "LINK_PRESET",
    "PRESETS",
    "auto_normalize",
    "preset_defaults",
    "resolve_for_data",
]

log = logging.getLogger(__name__)

#: ``TrainConfig.preset``: each model's paper settings, or one setting for large graphs
PRESETS = ("paper", "large")

#: ``normalize_features="auto"`` row-normalises features that are non-negative with at most
#: this many non-zeros per row on average (sparse bag-of-words, the Planetoid features Kipf &
#: Welling normalise: Cora 18, CiteSeer 32, Coauthor-Physics 33), and leaves denser rows as
#: stored: dividing dense rows such as Amazon-Photo's (~260 non-zeros each) by their sum costs
#: GCN and GAT many points of test accuracy (docs/measurements.md#presets).
AUTO_NORMALIZE_MAX_NNZ = 64
#: rows read (evenly spaced over the table) to decide ``"auto"``
AUTO_NORMALIZE_SAMPLE = 1024

# Each model's paper: 2 layers, with GraphSAGE's sample sizes (25, 10; Hamilton et al. 2017,
# Sec. 4) instead of full neighbourhoods, so that memory stays bounded on any graph
# (--fanouts -1,-1 gives the papers' full-batch layers).
_PAPER: dict[str, dict[str, Any]] = {
    # Kipf & Welling, ICLR 2017, Sec. 5.2: dropout 0.5, L2 5e-4, lr 0.01, 200 epochs,
    # row-normalised (bag-of-words) features: "auto" (AUTO_NORMALIZE_MAX_NNZ); hidden 64 (the
    # paper's 16 underfits wider inputs)
    "gcn": dict(
        hidden=64, dropout=0.5, lr=0.01, weight_decay=5e-4, epochs=200, normalize_features="auto"
    ),
    # Velickovic et al., ICLR 2018, Sec. 3.3: 8 heads x 8 features, dropout 0.6, L2 5e-4,
    # lr 0.005, row-normalised features
    "gat": dict(
        hidden=64,
        heads=8,
        dropout=0.6,
        lr=0.005,
        weight_decay=5e-4,
        epochs=200,
        normalize_features="auto",
    ),
    # Hamilton et al., NeurIPS 2017, Sec. 4 and Appendix: K = 2, S = (25, 10), hidden 256,
    # lr 0.01, 10 epochs -- over Reddit's 150k training nodes, thousands of optimizer steps;
    # on a training set of a few hundred nodes 10 epochs are 10 steps, hence at least 200
    # steps (the other papers' 200 full-batch steps)
    "sage": dict(
        hidden=256,
        dropout=0.5,
        lr=0.01,
        weight_decay=0.0,
        epochs=10,
        normalize_features=False,
        min_steps=200,
    ),
    # Xu et al., ICLR 2019, Sec. 7: hidden 64, dropout 0.5, lr 0.01
    "gin": dict(
        hidden=64, dropout=0.5, lr=0.01, weight_decay=0.0, epochs=200, normalize_features=False
    ),
    # Schlichtkrull et al., ESWC 2018, Sec. 5.1 (entity classification): 2 layers, Adam lr
    # 0.01, L2 5e-4, 50 epochs; hidden 64 (the paper's 16 underfits wider inputs), bases
    # off (RGCN's num_bases); sampled with the fanouts per relation
    "rgcn": dict(
        hidden=64, dropout=0.5, lr=0.01, weight_decay=5e-4, epochs=50, normalize_features=False
    ),
    # the MLPerf Training GNN reference's R-GAT on IGBH: hidden 512, 4 heads, fanouts
    # 15,10,5, lr 0.001 (3 layers there; 2 here, as the other presets)
    "rgat": dict(
        hidden=512,
        heads=4,
        dropout=0.2,
        lr=0.001,
        weight_decay=0.0,
        epochs=10,
        normalize_features=False,
        min_steps=200,
    ),
    # Wu et al., ICML 2019, Sec. 4: K = 2, lr 0.2, 100 epochs, a small L2, row-normalised
    "sgc": dict(
        hidden=64, dropout=0.0, lr=0.2, weight_decay=5e-6, epochs=100, normalize_features="auto"
    ),
}
# Large graphs (OGB-products-style GraphSAGE): 3 sampled hops, wide layers, fewer epochs.
_LARGE: dict[str, Any] = dict(
    fanouts=(15, 10, 5),
    hidden=256,
    dropout=0.5,
    lr=0.003,
    weight_decay=0.0,
    epochs=20,
    normalize_features=False,
    min_steps=0,
)


#: Link prediction (``--task link``), over the model's paper settings: the settings with which
#: GraphSAGE beats Adamic-Adar on Cora and CiteSeer (docs/linkpred.md#measured). Dropout 0:
#: with GraphSAGE's 0.5 and small batches at a higher learning rate it fell below Adamic-Adar
#: on Cora (docs/measurements.md#presets). A batch is ``batch_size`` positive edges.
LINK_PRESET: dict[str, Any] = dict(
    fanouts=(10, 5),
    hidden=64,
    batch_size=512,
    lr=0.005,
    dropout=0.0,
    weight_decay=0.0,
    epochs=20,
    min_steps=0,
)


def preset_defaults(model: str, preset: str, task: str = "node") -> dict[str, Any]:
    """The hyper-parameters ``preset`` gives ``model`` for ``task`` (the fields a
    ``TrainConfig`` leaves ``None``): the model's paper, then :data:`LINK_PRESET` for ``task="link"``, then the large-graph
    setting for ``preset="large"`` (its batches: 1024 seeds; 512 edges for links)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    base = {
        "fanouts": (25, 10),
        "heads": 8,
        "min_steps": 0,
        "batch_size": 1024,
        **_PAPER.get(model, _PAPER["sage"]),
    }
    if task == "link":
        base.update(LINK_PRESET)
    if preset == "large":
        base.update(_LARGE)
    return base


def auto_normalize(rows: np.ndarray) -> bool:
    """``normalize_features="auto"``'s rule on a sample of feature rows: row-normalise when
    every value is non-negative and the rows hold at most :data:`AUTO_NORMALIZE_MAX_NNZ`
    non-zeros on average."""
    rows = np.asarray(rows)
    if rows.size == 0 or (rows < 0).any():
        return False
    return float(np.count_nonzero(rows, axis=1).mean()) <= AUTO_NORMALIZE_MAX_NNZ


def _sample_rows(features: Any) -> np.ndarray:
    """Evenly spaced rows of an array, or of a row source (``num_rows``, ``read``)."""
    n = int(features.num_rows if hasattr(features, "read") else features.shape[0])
    idx = np.unique(np.linspace(0, max(n - 1, 0), min(n, AUTO_NORMALIZE_SAMPLE)).astype(np.int64))
    if not n:
        return np.empty((0, 0), np.float32)
    if hasattr(features, "read"):  # decoded into float32 (compact rows: shoal.rows.decode)
        return source_rows(features, idx)
    return gather_rows(features, idx)


def resolve_for_data(
    config: _Config, *, train_nodes: int, features: Any = None, ranks: int = 1
) -> _Config:
    """The config with its data-dependent choices made (unchanged when there are none):
    ``normalize_features="auto"`` from :func:`auto_normalize` on evenly spaced rows of
    ``features`` (an array or memory map; ``None``: no features, not normalised), and
    ``epochs`` raised to ``ceil(min_steps / steps per epoch)``, an epoch being
    ``ceil(train_nodes / (batch_size * ranks))`` optimizer steps. Every rank of a run must
    pass the same arguments (the same decision everywhere)."""
    changes: dict[str, Any] = {}
    if config.model.normalize_features == "auto":
        ok = features is not None and auto_normalize(_sample_rows(features))
        changes["model"] = replace(config.model, normalize_features=ok)
        log.info("features: %s (normalize_features=auto)", "row-normalised" if ok else "as stored")
    if config.optim.min_steps:
        steps = max(1, math.ceil(train_nodes / (config.sampling.batch_size * max(ranks, 1))))
        epochs = max(config.optim.epochs, math.ceil(config.optim.min_steps / steps))
        if epochs != config.optim.epochs:
            changes["optim"] = replace(config.optim, epochs=epochs)
            log.info(
                "epochs: %d (%d steps per epoch; at least min_steps=%d)",
                epochs,
                steps,
                config.optim.min_steps,
            )
    return replace(config, **changes) if changes else config
