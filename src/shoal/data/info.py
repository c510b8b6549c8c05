"""Summary statistics of a graph directory (``shoal data info``).

One streaming pass over the edges gives the degrees (:meth:`GraphDir.degrees`); everything else
is O(N). The power-law indicators are the ones a reader can check by eye:

- ``max_to_mean``: max degree / mean degree (about 3-5 for Erdos-Renyi graphs of mean degree
  ~ 20, hundreds for scale-free graphs);
- ``ccdf_loglog_slope``: least-squares slope of log P(D >= d) against log d over the degrees
  at or above the median positive degree (a power law P(d) ~ d^-alpha has CCDF slope
  1 - alpha; Poisson tails fall off far faster than any straight line);
- ``alpha_mle``: the discrete maximum-likelihood exponent of Clauset, Shalizi & Newman,
  "Power-law distributions in empirical data", SIAM Review 51(4), 2009, eq. (3.7):
  ``alpha = 1 + n / sum(ln(d_i / (d_min - 1/2)))`` over the ``n`` degrees ``d_i >= d_min``,
  with ``d_min`` = the median positive degree (not fitted).

``power_law_like`` is a heuristic (``max_to_mean >= 10`` and ``alpha_mle`` in [1.5, 3.5] and a
CCDF slope below -0.5), not a statistical test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shoal.data.format import SPLITS, GraphDir

__all__ = ["degree_stats", "format_info", "graph_info", "power_law_indicators"]

_PERCENTILES = (1, 10, 25, 50, 75, 90, 99, 99.9)


def power_law_indicators(deg: np.ndarray) -> dict[str, Any]:
    """Heavy-tail indicators of a degree sequence (see the module docstring)."""
    d = np.asarray(deg, dtype=np.int64)
    pos = d[d > 0]
    out: dict[str, Any] = {
        "max_to_mean": None,
        "ccdf_loglog_slope": None,
        "alpha_mle": None,
        "d_min": None,
        "power_law_like": False,
    }
    if pos.size < 2:
        return out
    mean = float(d.mean())
    out["max_to_mean"] = float(pos.max() / mean) if mean > 0 else None
    dmin = max(1, int(np.median(pos)))
    tail = pos[pos >= dmin]
    out["d_min"] = dmin
    if tail.size >= 2:
        s = np.log(tail / (dmin - 0.5)).sum()
        out["alpha_mle"] = float(1.0 + tail.size / s) if s > 0 else None
    vals, counts = np.unique(pos, return_counts=True)
    ccdf = np.cumsum(counts[::-1])[::-1] / pos.size  # P(D >= vals)
    sel = vals >= dmin
    if sel.sum() >= 3:
        slope = np.polyfit(np.log(vals[sel]), np.log(ccdf[sel]), 1)[0]
        out["ccdf_loglog_slope"] = float(slope)
    a, m, sl = out["alpha_mle"], out["max_to_mean"], out["ccdf_loglog_slope"]
    out["power_law_like"] = bool(
        a is not None
        and m is not None
        and sl is not None
        and m >= 10
        and 1.5 <= a <= 3.5
        and sl < -0.5
    )
    return out


def degree_stats(deg: np.ndarray) -> dict[str, Any]:
    """min, max, mean, median, std, percentiles, zero-degree count of a degree array."""
    d = np.asarray(deg, dtype=np.int64)
    if d.size == 0:
        return {"min": None, "max": None, "mean": None, "median": None}
    pct = np.percentile(d, _PERCENTILES)
    return {
        "min": int(d.min()),
        "max": int(d.max()),
        "mean": float(d.mean()),
        "median": float(np.median(d)),
        "std": float(d.std()),
        "percentiles": {f"p{p:g}": float(v) for p, v in zip(_PERCENTILES, pct)},
        "zero": int((d == 0).sum()),
    }


def graph_info(g: GraphDir) -> dict[str, Any]:
    """A JSON-ready summary of a graph directory (one streaming pass over the edges)."""
    out_deg, in_deg = g.degrees()
    # the "degree" of a node: out-degree when both directions are stored (each undirected
    # edge counted once per endpoint), out + in for a directed graph
    deg = out_deg if not g.directed else out_deg + in_deg
    info: dict[str, Any] = {
        "path": str(g.path),
        "name": g.name,
        "format_version": g.meta.get("format_version"),
        "num_nodes": g.num_nodes,
        "num_edges": g.num_edges,
        "directed": g.directed,
        "edge_dtype": g.edge_dtype.name,
        "self_loops": g.meta.get("self_loops"),
        "deduplicated": g.meta.get("deduplicated"),
        "isolated_nodes": int(((out_deg == 0) & (in_deg == 0)).sum()),
        "degree": {
            "kind": "out (= in, both directions stored)" if not g.directed else "in + out",
            **degree_stats(deg),
            "power_law": power_law_indicators(deg),
        },
    }
    if g.directed:
        info["out_degree"] = degree_stats(out_deg)
        info["in_degree"] = degree_stats(in_deg)
    x = g.features()
    if x is not None:
        info["features"] = {"shape": [int(s) for s in x.shape], "dtype": x.dtype.name}
        if x.shape[0]:
            block = x[: min(x.shape[0], 10000)]
            info["features"]["sample_rows"] = int(block.shape[0])
            info["features"]["sample_mean"] = float(np.asarray(block, dtype=np.float64).mean())
            info["features"]["sample_nonzero_frac"] = float((np.asarray(block) != 0).mean())
    else:
        info["features"] = None
    y = g.labels()
    if y is not None:
        y = np.asarray(y)
        c = g.num_classes or 0
        counts = np.bincount(y[y >= 0], minlength=c)
        info["labels"] = {
            "num_classes": int(c),
            "class_counts": [int(v) for v in counts],
            "unlabelled": int((y < 0).sum()),
        }
    else:
        info["labels"] = None
    splits: dict[str, int] = {}
    split_classes: dict[str, list[int]] = {}
    for s in SPLITS:
        idx = g.split(s)
        if idx is None:
            continue
        splits[s] = int(idx.shape[0])
        if y is not None and idx.shape[0]:
            ys = y[np.asarray(idx)]
            split_classes[s] = [
                int(v) for v in np.bincount(ys[ys >= 0], minlength=g.num_classes or 0)
            ]
    info["splits"] = splits
    info["split_class_counts"] = split_classes
    info["csr_views"] = [k for k in ("in", "out") if g.has_csr(k)]
    info["types"] = _types(g)
    return info


def _types(g: GraphDir) -> dict[str, Any] | None:
    """A typed graph's node types (count, features) and relations (edge count)."""
    s = g.schema
    if s is None:
        return None
    return {
        "target": s.target,
        "node_types": [
            {
                "name": t.name,
                "count": int(t.count),
                "offset": int(t.offset),
                "feature_dim": t.feature_dim,
            }
            for t in s.node_types
        ],
        "edge_types": [
            {"src": e.src, "relation": e.relation, "dst": e.dst, "count": int(e.count)}
            for e in s.edge_types
        ],
    }


def format_info(info: dict[str, Any]) -> str:
    """Human-readable text of :func:`graph_info`'s result."""
    lines = [
        f"graph      {info['name']}  ({info['path']})",
        f"nodes      {info['num_nodes']:,}",
        f"edges      {info['num_edges']:,} stored ({info['edge_dtype']}), "
        f"{'directed' if info['directed'] else 'undirected (both directions stored)'}",
        f"           self-loops {info['self_loops']}, isolated nodes {info['isolated_nodes']:,}",
    ]
    d = info["degree"]
    if d.get("min") is not None:
        p = d["percentiles"]
        lines.append(
            f"degree     [{d['kind']}] min {d['min']}  median {d['median']:g}  "
            f"mean {d['mean']:.2f}  p90 {p['p90']:g}  p99 {p['p99']:g}  max {d['max']}"
        )
        pl = d["power_law"]
        if pl["max_to_mean"] is not None:
            parts = [f"max/mean {pl['max_to_mean']:.1f}"]
            if pl["alpha_mle"] is not None:
                parts.append(f"alpha (MLE, d>={pl['d_min']}) {pl['alpha_mle']:.2f}")
            if pl["ccdf_loglog_slope"] is not None:
                parts.append(f"CCDF log-log slope {pl['ccdf_loglog_slope']:.2f}")
            verdict = "power-law-like" if pl["power_law_like"] else "not power-law-like"
            lines.append("tail       " + "  ".join(parts) + f" -> {verdict}")
    for k in ("out_degree", "in_degree"):
        if k in info and info[k].get("min") is not None:
            s = info[k]
            lines.append(
                f"{k.replace('_degree', '-deg'):<10} min {s['min']}  median {s['median']:g}  "
                f"mean {s['mean']:.2f}  max {s['max']}  zero {s['zero']:,}"
            )
    f = info["features"]
    lines.append(
        f"features   {f['shape'][0]:,} x {f['shape'][1]} {f['dtype']}" if f else "features   none"
    )
    lab = info["labels"]
    if lab:
        lines.append(
            f"labels     {lab['num_classes']} classes, counts {lab['class_counts']}, "
            f"unlabelled {lab['unlabelled']:,}"
        )
    else:
        lines.append("labels     none")
    if info["splits"]:
        lines.append("splits     " + "  ".join(f"{k} {v:,}" for k, v in info["splits"].items()))
    else:
        lines.append("splits     none")
    lines.append(f"csr views  {', '.join(info['csr_views']) or 'none'}")
    ty = info.get("types")
    if ty:
        for t in ty["node_types"]:
            feat = f"{t['feature_dim']} features" if t["feature_dim"] else "no features"
            mark = "  (target)" if t["name"] == ty["target"] else ""
            lines.append(
                f"node type  {t['name']}: {t['count']:,} nodes (ids {t['offset']:,}..), "
                f"{feat}{mark}"
            )
        for e in ty["edge_types"]:
            lines.append(
                f"relation   ({e['src']}, {e['relation']}, {e['dst']}): {e['count']:,} edges"
            )
    return "\n".join(lines)
