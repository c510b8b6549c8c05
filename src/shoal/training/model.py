"""The model a run trains, built from its :class:`~shoal.training.config.TrainConfig`."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from shoal.data.hetero import HeteroSchema
from shoal.errors import ShoalInputError
from shoal.nn import TYPED_MODELS, BlockGNN, build_model
from shoal.nn.adapter import EdgeIndexModel
from shoal.nn.relational import RGAT, RGCN
from shoal.nn.relational_adapter import RelationalEdgeIndexModel
from shoal.training.config import TrainConfig

__all__ = ["factory_model", "model_from_config", "relational_model", "typed_factory_model"]


def _call_factory(spec: str, **kwargs) -> nn.Module:
    """``module:function`` imported and called with ``kwargs``; its result checked."""
    mod_name, _, fn_name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ShoalInputError(
            f"cannot load the model factory {spec!r}: {e}",
            fix="pass --model-factory package.module:function, importable "
            "from this environment (e.g. on PYTHONPATH)",
        ) from None
    model = fn(**kwargs)
    if not isinstance(model, nn.Module):
        raise ShoalInputError(
            f"the model factory {spec!r} returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def factory_model(spec: str, **kwargs) -> nn.Module:
    """``module:function`` called with ``in_dim``, ``hidden``, ``out_dim``, ``num_layers`` and
    ``dropout`` (keywords); a module that is not a shoal model is called as
    ``model(x, edge_index)`` through :class:`~shoal.nn.adapter.EdgeIndexModel`."""
    model = _call_factory(spec, **kwargs)
    return model if isinstance(model, BlockGNN) else EdgeIndexModel(model, kwargs["num_layers"])


def typed_factory_model(
    spec: str,
    schema: HeteroSchema,
    *,
    hidden: int,
    out_dim: int,
    num_layers: int,
    dropout: float,
    given: list[bool] | None = None,
) -> RelationalEdgeIndexModel:
    """A user's heterogeneous model for a typed graph: ``module:function`` called with
    ``metadata`` (PyG's ``(node types, canonical edge types)``, what ``to_hetero`` takes),
    ``target`` (the labelled node type), ``in_dim`` (every type's input width: the hidden
    width the per-type inputs project to), ``hidden``, ``out_dim``, ``num_layers`` and
    ``dropout`` (keywords); the module is called as ``model(x_dict, edge_index_dict)``
    on typed blocks through
    :class:`~shoal.nn.relational_adapter.RelationalEdgeIndexModel` (``given``: the types
    whose rows come in already ``hidden`` wide)."""
    metadata = ([t.name for t in schema.node_types], [e.key for e in schema.edge_types])
    module = _call_factory(
        spec,
        metadata=metadata,
        target=schema.target,
        in_dim=int(hidden),
        hidden=int(hidden),
        out_dim=int(out_dim),
        num_layers=int(num_layers),
        dropout=float(dropout),
    )
    return RelationalEdgeIndexModel(
        module, schema, hidden=int(hidden), num_layers=num_layers, given=given
    )


def relational_model(
    cfg: TrainConfig,
    schema: HeteroSchema,
    *,
    out_dim: int,
    in_dim: int | None = None,
    given: list[bool] | None = None,
) -> nn.Module:
    """A typed graph's model: ``rgcn`` or ``rgat`` (:mod:`shoal.nn.relational`), or a
    ``--model-factory`` heterogeneous module run through
    :class:`~shoal.nn.relational_adapter.RelationalEdgeIndexModel`; every one called
    ``model(x, blocks)`` with ``x`` every node type's rows padded to the widest type.
    ``given``: per node type, whether its rows come in ``x``'s first ``hidden`` columns
    (featureless types whose embedding tables live outside the model:
    :class:`~shoal.training.embedding.TypeTables`; default none)."""
    m = cfg.model
    if m.name not in TYPED_MODELS and not m.factory:
        raise ShoalInputError(
            f"a typed graph trains a relational model, not {m.name!r}",
            fix=f"use --model {' or '.join(TYPED_MODELS)} (the default on a typed graph)",
        )
    if m.factory:
        return typed_factory_model(
            m.factory,
            schema,
            hidden=int(m.hidden),
            out_dim=int(out_dim),
            num_layers=cfg.num_layers,
            dropout=float(m.dropout or 0.0),
            given=given,
        )
    kw = dict(
        feature_dims=[t.feature_dim for t in schema.node_types],
        counts=[t.count for t in schema.node_types],
        offsets=schema.offsets,
        num_relations=len(schema.edge_types),
        hidden=int(m.hidden),
        out_dim=int(out_dim),
        num_layers=cfg.num_layers,
        dropout=float(m.dropout),
        in_dim=in_dim,
        given=given,
    )
    if m.name == "rgcn":
        return RGCN(**kw)
    names = schema.type_names
    return RGAT(
        **kw, heads=int(m.heads or 4), relation_dst=[names.index(e.dst) for e in schema.edge_types]
    )


def model_from_config(
    cfg: TrainConfig,
    *,
    in_dim: int,
    out_dim: int,
    rank: int = 0,
    schema: HeteroSchema | None = None,
    given: list[bool] | None = None,
) -> nn.Module:
    """The model named by ``cfg.model.name`` (or built by ``cfg.model.factory``), initialised from
    ``cfg.run.seed`` (the same weights in every process). Ranks other than 0 then re-seed torch
    with ``seed + rank`` so their dropout masks are independent of rank 0's (rank 0 keeps the
    single-process trainer's stream). ``schema``: a typed graph's, and ``given`` its types whose
    rows come in ``x`` (:func:`relational_model`)."""
    torch.manual_seed(cfg.run.seed)
    dims = dict(
        in_dim=int(in_dim),
        hidden=cfg.model.hidden,
        out_dim=int(out_dim),
        num_layers=cfg.num_layers,
        dropout=cfg.model.dropout,
    )
    if schema is not None:
        model = relational_model(cfg, schema, out_dim=out_dim, in_dim=in_dim, given=given)
    elif cfg.model.factory:
        model = factory_model(cfg.model.factory, **dims)
    else:
        extra = {"heads": cfg.model.heads} if cfg.model.name == "gat" else {}
        model = build_model(cfg.model.name, **dims, **extra)
    if rank:
        torch.manual_seed(cfg.run.seed + rank)
    return model
