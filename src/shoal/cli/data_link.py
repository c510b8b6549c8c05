"""``shoal data split-edges``: train / val / test edge sets for link prediction."""

from __future__ import annotations

import argparse
import time

from shoal.cli.data_options import args_of
from shoal.utils.io import write_json_output
from shoal.utils.memory import peak_rss_bytes

__all__ = ["register_split_edges"]


def _cmd_split_edges(args: argparse.Namespace) -> int:
    from shoal.data.linksplit import EdgeSplitConfig, split_edges

    t0 = time.perf_counter()
    names = "val test seed overwrite target_relation eval_negatives"
    cfg = EdgeSplitConfig(**args_of(args, names))
    g = split_edges(args.graph, args.out, cfg)
    ls = g.meta["link_split"]
    s = {
        "path": str(g.path),
        "num_nodes": g.num_nodes,
        "train_edges": g.num_edges,
        "val_edges": ls["val_edges"],
        "test_edges": ls["test_edges"],
        "seed": cfg.seed,
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_rss_bytes": peak_rss_bytes(),
    }
    if "target_relation" not in ls:
        print(
            f"split {args.graph} -> {g.path}: {g.num_edges:,} training edges (the message-passing "
            f"graph), {ls['val_edges']:,} val and {ls['test_edges']:,} test "
            f"{'pairs' if not g.directed else 'edges'} held out (seed {cfg.seed}) "
            f"in {s['seconds']:.1f}s"
        )
    else:
        neg = ls["negatives"]
        s.update(target_relation=ls["target_relation"], negative_type=neg["node_type"])
        print(
            f"split {args.graph} -> {g.path}: relation {ls['target_relation']}: "
            f"{ls['stored_edges']['train']:,} training edges, {ls['val_edges']:,} val and "
            f"{ls['test_edges']:,} test edges held out ({ls['stored_edges']['reverse_removed']:,} "
            f"reverse rows removed), {neg['per_positive']} evaluation negatives each of node "
            f"type {neg['node_type']}; {g.num_edges:,} edges in the message-passing graph "
            f"(seed {cfg.seed}) in {s['seconds']:.1f}s"
        )
    write_json_output(args.json, s)
    return 0


def register_split_edges(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "split-edges",
        help="hold out val/test edges for link prediction (streaming, O(1) memory)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""Split GRAPH's edges into training edges (the message-passing graph written
to --out, with GRAPH's features, labels and node splits) and held-out positive
edges (--out/link_val.npy, --out/link_test.npy: (k, 2) int64 src, dst).

An edge's split is a hash of its unordered pair and --seed: both directions of an
undirected edge (and the reverse of a directed one) land in the same split, so no
held-out pair leaks into message passing. Fractions are expected values; the
counts drawn are printed and recorded in meta.json (link_split). Self-loops stay
in training. Undirected graphs store each held-out pair once (src < dst).

A typed graph (node types and relations) predicts one relation, --target-relation
(required with several relations): only its edges are split, its declared reverse
relation loses the held-out pairs too, every other relation stays whole. The output
is a typed graph directory (schema, every type's features) with held-out edges in
global ids and --out/link_{val,test}_neg.npy: (k, --eval-negatives) negatives per
held-out edge, uniform over the relation's destination node type; meta.json's
link_split names the target_relation and the negatives' id range.

example: shoal data split-edges data/cora --val 0.05 --test 0.1 --out data/cora-link
example: shoal data split-edges data/mag --target-relation author__writes__paper --out data/mag-link""",
    )
    p.add_argument("graph", help="graph directory")
    p.add_argument("--out", required=True, help="graph directory to create")
    p.add_argument(
        "--val", type=float, default=0.05, help="fraction held out for validation (0.05)"
    )
    p.add_argument("--test", type=float, default=0.1, help="fraction held out for testing (0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split (0)")
    p.add_argument(
        "--target-relation",
        metavar="NAME",
        help="typed graphs: the relation to predict, a relation name or src__relation__dst "
        "(default: the only relation; required with several)",
    )
    p.add_argument(
        "--eval-negatives",
        type=int,
        metavar="K",
        help="typed graphs: evaluation negatives per held-out edge, of the relation's "
        "destination type (100)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")
    p.set_defaults(func=_cmd_split_edges)
