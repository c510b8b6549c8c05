"""Hyper-parameter presets: each model's paper settings (``paper``, the default) or one
setting for large graphs (``large``), filling the ``TrainConfig`` fields left unset."""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "PRESET_FIELDS", "preset_defaults"]

#: ``TrainConfig.preset``: each model's paper settings, or one setting for large graphs
PRESETS = ("paper", "large")

#: the hyper-parameters a preset decides (``None`` in a TrainConfig: "the preset's")
PRESET_FIELDS = ("fanouts", "hidden", "heads", "epochs", "lr", "dropout", "weight_decay",
                 "normalize_features")  # fmt: skip

# Each model's paper: 2 layers, with GraphSAGE's sample sizes (25, 10; Hamilton et al. 2017,
# Sec. 4) instead of full neighbourhoods, so that memory stays bounded on any graph
# (--fanouts -1,-1 gives the papers' full-batch layers).
_PAPER: dict[str, dict[str, Any]] = {
    # Kipf & Welling, ICLR 2017, Sec. 5.2: dropout 0.5, L2 5e-4, lr 0.01, 200 epochs,
    # row-normalised features; hidden 64 (the paper's 16 underfits wider inputs)
    "gcn": dict(
        hidden=64, dropout=0.5, lr=0.01, weight_decay=5e-4, epochs=200, normalize_features=True
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
        normalize_features=True,
    ),
    # Hamilton et al., NeurIPS 2017, Sec. 4 and Appendix: K = 2, S = (25, 10), hidden 256,
    # lr 0.01, 10 epochs
    "sage": dict(
        hidden=256, dropout=0.5, lr=0.01, weight_decay=0.0, epochs=10, normalize_features=False
    ),
    # Xu et al., ICLR 2019, Sec. 7: hidden 64, dropout 0.5, lr 0.01
    "gin": dict(
        hidden=64, dropout=0.5, lr=0.01, weight_decay=0.0, epochs=200, normalize_features=False
    ),
    # Wu et al., ICML 2019, Sec. 4: K = 2, lr 0.2, 100 epochs, a small L2, row-normalised
    "sgc": dict(
        hidden=64, dropout=0.0, lr=0.2, weight_decay=5e-6, epochs=100, normalize_features=True
    ),
}
# Large graphs (OGB-products-style GraphSAGE): 3 sampled hops, wide layers, fewer epochs.
_LARGE: dict[str, Any] = dict(fanouts=(15, 10, 5), hidden=256, dropout=0.5, lr=0.003,
                              weight_decay=0.0, epochs=20, normalize_features=False)  # fmt: skip


def preset_defaults(model: str, preset: str) -> dict[str, Any]:
    """The hyper-parameters ``preset`` gives ``model`` (:data:`PRESET_FIELDS`)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    base = {"fanouts": (25, 10), "heads": 8, **_PAPER.get(model, _PAPER["sage"])}
    if preset == "large":
        base.update(_LARGE)
    return base
