"""The flags of ``shoal train`` (:func:`add_train_arguments`) and the
:class:`~shoal.training.TrainConfig` they fill (:func:`config_from_args`): groups input, model,
optimisation, run, output, memory and distributed; every flag defaults to None so that a
``--config`` TOML file can fill it, and flags given win."""

from __future__ import annotations

import argparse
from typing import Any

from shoal.cli.link_options import add_link_arguments, link_options_from_args
from shoal.cli.report import add_report_argument
from shoal.engines.config import engine_option_owners, read_config, read_config_file
from shoal.engines.registry import engine_names, get_spec
from shoal.nn import MODELS, TYPED_MODELS
from shoal.rows.budget import STRUCTURE_MODES
from shoal.rows.featstore import CACHE_POLICIES
from shoal.sample.sampler import parse_fanouts
from shoal.training import TrainConfig
from shoal.training.config import PRESETS
from shoal.training.presets import LINK_PRESET
from shoal.training.sections import SAMPLE_ON
from shoal.utils.device import check_device_spec

__all__ = ["CONFIG_FLAGS", "add_train_arguments", "config_from_args"]

#: Flag destinations that map one-to-one onto TrainConfig fields.
CONFIG_FLAGS = tuple(
    (
        "model model_factory type_embeddings task preset fanouts fanouts_order batch_size hidden "
        "epochs min_steps lr dropout weight_decay patience eval_every eval_test eval_batch_size "
        "eval_halo eval_fanouts seed threads device normalize_features heads checkpoint_dir resume metrics_file "
        "scratch_dir engine nproc plan dist_timeout max_restarts memory io_threads pack_epochs "
        "cache_policy structure rows_backend sample_on device_memory"
    ).split()
)


def _fanouts(value: str) -> tuple[int, ...]:
    try:
        return parse_fanouts(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _device(text: str) -> str:
    try:
        return check_device_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _eval_every(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of epochs or auto, got {text!r}"
        ) from None


def add_train_arguments(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Add the trainer's flags (defaults None so a --config file can fill them)."""
    d = TrainConfig()
    titles = {
        "input": "input",
        "model": "model",
        "link": "link prediction (--task link)",
        "optimisation": "optimisation",
        "run": "run",
        "output": "output",
        "memory": "memory (out-of-core)",
        "distributed": "distributed (with --store)",
    }
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
    _add_model_arguments(groups["model"], d)
    g = groups["optimisation"]
    g.add_argument("--epochs", type=int, help="maximum epochs (default: the preset's)")
    g.add_argument(
        "--min-steps",
        type=int,
        help="train at least this many optimizer steps: the epochs grow on a small training "
        "set (default: the preset's when --epochs is not given, 200 for sage; else 0)",
    )
    g.add_argument(
        "--batch-size",
        type=int,
        help=f"seeds per batch (default {d.sampling.batch_size}; positive edges with --task link, "
        f"default {LINK_PRESET['batch_size']})",
    )
    g.add_argument("--lr", type=float, help="Adam learning rate (default: the preset's)")
    g.add_argument("--dropout", type=float, help="dropout (default: the preset's)")
    g.add_argument("--weight-decay", type=float, help="L2 penalty (default: the preset's)")
    g.add_argument(
        "--patience",
        type=int,
        help="early stopping after N evaluations without a better "
        "validation accuracy; 0 = off (default 0)",
    )
    add_link_arguments(groups["link"])
    _add_run_arguments(groups["run"], d)
    _add_eval_fanouts(groups["run"])
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
    for name in engine_names():  # each engine's own flags, in a group of its own
        spec = get_spec(name)
        if spec.add_arguments is not None:
            groups[f"engine:{name}"] = p.add_argument_group(f"{name} engine (--engine {name})")
            spec.add_arguments(groups[f"engine:{name}"])
    return groups


def _add_model_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument(
        "--model",
        choices=sorted(MODELS) + list(TYPED_MODELS),
        default=None,
        help=f"model (default {d.model.name}; rgcn and rgat: typed graphs only)",
    )
    _add_factory_argument(g)
    g.add_argument(
        "--preset",
        choices=list(PRESETS),
        help="where the model's unset hyper-parameters come from: paper = the model's paper "
        "(GCN: hidden 64, dropout 0.5, lr 0.01, L2 5e-4, 200 epochs; GAT: 8 heads x 8, "
        "dropout 0.6, lr 0.005; SAGE: hidden 256, lr 0.01, 10 epochs; 2 layers sampled 25,10), "
        "large = large graphs (3 hops 15,10,5, hidden 256, lr 0.003, 20 epochs) (default "
        f"{d.preset}; the values chosen are printed at the start)",
    )
    g.add_argument("--hidden", type=int, help="hidden width (default: the preset's)")
    g.add_argument(
        "--fanouts",
        type=_fanouts,
        help="neighbours per hop, hop 1 first (PyG's num_neighbors order; DGL's NeighborSampler "
        "lists the input layer first: DGL [5, 10, 15] is --fanouts 15,10,5); all (or -1, "
        "written --fanouts=-1,-1) takes every neighbour; the count is the number of layers "
        "(default: the preset's)",
    )
    g.add_argument(
        "--fanouts-order",
        choices=["hop-first", "input-first"],
        help="how --fanouts is written: hop-first (default) or input-first (DGL's order, for "
        "ported scripts: --fanouts 5,10,15 --fanouts-order input-first = --fanouts 15,10,5)",
    )
    g.add_argument("--heads", type=int, help="GAT attention heads (default: the preset's, 8)")
    g.add_argument(
        "--normalize-features",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="row-normalise features when gathered, as Kipf & Welling on bag-of-words "
        "(default: the preset's: auto for GCN, GAT and SGC, i.e. when the rows are "
        "non-negative with at most 64 non-zeros on average; off for the others)",
    )


def _add_factory_argument(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--model-factory",
        metavar="MODULE:FUNCTION",
        help="build the model with your own function (keywords in_dim, hidden, out_dim, "
        "num_layers, dropout), e.g. a torch_geometric.nn.models.GraphSAGE called as "
        "model(x, edge_index); replaces --model (engines hec and fullgraph need shoal's models). "
        "On a typed graph it also gets metadata (PyG's node and edge types, as to_hetero takes) "
        "and target, and its module is called as model(x_dict, edge_index_dict)",
    )
    g.add_argument(
        "--type-embeddings",
        choices=("auto", "memory", "disk"),
        help="typed graphs: where featureless node types keep their learned embeddings: "
        "memory (nn.Embedding), disk (a table per type in --embedding-dir or "
        "<graph>.emb/<type>, rows read per batch, sparse Adam), auto: disk when the tables "
        "with Adam's moments exceed a quarter of --memory (default auto; one process)",
    )


def _add_run_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument("--seed", type=int, help=f"random seed (default {d.run.seed})")
    g.add_argument(
        "--threads",
        type=int,
        help="torch/numba threads of each process (default: all cores for one process, "
        "a model step on every shape of bench/train.py is fastest so, "
        "bench/results/train_profile.md; with --nproc or under torchrun each rank takes its "
        "share, the cores divided by the ranks on the machine)",
    )
    g.add_argument(
        "--device",
        type=_device,
        help="where the model computes: cpu, cuda (each process its local rank's "
        "GPU) or cuda:i; see --sample-on for where batches are produced (default cpu)",
    )
    g.add_argument(
        "--sample-on",
        choices=SAMPLE_ON,
        help="where one process produces its batches: host (numba sampler, host store, "
        "batches copied), device (sampled by torch on the model's device over a copy of the "
        "CSR, rows from a device cache in front of the host store; the same batches), auto: "
        "device on a GPU for an untyped graph's node task when the CSR fits --device-memory "
        f"(default {d.run.sample_on})",
    )
    g.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="device memory for the CSR's copy and the cached rows with --sample-on device "
        "(default: half the GPU's free memory; on the CPU 0, no rows cached)",
    )
    g.add_argument(
        "--eval-every",
        type=_eval_every,
        help="evaluate every N epochs, or auto: every k epochs, k estimated from the graph's "
        "sizes so that exact evaluation takes about a fifth of the run or less (the same in "
        f"every run; the last epoch is always evaluated; default {d.eval.every})",
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
        help=f"nodes per inference batch (default {d.eval.batch_size})",
    )
    g.add_argument(
        "--eval-halo",
        choices=("served", "stored"),
        help="distributed exact evaluation under a memory budget: served, each rank reads "
        "only its own rows and sends its peers the messages their blocks need; stored, each "
        f"rank reads its part's halo rows from its own disk for every block (default "
        f"{d.eval.halo})",
    )


def _add_eval_fanouts(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--eval-fanouts",
        type=_fanouts,
        help="sampled validation during training: neighbours per hop (hop 1 first, one per "
        "layer, as --fanouts), each evaluation on the same fixed draws (GraphStorm's "
        "eval_fanout); the final evaluation stays exact (default: every evaluation exact)",
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
        "--rows-backend",
        metavar="NAME",
        help="what files of rows (features, packs, neighbour lists read from disk) are read "
        "through, in every process, training and evaluation: file (planned O_DIRECT reads, "
        "never the page cache), mmap (the page cache), or one registered through the entry "
        "point group shoal.row_backends or SHOAL_ROW_BACKENDS=name=module:callable "
        f"(default {d.memory.rows_backend})",
    )
    g.add_argument(
        "--io-threads",
        type=int,
        metavar="N",
        help=f"concurrent feature read requests (default {d.memory.io_threads})",
    )
    g.add_argument(
        "--pack-epochs",
        type=int,
        metavar="K",
        help="when the features do not fit the memory budget: read the uncached rows of K "
        "epochs with one sweep of the feature file into a pack file per epoch in the scratch "
        "directory (--scratch-dir), so each epoch reads only its own rows (DiskGNN-style "
        "packing; 0 = off, every window sweeps the feature file; default 8, fewer when the "
        "scratch disk lacks the room; with the graph structure on disk the packed epochs' "
        "samples are kept in the scratch directory, and minibatch packs only when K is "
        "given; single-process trainer, minibatch and averaging engines)",
    )
    g.add_argument(
        "--cache-policy",
        choices=CACHE_POLICIES,
        help="which feature rows the static cache holds when the features do not fit the "
        "memory budget: presample = the rows the most batches of the first sampled epoch "
        "need (GNNLab's pre-sampling policy), degree = the highest in-degrees (default "
        f"{d.memory.cache_policy}; single-process trainer and averaging engine)",
    )
    g.add_argument(
        "--structure",
        choices=STRUCTURE_MODES,
        help="where the graph's CSR lives while training: auto = in the process's memory, "
        "counted in the budget, whenever it fits beside the two smallest feature windows, else "
        "on disk (its row index in memory, sampled neighbour entries read with planned direct "
        "reads, a group of batches' in one sorted pass per hop, no page cache); memory / disk "
        f"force it (default {d.memory.structure}; single-process trainer, averaging and "
        "minibatch engines; hec, and minibatch on a typed store or the link task, always hold "
        "it in memory)",
    )


def _add_distributed_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    engines = "; ".join(f"{n}: {get_spec(n).summary}" for n in engine_names())
    g.add_argument(
        "--engine",
        choices=[*engine_names(), "auto"],
        help=f"{engines}; auto: probe this machine's sampling, gather, compute and exchange "
        "costs and take the engine with the lowest estimated epoch (printed and recorded as "
        "auto_plan in the run JSON; `shoal plan --store` shows the same estimates) (default "
        f"{d.engine.name})",
    )
    g.add_argument(
        "--nproc",
        type=int,
        help="processes to start on this machine, with torchrun's environment (default 1); "
        "ignored under torchrun, which sets the world itself",
    )
    g.add_argument(
        "--plan",
        metavar="FILE",
        help="plan JSON from `shoal plan` (default: part j -> rank j mod N)",
    )
    g.add_argument(
        "--dist-timeout",
        type=float,
        metavar="SECONDS",
        help="timeout of every collective; a stuck peer fails the run after this "
        f"(default {d.engine.dist_timeout:g})",
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
    """TOML file (if ``--config``) overridden by the flags that were given, read by
    :func:`~shoal.engines.config.read_config` (the engines' own flags included: their
    ``dest`` are their configuration's fields)."""
    keys = (*CONFIG_FLAGS, *engine_option_owners())
    given: dict[str, Any] = {
        k: getattr(args, k) for k in keys if getattr(args, k, None) is not None
    }
    if getattr(args, "no_progress", False):
        given["progress"] = False
    link = link_options_from_args(args)
    if link:
        given["link"] = link
    if getattr(args, "config", None):
        return read_config_file(args.config, given)
    return read_config(given, origin="command line")
