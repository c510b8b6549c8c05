"""Link-prediction flags of ``shoal train --task link``: they fill the ``link`` section
(:class:`~shoal.training.link_config.LinkConfig`) of the run's configuration (after a TOML
file's ``[link]`` table)."""

from __future__ import annotations

import argparse

from shoal.nn.linkpred import LOSSES, SCORERS
from shoal.training.link_config import LinkConfig
from shoal.training.linkbatches import NEGATIVE_SAMPLERS
from shoal.training.linkheuristics import HEURISTICS
from shoal.training.presets import LINK_PRESET

__all__ = ["add_link_arguments", "link_options_from_args"]

#: flag destination -> LinkConfig field
_FIELDS = {
    "scorer": "scorer",
    "link_loss": "loss",
    "margin": "margin",
    "num_neg": "num_neg",
    "negatives": "negatives",
    "eval_negatives": "eval_negatives",
    "hits_k": "hits_k",
    "embedding_dim": "embedding_dim",
    "embedding_dir": "embedding_dir",
    "embedding_optimizer": "embedding_optimizer",
    "embedding_lr": "embedding_lr",
    "baseline": "baseline",
}


def add_link_arguments(g: argparse._ArgumentGroup) -> None:
    d = LinkConfig()
    p = LINK_PRESET
    g.add_argument(
        "--task",
        choices=["node", "link"],
        help="node classification (default) or link prediction on a graph split by `shoal "
        "data split-edges` (one process with --graph; --store with --engine minibatch); link "
        "sets its own defaults over the preset's: fanouts "
        f"{','.join(map(str, p['fanouts']))}, hidden {p['hidden']}, batches of "
        f"{p['batch_size']} edges, lr {p['lr']}, dropout {p['dropout']}, weight decay "
        f"{p['weight_decay']}, {p['epochs']} epochs",
    )
    g.add_argument(
        "--scorer",
        choices=sorted(SCORERS),
        help=f"link: edge scorer, dot product or an MLP on h_u * h_v (default {d.scorer})",
    )
    g.add_argument(
        "--link-loss",
        choices=sorted(LOSSES),
        help=f"link: loss of positive against negative logits (default {d.loss})",
    )
    g.add_argument(
        "--margin", type=float, help=f"link: margin of --link-loss margin (default {d.margin})"
    )
    g.add_argument(
        "--num-neg",
        type=int,
        help=f"link: negatives per positive edge in training (default {d.num_neg})",
    )
    g.add_argument(
        "--negatives",
        choices=list(NEGATIVE_SAMPLERS),
        help="link: negative sampler: uniform over all nodes, other positives' "
        "destinations in the batch, or uniform over the nodes of the rank's own "
        f"parts (owner-local: no feature traffic; = uniform in one process) "
        f"(default {d.negatives})",
    )
    g.add_argument(
        "--eval-negatives",
        type=int,
        help="link: uniform negatives each held-out edge is ranked against for MRR "
        f"and Hits@K, fixed per split (default {d.eval_negatives})",
    )
    g.add_argument(
        "--baseline",
        choices=[*HEURISTICS, "none"],
        help="link, one process: a heuristic scored at the end on the test edges against the "
        "same negatives, printed beside the model's test MRR: the score to beat "
        f"(default {d.baseline})",
    )
    g.add_argument(
        "--hits-k", type=int, help=f"link: the K of the reported Hits@K (default {d.hits_k})"
    )
    _add_embedding_arguments(g)


def _add_embedding_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--embedding-dim",
        type=int,
        metavar="D",
        help="link: learn a D-wide embedding per node as the model's input (graphs "
        "without features), kept in a file and updated sparsely (default 0: features)",
    )
    g.add_argument(
        "--embedding-dir",
        metavar="DIR",
        help="link, and featureless node types with --type-embeddings disk: where the "
        "embedding tables and their optimizer state live (default: GRAPH.emb beside the "
        "graph directory)",
    )
    g.add_argument(
        "--embedding-optimizer",
        choices=["adam", "adagrad"],
        help="link: sparse optimizer of the table (default adam, per-row steps)",
    )
    g.add_argument(
        "--embedding-lr", type=float, help="link: the table's learning rate (default --lr)"
    )


def link_options_from_args(args: argparse.Namespace) -> dict[str, object]:
    """The ``link`` section's options given as flags (field -> value)."""
    return {f: getattr(args, a) for a, f in _FIELDS.items() if getattr(args, a, None) is not None}
