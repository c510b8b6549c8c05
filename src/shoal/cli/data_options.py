"""Options and the ``--json`` summary shared by the ``shoal data`` commands that write a graph
directory (:mod:`shoal.cli.data`, :mod:`shoal.cli.data_synth`)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from shoal.utils.featdtype import FEATURE_DTYPES
from shoal.utils.io import parse_size
from shoal.utils.memory import peak_rss_bytes

__all__ = ["add_scratch_option", "add_write_options", "args_of", "graph_summary", "write_options"]


def args_of(args: argparse.Namespace, names: str) -> dict[str, Any]:
    """``args``' values of the space-separated ``names``, by name (a config's fields)."""
    return {n: getattr(args, n) for n in names.split()}


def graph_summary(g, t0: float) -> dict[str, Any]:
    """The ``--json`` summary of a graph directory a command wrote, ``t0`` its start time."""
    return {
        "path": str(g.path),
        "num_nodes": g.num_nodes,
        "num_edges": g.num_edges,
        "directed": g.directed,
        "feature_dim": g.feature_dim,
        "num_classes": g.num_classes,
        "splits": g.meta.get("splits", {}),
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_rss_bytes": peak_rss_bytes(),
    }


def add_write_options(p: argparse.ArgumentParser, *, undirected: bool = True) -> None:
    """The options of every command that writes a graph directory (import, synth)."""
    if undirected:
        p.add_argument(
            "--undirected",
            action="store_true",
            help="add the reverse of every edge (stored edges double; default: as given)",
        )
    p.add_argument(
        "--dedup", action="store_true", help="drop repeated (src, dst) pairs (external sort)"
    )
    p.add_argument("--drop-self-loops", action="store_true", help="drop (v, v) edges")
    p.add_argument(
        "--sort-memory",
        default="256MiB",
        help="memory cap of the external sort used by --dedup (default 256MiB)",
    )
    add_scratch_option(p, "the external sort of --dedup", "beside DIR (in its parent folder)")
    p.add_argument("--name", help="dataset name stored in meta.json (default: DIR's name)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DIR")
    p.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")


def write_options(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields of :func:`add_write_options`' flags (all but ``--undirected``)."""
    values = args_of(args, "dedup drop_self_loops scratch_dir name overwrite")
    return {**values, "sort_memory": parse_size(args.sort_memory)}


def add_feature_dtype_option(p: argparse.ArgumentParser, *, default: str | None, keep: str) -> None:
    """``--feature-dtype NAME``: the stored features' dtype (``default``; None: ``keep`` says
    what is kept)."""
    p.add_argument(
        "--feature-dtype",
        choices=FEATURE_DTYPES,
        default=default,
        metavar="{" + ",".join(FEATURE_DTYPES) + "}",
        help=f"stored features' dtype (default {default or keep}): float16 and bfloat16 halve "
        "their bytes, int8 (a float32 scale per row) quarters them; the model computes in "
        "float32 (docs/format.md#feature-dtypes)",
    )


def add_scratch_option(p: argparse.ArgumentParser, what: str, default: str) -> None:
    """``--scratch-dir`` for the temporary files of ``what`` (``default``: where they go)."""
    p.add_argument(
        "--scratch-dir",
        metavar="DIR",
        help=f"folder for the temporary run files of {what}, in a private subfolder removed "
        f"afterwards (default: {default}; never the system temp dir, often RAM-backed)",
    )
