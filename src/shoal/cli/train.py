"""``shoal train``: train a GNN on a graph directory (one process) or on a partitioned store
with a distributed engine (``--store STORE --engine NAME --nproc N``, see
:mod:`shoal.engines.launch`).

The flags only fill a :class:`~shoal.training.TrainConfig` (every option, the distributed
ones included; a ``--config`` TOML file fills the same fields, flags win): groups input,
model, optimisation, run, output and distributed (:mod:`shoal.cli.train_options`).
:func:`run_train` then runs the single-process :class:`~shoal.training.Trainer` (``--graph``)
or hands a :class:`~shoal.engines.launch.LaunchSpec` to the launcher (``--store``).
"""

from __future__ import annotations

import argparse
import os
import sys

from shoal.cli.report import report_after_run, run_with_report
from shoal.cli.train_options import add_train_arguments, config_from_args
from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.nn import TYPED_MODELS
from shoal.rows.backends import use_row_backend
from shoal.training import TrainConfig, TrainData, Trainer
from shoal.utils.io import write_json_output

__all__ = ["add_train_arguments", "config_from_args", "register", "run_train", "spec_from_args"]


def spec_from_args(args: argparse.Namespace, config: TrainConfig | None = None):
    """The launcher's :class:`~shoal.engines.launch.LaunchSpec` for ``--store``."""
    from shoal.engines.launch import LaunchSpec

    train = config if config is not None else config_from_args(args)
    return LaunchSpec(store=args.store, train=train, json=args.json, command=list(sys.argv))


def announce(config: TrainConfig) -> None:
    """Print the hyper-parameters the run uses (the preset's included) to stderr."""
    if os.environ.get("SHOAL_QUIET"):
        return
    c = config
    ev = (
        "auto (every k epochs, k from the graph's sizes: about a fifth of the run or less)"
        if c.eval.every == "auto"
        else f"every {c.eval.every} epoch(s)"
    )
    feats = {True: "row-normalised", False: "as stored"}.get(
        c.model.normalize_features, "auto (row-normalised if sparse bag-of-words)"
    )
    epochs = f"{c.optim.epochs} epochs" + (
        f" (at least {c.optim.min_steps} steps)" if c.optim.min_steps else ""
    )
    link = c.task == "link"
    print(
        f"shoal train: {c.model.factory or c.model.name}, preset {c.preset}"
        f"{' with the link task' if link else ''}: {c.num_layers} "
        f"layers, fanouts {','.join(map(str, c.sampling.fanouts))}, hidden {c.model.hidden}"
        f"{f', heads {c.model.heads}' if c.model.name in ('gat', 'rgat') else ''}, dropout {c.model.dropout}, lr {c.optim.lr}, "
        f"weight decay {c.optim.weight_decay}, {epochs}, batch {c.sampling.batch_size}"
        f"{' edges' if link else ''}, features {feats}; "
        f"evaluation {ev}",
        file=sys.stderr,
    )


def _typed_default(args: argparse.Namespace, config: TrainConfig) -> bool:
    """Whether ``--graph`` or ``--store`` is typed and no model was chosen (``--model`` or a
    config file): R-GCN is then the default, in one process and in every engine, as
    GraphSAGE is for an untyped graph."""
    if not (args.graph or args.store) or args.model is not None or config.model.factory:
        return False
    if getattr(args, "config", None) and config.model.name != "sage":
        return False
    try:
        if args.store:
            from shoal.store.reader import Store

            return Store.open(args.store).schema is not None
        return GraphDir.open(args.graph).schema is not None
    except ShoalInputError:
        return False  # reported where the graph or store is opened


def run_train(args: argparse.Namespace) -> int:
    """Handler of ``shoal train``: ``--store`` goes to the distributed launcher."""
    config = config_from_args(args)
    use_row_backend(config.memory.rows_backend)  # checked now; every row read goes through it
    if _typed_default(args, config):  # a typed graph without --model: its relational default
        args.model = "rgcn"
        config = config_from_args(args)
    if "RANK" not in os.environ or os.environ.get("RANK") == "0":
        announce(config)
    if config.task == "link" and not args.store:
        return _run_link(args, config)
    if args.store:
        if args.graph:
            raise ShoalInputError(
                "both --graph and --store given",
                fix="train on a graph directory (--graph) or on a partitioned store (--store)",
            )
        from shoal.engines.launch import run as run_distributed

        if getattr(args, "report", None):
            return run_with_report(spec_from_args(args, config), args.report)
        own = getattr(args, "own_process", False)  # nothing follows: the launcher replaces it
        return run_distributed(spec_from_args(args, config), replace_process=own)
    if not args.graph:
        raise ShoalInputError(
            "no input given",
            fix="pass --graph DIR (a graph directory with features and splits) or --store STORE",
        )
    g = GraphDir.open(args.graph)
    if g.schema is None and config.model.name in TYPED_MODELS:
        raise ShoalInputError(
            f"--model {config.model.name} needs a typed graph (node types, relations)",
            path=g.path,
            fix="import one (ogbn-mag's layout, PyG HeteroData) or `shoal data synth igbh`",
        )
    data = TrainData.from_graph_dir(g, io_threads=config.memory.io_threads)
    result = Trainer(config, data).fit().to_json()
    result["graph"] = str(args.graph)
    summary = (
        f"test_accuracy={result['test_accuracy']:.4f} val_accuracy={result['val_accuracy']:.4f} "
        f"epochs={result['epochs']} best_epoch={result['best_epoch']} "
        f"seconds_per_epoch={result['seconds_per_epoch']:.3f}"
    )
    print(summary, file=sys.stderr)
    write_json_output(args.json, result)
    if getattr(args, "report", None):
        report_after_run(args.report, result, json_path=args.json)
    return 0


def _run_link(args: argparse.Namespace, config: TrainConfig) -> int:
    """``--task link`` on a graph directory: single-process link prediction (``--store``
    goes to the distributed launcher like the node task)."""
    from shoal.training.linkdata import LinkData

    if not args.graph:
        raise ShoalInputError(
            "no input given", fix="pass --graph DIR (made by shoal data split-edges)"
        )
    link = config.link
    result = Trainer(config, LinkData.from_graph_dir(args.graph)).fit().to_json()
    result["graph"] = str(args.graph)
    k = link.hits_k
    base = result.get("baseline_test_mrr")
    print(
        f"test_mrr={result['test_mrr']:.4f} val_mrr={result['val_mrr']:.4f} "
        f"test_hits@{k}={result[f'test_hits@{k}']:.4f} epochs={result['epochs']} "
        f"best_epoch={result['best_epoch']} seconds_per_epoch={result['seconds_per_epoch']:.3f}",
        file=sys.stderr,
    )
    if base is not None:
        print(
            f"baseline {link.baseline}: test_mrr={base:.4f} on the same test edges and "
            f"negatives ({'below' if base < result['test_mrr'] else 'not below'} the model)",
            file=sys.stderr,
        )
    write_json_output(args.json, result)
    if getattr(args, "report", None):
        report_after_run(args.report, result, json_path=args.json)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train a GNN (GraphSAGE, GCN, GAT, GIN, SGC) with neighbour sampling",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""Train a GNN on a graph directory with mini-batch neighbour sampling
(one process), or on a partitioned store with a distributed engine (--store, --engine,
--nproc: N processes on this machine, started as torchrun would; on a cluster run
`torchrun --nnodes ... -m shoal train --store ...`, see docs/distributed.md). Each epoch visits the training nodes in shuffled batches; validation accuracy
is computed exactly (layer-wise full-neighbour inference) and the best-validation model is
tested at the end. Options come from flags and/or a TOML file (--config; flags win).

examples:
  shoal train --graph data/cora --model gcn --fanouts all,all --hidden 64 --epochs 200 \\
      --lr 0.01 --weight-decay 5e-4 --normalize-features --json cora.json
  shoal train --graph data/products --model sage --fanouts 15,10,5 --batch-size 1024
  shoal train --store store/cora-4 --engine minibatch --nproc 2 --model gcn --json run.json
  shoal train --store store/cora-4 --engine averaging --nproc 2 --average-every 1""",
    )
    add_train_arguments(p)
    p.set_defaults(func=run_train)
