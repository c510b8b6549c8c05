"""``shoal train``: train a GNN on a graph directory (one process) or on a partitioned store
with a distributed engine (``--store STORE --engine NAME --nproc N``, see
:mod:`shoal.engines.launch`).

The flags only fill a :class:`~shoal.training.TrainConfig` (every option, the distributed
ones included; a ``--config`` TOML file fills the same fields, flags win): groups input,
model, optimisation, run, output and distributed (:func:`add_train_arguments`).
:func:`run_train` then runs the single-process :class:`~shoal.training.Trainer` (``--graph``)
or hands a :class:`~shoal.engines.launch.LaunchSpec` to the launcher (``--store``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shoal.cli.engine_options import ENGINE_FLAGS, add_engine_arguments, engine_overrides
from shoal.cli.link_options import add_link_arguments, link_config_from_args
from shoal.cli.report import add_report_argument, report_after_run, run_with_report
from shoal.engines.registry import ENGINES
from shoal.errors import ShoalInputError
from shoal.nn import MODELS
from shoal.sample.budget import STRUCTURE_MODES
from shoal.sample.sampler import parse_fanouts
from shoal.training import TrainConfig, TrainData, Trainer
from shoal.utils.io import write_json_output

__all__ = ["add_train_arguments", "config_from_args", "register", "run_train", "spec_from_args"]

#: Flag destinations that map one-to-one onto TrainConfig fields.
CONFIG_FLAGS = (
    "model",
    "model_factory",
    "task",
    "fanouts",
    "fanouts_order",
    "batch_size",
    "hidden",
    "epochs",
    "lr",
    "dropout",
    "weight_decay",
    "patience",
    "eval_every",
    "eval_test",
    "eval_batch_size",
    "seed",
    "threads",
    "normalize_features",
    "heads",
    "checkpoint_dir",
    "resume",
    "metrics_file",
    "scratch_dir",
    "engine",
    "nproc",
    "plan",
    "dist_timeout",
    "max_restarts",
    "average_every",
    "part_models",
    "memory",
    "io_threads",
    "structure",
    *ENGINE_FLAGS,
)


def _fanouts(value: str) -> tuple[int, ...]:
    try:
        return parse_fanouts(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_train_arguments(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Add the trainer's flags (defaults None so a --config file can fill them)."""
    d = TrainConfig()
    titles = {"input": "input", "model": "model", "link": "link prediction (--task link)",
              "optimisation": "optimisation", "run": "run",
              "output": "output", "memory": "memory (out-of-core)",
              "distributed": "distributed (with --store)"}  # fmt: skip
    groups = {k: p.add_argument_group(t) for k, t in titles.items()}
    g = groups["input"]
    g.add_argument("--graph", metavar="DIR", help="graph directory with features, labels, splits")
    g.add_argument(
        "--store",
        metavar="STORE",
        help="partitioned store (`shoal store build`) to train on with a distributed engine",
    )
    g.add_argument(
        "--config",
        metavar="FILE.toml",
        help="TrainConfig options (top level or [train]); flags override it",
    )
    g = groups["model"]
    g.add_argument(
        "--model", choices=sorted(MODELS), default=None, help=f"model (default {d.model})"
    )
    _add_factory_argument(g)
    g.add_argument("--hidden", type=int, help=f"hidden width (default {d.hidden})")
    g.add_argument(
        "--fanouts",
        type=_fanouts,
        help="neighbours per hop, hop 1 first (PyG's num_neighbors order; DGL's NeighborSampler "
        "lists the input layer first: DGL [5, 10, 15] is --fanouts 15,10,5); all (or -1, "
        "written --fanouts=-1,-1) takes every neighbour; the count is the number of layers "
        f"(default {','.join(map(str, d.fanouts))})",
    )
    g.add_argument(
        "--fanouts-order",
        choices=["hop-first", "input-first"],
        help="how --fanouts is written: hop-first (default) or input-first (DGL's order, for "
        "ported scripts: --fanouts 5,10,15 --fanouts-order input-first = --fanouts 15,10,5)",
    )
    g.add_argument("--heads", type=int, help=f"GAT attention heads (default {d.heads})")
    g.add_argument(
        "--normalize-features",
        action="store_true",
        default=None,
        help="row-normalise features when gathered (Planetoid bag-of-words; default off)",
    )
    g = groups["optimisation"]
    g.add_argument("--epochs", type=int, help=f"maximum epochs (default {d.epochs})")
    g.add_argument("--batch-size", type=int, help=f"seeds per batch (default {d.batch_size})")
    g.add_argument("--lr", type=float, help=f"Adam learning rate (default {d.lr})")
    g.add_argument("--dropout", type=float, help=f"dropout (default {d.dropout})")
    g.add_argument("--weight-decay", type=float, help=f"L2 penalty (default {d.weight_decay})")
    g.add_argument(
        "--patience",
        type=int,
        help="early stopping after N evaluations without a better "
        "validation accuracy; 0 = off (default 0)",
    )
    add_link_arguments(groups["link"])
    _add_run_arguments(groups["run"], d)
    g = groups["output"]
    g.add_argument("--checkpoint-dir", metavar="DIR", help="write last.pt / best.pt there")
    g.add_argument("--resume", action="store_true", default=None, help="continue from DIR/last.pt")
    g.add_argument("--metrics-file", metavar="FILE", help="append per-epoch JSON lines")
    g.add_argument("--json", metavar="FILE", help="write the run's result as JSON ('-' = stdout)")
    add_report_argument(g)
    g.add_argument("--no-progress", action="store_true", help="hide progress bars")
    g.add_argument(
        "--scratch-dir",
        metavar="DIR",
        help="where large temporary files go (inference arrays); default: beside the graph "
        "directory or the store, never the system temp dir (often RAM-backed)",
    )
    _add_memory_arguments(groups["memory"], d)
    _add_distributed_arguments(groups["distributed"], d)
    add_engine_arguments(groups["distributed"], d)
    return groups


def _add_factory_argument(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--model-factory",
        metavar="MODULE:FUNCTION",
        help="build the model with your own function (keywords in_dim, hidden, out_dim, "
        "num_layers, dropout), e.g. a torch_geometric.nn.models.GraphSAGE called as "
        "model(x, edge_index); replaces --model (engines hec and fullgraph need shoal's models)",
    )


def _add_run_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument("--seed", type=int, help=f"random seed (default {d.seed})")
    g.add_argument("--threads", type=int, help="torch/numba threads (default: all)")
    g.add_argument(
        "--eval-every", type=int, help=f"evaluate every N epochs (default {d.eval_every})"
    )
    g.add_argument(
        "--eval-test",
        action="store_true",
        default=None,
        help="also record the test accuracy at every evaluation (to follow convergence; the "
        "best weights are still chosen on validation)",
    )
    g.add_argument(
        "--eval-batch-size",
        type=int,
        help=f"nodes per inference batch (default {d.eval_batch_size})",
    )


def _add_memory_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument(
        "--memory",
        metavar="SIZE",
        help="memory one training process may use in all, page cache included (e.g. 4GiB): "
        "the graph structure is held in memory when it fits, feature rows are read ahead in "
        "windows with direct I/O and the rows of high-degree nodes are cached within it "
        "(default: 90%% of the process's memory cgroup limit or of the memory available at "
        "the start, whichever is lower, shared by the processes of one machine)",
    )
    g.add_argument(
        "--io-threads",
        type=int,
        metavar="N",
        help=f"concurrent feature read requests (default {d.io_threads})",
    )
    g.add_argument(
        "--structure",
        choices=STRUCTURE_MODES,
        help="where the graph's CSR lives while training: auto = in memory when it fits half "
        "of the budget left after the reserve, else on disk (its row index in memory, sampled "
        "neighbour entries read with planned direct reads, no page cache); memory / disk force "
        f"it (default {d.structure}; single-process trainer and averaging engine)",
    )


def _add_distributed_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument(
        "--engine",
        choices=sorted(ENGINES),
        help="minibatch: sync SGD with remote sampling and feature pulls (DistDGL); averaging: "
        "local training on parts + weighted model averaging every k epochs, needs a store "
        "built with --halo-features (SDT-GNN); hec: local sampling, halo embeddings from "
        "caches filled by the owners' delayed pushes (DistGNN-MB); fullgraph: full-graph "
        "training, remote dependencies communicated or recomputed (NeutronStar); disagg: "
        "batch workers sample and load rows for compute workers that cache them (Armada) "
        f"(default {d.engine})",
    )
    g.add_argument(
        "--nproc",
        type=int,
        help="processes to start on this machine through torch.distributed.run (default 1); "
        "ignored under torchrun, which sets the world itself",
    )
    g.add_argument(
        "--plan",
        metavar="FILE",
        help="plan JSON from `shoal plan` (default: part j -> rank j mod N)",
    )
    g.add_argument(
        "--average-every",
        type=int,
        metavar="K",
        help=f"averaging engine: average the models every K epochs (default {d.average_every})",
    )
    g.add_argument(
        "--part-models",
        action="store_true",
        default=None,
        help="averaging engine, more parts than processes: train one model per part and "
        "average all of them each round (SDT-GNN); default: one model per rank carried "
        "through its parts in turn",
    )
    g.add_argument(
        "--local-optimizer-state",
        action="store_true",
        default=None,
        help="averaging engine: keep each rank's own Adam moments instead of averaging them "
        "with the weights (default: averaged)",
    )
    g.add_argument(
        "--dist-timeout",
        type=float,
        metavar="SECONDS",
        help="timeout of every collective; a stuck peer fails the run after this "
        f"(default {d.dist_timeout:g})",
    )
    g.add_argument(
        "--max-restarts",
        type=int,
        metavar="N",
        help="with --nproc: restart all workers up to N times after a failure (torchrun's "
        "--max-restarts); add --checkpoint-dir DIR --resume so a restarted run continues "
        "from the last completed epoch instead of epoch 1 (default 0)",
    )


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """TOML file (if ``--config``) overridden by the flags that were given."""
    given: dict[str, Any] = {
        k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k, None) is not None
    }
    if getattr(args, "no_progress", False):
        given["progress"] = False
    if getattr(args, "local_optimizer_state", None):
        given["average_optimizer"] = False
    given.update(engine_overrides(args))
    if getattr(args, "config", None):
        return TrainConfig.from_toml(args.config, **given)
    return TrainConfig.from_dict(given, origin="command line")


def spec_from_args(args: argparse.Namespace, config: TrainConfig | None = None):
    """The launcher's :class:`~shoal.engines.launch.LaunchSpec` for ``--store``."""
    from shoal.engines.launch import LaunchSpec

    train = config if config is not None else config_from_args(args)
    link = vars(link_config_from_args(args)) if train.task == "link" else None
    return LaunchSpec(store=args.store, train=train, json=args.json, command=list(sys.argv),
                      link=link)  # fmt: skip


def run_train(args: argparse.Namespace) -> int:
    """Handler of ``shoal train``: ``--store`` goes to the distributed launcher."""
    config = config_from_args(args)
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
        return run_distributed(spec_from_args(args, config))
    if not args.graph:
        raise ShoalInputError(
            "no input given",
            fix="pass --graph DIR (a graph directory with features and splits) or --store STORE",
        )
    data = TrainData.from_graph_dir(args.graph)
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
    from shoal.training.linktrainer import LinkData, LinkTrainer

    if not args.graph:
        raise ShoalInputError(
            "no input given", fix="pass --graph DIR (made by shoal data split-edges)"
        )
    link = link_config_from_args(args)
    result = LinkTrainer(config, link, LinkData.from_graph_dir(args.graph)).fit().to_json()
    result["graph"] = str(args.graph)
    k = link.hits_k
    print(f"test_mrr={result['test_mrr']:.4f} val_mrr={result['val_mrr']:.4f} "
          f"test_hits@{k}={result[f'test_hits@{k}']:.4f} epochs={result['epochs']} "
          f"best_epoch={result['best_epoch']} seconds_per_epoch={result['seconds_per_epoch']:.3f}",
          file=sys.stderr)  # fmt: skip
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
--nproc: N processes on this machine through PyTorch's elastic launcher; on a cluster run
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
