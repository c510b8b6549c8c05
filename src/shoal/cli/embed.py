"""``shoal embed``: every node's output of a trained model, written to an ``.npy`` file.

The model is rebuilt from a run's checkpoint directory (its ``TrainConfig`` in ``last.pt``,
or in rank 0's file of the last committed epoch for an engine's run) with the best-validation
weights (``best.pt``; ``--which last`` for the last epoch's). Outputs come from the exact
layer-wise inference, written block by block into a memory-mapped ``.npy`` (a temporary
sibling renamed into place): memory stays bounded by the inference's budget, not by the
number of nodes. Node classification runs give logits (``--predict``: classes), link
prediction runs the encoder's embeddings. A typed graph (R-GCN / R-GAT run) gives the rows of
one node type (``--node-type``, default its target type) in that type's own id order.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np

from shoal.errors import ShoalInputError
from shoal.utils.diskspace import open_output_memmap, reporting_full_disk
from shoal.utils.io import read_json

__all__ = ["register"]


def _load_run(ckpt: Path, which: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run's TrainConfig dict, the model's state dict) from a checkpoint directory."""
    from shoal.training.checkpoint import load_checkpoint

    if (ckpt / "last.pt").exists():
        last = load_checkpoint(ckpt / "last.pt")
    elif (ckpt / "last.json").exists():
        meta = read_json(ckpt / "last.json")
        last = load_checkpoint(ckpt / meta["files"][0])
    else:
        raise ShoalInputError(
            "no checkpoint of a run here (last.pt or last.json)",
            path=ckpt,
            fix="train with --checkpoint-dir DIR and pass that DIR",
        )
    weights = last["model"]
    if which == "best":
        if not (ckpt / "best.pt").exists():
            raise ShoalInputError(
                "no best.pt (no validation ran)", path=ckpt, fix="pass --which last"
            )
        weights = load_checkpoint(ckpt / "best.pt")["model"]
    if any(k.startswith("encoder.") for k in weights):  # a link run keeps encoder + scorer
        weights = {k[len("encoder.") :]: v for k, v in weights.items() if k.startswith("encoder.")}
    return last["config"], weights


def _cmd_embed(args: argparse.Namespace) -> int:
    from shoal.data.format import GraphDir
    from shoal.engines.config import read_config
    from shoal.training.linkdata import LinkData

    cfg_dict, weights = _load_run(Path(args.checkpoint_dir), args.which)
    cfg = read_config({**cfg_dict, "resume": False}, origin=str(args.checkpoint_dir))
    g = GraphDir.open(args.graph)
    if g.schema is not None:
        data, tables = _typed_data(args, g, cfg, weights)
        try:
            return _embed_graph(args, cfg, weights, g, data, tables)
        finally:
            data.features.close()
    if args.node_type:
        raise ShoalInputError(
            "--node-type needs a typed graph", path=g.path, fix="drop --node-type"
        )
    data = LinkData.from_graph_dir(g) if g.link_edges("val") is not None else None
    if data is None:  # any graph: the inference needs the CSR and the inputs only
        csr = g.csr("in")
        data = LinkData(
            indptr=csr.indptr,
            indices=csr.indices,
            features=g.features(),
            edges=np.empty((0, 2), np.int64),
            directed=g.directed,
            num_nodes=g.num_nodes,
            val_edges=np.empty((0, 2), np.int64),
            test_edges=np.empty((0, 2), np.int64),
            name=g.name,
            path=str(g.path),
        )
    if args.input:
        data.features = np.load(args.input, mmap_mode="r")
    if data.features is None or data.features.shape[0] != g.num_nodes:
        raise ShoalInputError(
            "no input rows for every node",
            path=args.input or g.path,
            fix="pass --input TABLE.npy (N rows), e.g. a learned embedding table",
        )
    return _embed_graph(args, cfg, weights, g, data)


def _typed_data(args: argparse.Namespace, g: Any, cfg: Any, weights: dict) -> tuple[Any, Any]:
    """A typed graph's inputs for the inference: the CSR and every type's rows in one row
    source (:class:`~shoal.rows.typed.TypedRows`), with the run's on-disk embedding tables
    of its featureless types when it kept them there (their rows then come from the
    checkpoint's ``embedding_<type>_best/``, or ``embedding_<type>/`` with ``--which last``:
    :class:`~shoal.training.embedding.TableRows`); and those tables (None: none)."""
    from shoal.nn import TYPED_MODELS
    from shoal.rows.typed import open_typed_rows
    from shoal.training.data import TrainData
    from shoal.training.embedding import TableRows, TypeTables

    if args.input:
        raise ShoalInputError("--input is for untyped graphs", fix="drop --input")
    if cfg.model.factory:
        raise ShoalInputError(
            f"the run trained the --model-factory model {cfg.model.factory!r}: embed runs a "
            "typed graph's model one layer at a time, which only rgcn and rgat can do",
            path=args.checkpoint_dir,
            fix="embed a `--model rgcn` or `--model rgat` run",
        )
    if cfg.model.name not in TYPED_MODELS:
        raise ShoalInputError(
            f"the run trained {cfg.model.name!r}, not a relational model of a typed graph",
            path=args.checkpoint_dir,
            fix="pass the checkpoint of a `shoal train --graph TYPED` run",
        )
    s = g.schema
    rows = open_typed_rows(g, threads=cfg.memory.io_threads)
    tables = None
    # a featureless type whose table was on disk has no embedding weights in the model
    if any(
        not nt.feature_dim and f"input.maps.{t}.weight" not in weights
        for t, nt in enumerate(s.node_types)
    ):
        tables = TypeTables.saved(
            s, args.checkpoint_dir, int(cfg.model.hidden), best=args.which == "best"
        )
        rows = TableRows(rows, tables, normalize=bool(cfg.model.normalize_features))
    csr = g.csr("in", scratch_dir=args.scratch_dir or cfg.memory.scratch_dir)
    none = np.empty(0, np.int64)
    data = TrainData(
        indptr=csr.indptr,
        indices=csr.indices,
        features=rows,
        labels=none,
        train_idx=none,
        val_idx=none,
        test_idx=none,
        num_classes=int(g.num_classes or 1),
        num_nodes=g.num_nodes,
        name=g.name,
        path=str(g.path),
        schema=g.schema,
    )
    return data, tables


def _embed_graph(
    args: argparse.Namespace, cfg: Any, weights: dict, g: Any, data: Any, tables: Any = None
) -> int:
    """Every node's rows (or a typed graph's ``--node-type``'s, in its own id order) by the
    exact layer-wise inference, written to a memory-mapped ``.npy``; ``tables``: a typed
    run's on-disk embedding tables (``data.features`` reads them; the model takes their
    types as given)."""
    from shoal.nn.ondevice import on_device
    from shoal.training.data import TrainData
    from shoal.training.inference import layerwise_inference
    from shoal.training.model import model_from_config
    from shoal.training.presets import resolve_for_data
    from shoal.utils.device import use_device

    schema = g.schema
    cfg = resolve_for_data(cfg, train_nodes=0, features=data.features)
    out_dim = cfg.model.hidden if cfg.task == "link" else (g.num_classes or 1)
    in_dim = data.feature_dim if isinstance(data, TrainData) else data.features.shape[1]
    given = tables.given if tables is not None else None
    model = model_from_config(cfg, in_dim=in_dim, out_dim=out_dim, schema=schema, given=given)
    model.load_state_dict(weights)
    nodes = np.arange(g.num_nodes)
    what = ""
    if schema is not None:
        nt = schema.node_type(args.node_type or schema.target)
        nodes = nt.offset + np.arange(nt.count, dtype=np.int64)
        what = f" of node type {nt.name!r}"
    device = use_device(args.device or "cpu")  # the checkpoint's device is not assumed
    model = on_device(model.to(device), device)
    out = Path(args.out)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")

    def new_output(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return open_output_memmap(tmp, dtype, shape)

    try:
        with reporting_full_disk(out, cleanup=lambda: tmp.unlink(missing_ok=True)):
            res = layerwise_inference(
                model,
                data,
                nodes,
                predict=args.predict,
                # a typed run's tables: its row source normalises the features itself
                normalize_features=cfg.model.normalize_features and tables is None,
                scratch_dir=args.scratch_dir or cfg.memory.scratch_dir,
                new_output=new_output,
            )
            if isinstance(res, np.memmap) and res.filename is not None:  # the file itself
                res.flush()
            else:  # predictions of logits computed whole, or nothing (an empty graph)
                with open(tmp, "wb") as f:  # (np.save would append .npy to the name)
                    np.save(f, res)
            os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    print(
        f"embed {g.path} -> {out}: {res.shape} {res.dtype} "
        f"({'classes' if args.predict else 'embeddings' if cfg.task == 'link' else 'logits'}"
        f"{what})"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "embed",
        help="write every node's embedding (or logits) of a trained model to an .npy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[1].strip()
        + "\n\nexample: shoal embed --graph data/cora --checkpoint-dir ckpt --out cora-emb.npy",
    )
    p.add_argument("--graph", required=True, help="graph directory (the one trained on)")
    p.add_argument("--checkpoint-dir", required=True, help="the run's --checkpoint-dir")
    p.add_argument("--out", required=True, help="the .npy file to write (N rows)")
    p.add_argument(
        "--which",
        choices=["best", "last"],
        default="best",
        help="best-validation weights (default) or the last epoch's",
    )
    p.add_argument(
        "--predict", action="store_true", help="node classification: classes, not logits"
    )
    p.add_argument(
        "--input",
        metavar="TABLE.npy",
        help="input rows instead of the graph's features (a learned embedding table)",
    )
    p.add_argument(
        "--node-type",
        metavar="TYPE",
        help="a typed graph: the node type whose rows are written, in its own id order "
        "(default its target type)",
    )
    p.add_argument("--scratch-dir", metavar="DIR", help="where the inference's layer arrays go")
    p.add_argument(
        "--device",
        type=_device,
        help="where the layers compute: cpu, cuda or cuda:i; rows are read and the "
        "output written on the host (default cpu)",
    )
    p.set_defaults(func=_cmd_embed)


def _device(text: str) -> str:
    from shoal.utils.device import check_device_spec

    try:
        return check_device_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
