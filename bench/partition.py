"""Partitioners: quality, speed and peak memory of every registered algorithm.

Every run is one subprocess ``python -m shoal partition GRAPH <variant> --parts P --seed 0
--json F`` (the CLI loads only the partition command: no torch), so its peak RSS is that
process's ``ru_maxrss``. Stages:

- ``reference``: every :data:`VARIANTS` on the nine :data:`REFERENCE_GRAPHS`, p = 4, 8, 16:
  means, the issue's reference table, targets, the papers' rules against shoal's;
- ``families``: :data:`FAMILY_VARIANTS` on every graph of :data:`FAMILIES` (issue 31), in
  both stream orders;
- ``synthetic``: :data:`SYNTHETIC_VARIANTS` on the 1M-node :data:`SYNTHETIC` graphs (memory
  when the edges grow 4x at a fixed number of nodes), p = 8, then 4 and 16;
- ``speed``: each algorithm alone (no balance pass, no metrics) in a fresh process, the phase
  timers switched to process CPU time (:data:`SPEED_SNIPPET`), on R-MAT 1M/20M.

Graphs (built once under ``WORK/partition/graphs``) are undirected and simple (``--undirected
--dedup --drop-self-loops``), their edge rows shuffled with seed 0; ``NAME@sorted`` is the same
graph with its rows as the dedup wrote them (by source). Their CSR views are built when they
are prepared, so no timed run pays for the external sort.

Usage::

    python bench/partition.py [--stage all|reference|families|synthetic|speed]
                              [--graphs ...] [--parts ...] [--variants ...] [--timeout 1800]
    python bench/partition.py --stage ... --resume [--redo VARIANT ...]   # add to the JSON
    python bench/partition.py --report-only                              # re-render the .md

The JSON and the markdown are rewritten after every run; ``--resume`` keeps the runs already in
the JSON (every command that added runs is listed) and runs the missing ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np

import common
from common import SHARED, SHOAL, WORK

PARTITION_WORK = WORK / "partition"
#: The graphs the issue's reference table averages over.
REFERENCE_GRAPHS = [
    "amazon_photo",
    "amazon_computers",
    "coauthor_physics",
    "facebook_pagepage",
    "ca_astroph",
    "soc_brightkite",
    "fb100_cornell5",
    "mesh_wing",
    "github_musae",
]
#: Synthetic graphs: name -> ``shoal data synth`` arguments, or ``("road", kwargs)`` for
#: :func:`shoal.data.synth.road.generate_road` (no CLI sub-command). ``rmat_smoke``: --smoke's.
SYNTHETIC = {
    "rmat_1m_5m": ["rmat", "--nodes", "1000000", "--edges", "5000000", "--undirected"],
    "rmat_1m_20m": ["rmat", "--nodes", "1000000", "--edges", "20000000", "--undirected"],
    "dcsbm_1m_20m": ["dcsbm", "--nodes", "1000000", "--edges", "20000000", "--features", "0"],
}
FAMILY_SYNTHETIC: dict[str, list[str] | tuple[str, dict[str, Any]]] = {
    "rmat_16k": ["rmat", "--nodes", "16384", "--edges", "262144", "--undirected"],
    "rmat_64k": ["rmat", "--nodes", "65536", "--edges", "262144", "--undirected"],
    "dcsbm_50k": ["dcsbm", "--nodes", "50000", "--edges", "250000", "--features", "0"],
    "road_200": ("road", {"width": 200, "height": 200}),
    "rmat_smoke": ["rmat", "--nodes", "2048", "--edges", "16384", "--undirected"],
}
#: Graph families (issue 31): family -> graphs, the nine reference graphs first.
FAMILIES: dict[str, list[str]] = {
    "co-purchase": ["amazon_photo", "amazon_computers"],
    "collaboration": ["coauthor_physics", "ca_astroph", "ca_condmat", "ca_hepph"],
    "social": [
        "facebook_pagepage",
        "soc_brightkite",
        "fb100_cornell5",
        "github_musae",
        "ego_facebook",
        "blogcatalog_openne",
        "blogcatalog_attr",
        "flickr_attr",
    ],
    "trust / vote": ["soc_epinions_nr", "wiki_vote"],
    "wikipedia": ["squirrel_filtered", "chameleon_filtered", "actor"],
    "co-participation": ["tolokers"],
    "citation": ["cora", "citeseer"],
    "mesh": ["mesh_wing", "mesh_4elt"],
    "road-like (synthetic)": ["road_200"],
    "power-law R-MAT (synthetic)": ["rmat_16k", "rmat_64k"],
    "planted communities DC-SBM (synthetic)": ["dcsbm_50k"],
}
FAMILY_OF = {g: f for f, gs in FAMILIES.items() for g in gs}
FAMILY_GRAPHS = [g for gs in FAMILIES.values() for g in gs]
SORTED_SUFFIX = "@sorted"
#: --smoke: one tiny graph plays the reference set and the only family
SMOKE = {"reference_graphs": ["rmat_smoke"], "families": {"tiny R-MAT": ["rmat_smoke"]}}


def base_name(name: str) -> str:
    """The graph of a benchmark graph name (without the ``@sorted`` stream order)."""
    return name.removesuffix(SORTED_SUFFIX)


def family_of(name: str) -> str:
    return FAMILY_OF.get(base_name(name), "other")


def _algo(name: str, *options: str) -> list[str]:
    opts = [a for o in options for a in ("--option", o)]
    return ["--algo", name, *opts, "--refine-passes", "0"]


_PLAIN = ["metis", "kaminpar", "grem", "spring", "hdrf", "dbh", "greedy", "2ps-l", "ldg", "fennel"]
#: label -> ``shoal partition`` arguments (``default``: none, the CLI's default configuration)
VARIANTS: dict[str, list[str]] = {
    **{a: _algo(a) for a in _PLAIN[:3]},
    "grem_1pct": _algo("grem", "window=0.01"),
    "grem_fixed_1pct": _algo("grem", "window=0.01", "refine=false"),
    **{a: _algo(a) for a in [*_PLAIN[3:], "hash", "random"]},
    "default": [],
    # issue 16: the papers' rules next to shoal's (see RULE_PAIRS)
    "spring_paper": _algo("spring", "representative=richest"),
    "grem_paper": _algo("grem", "move_rule=paper", "exact_capacity=true", "seed_history=true"),
    "grem_seed_history": _algo("grem", "seed_history=true"),
    "default_no_seed_history": ["--option", "seed_history=false"],
    "grem_1pct_no_seed_history": _algo("grem", "window=0.01", "seed_history=false"),
    "grem_no_seed_history": _algo("grem", "seed_history=false"),
    "grem_paper_assign": _algo("grem", "move_rule=paper", "exact_capacity=true"),
}
#: (the default variant, an alternative, what differs) for the rules comparison (issue 16)
RULE_PAIRS = [
    (
        "spring",
        "spring_paper",
        "SPRING representative: highest-degree member (default) vs the member whose richest "
        "neighbour has the highest degree (Alg. 1 lines 19-21)",
    ),
    (
        "grem",
        "grem_no_seed_history",
        "GREM first window: the seeded window's neighbour counts kept as history (Alg. 1 "
        "lines 9-10; the default since issue 31) vs history from 0 (the default before)",
    ),
    (
        "grem",
        "grem_paper_assign",
        "GREM assign: 1.10x slack, moves on strict gains (default) vs P = ceil(|V|/p), moves "
        "on ties (Alg. 2 assign)",
    ),
    ("grem", "grem_paper", "GREM: the default vs all three of the paper's rules"),
    (
        "grem_1pct",
        "grem_1pct_no_seed_history",
        "GREM with 1% windows: seed history kept (default since issue 31) vs from 0",
    ),
    (
        "default",
        "default_no_seed_history",
        "Default partitioner (GREM, |V|-edge windows, edge balance, 4 restreaming passes): "
        "GREM's seed history kept (default since issue 31) vs from 0",
    ),
]
SYNTHETIC_VARIANTS = ["metis", "kaminpar", "default", *_PLAIN[2:], "hash"]
FAMILY_VARIANTS = ["metis", "grem", "grem_no_seed_history"]
STREAMING = {"grem", "spring", "hdrf", "dbh", "greedy", "2ps-l", "ldg", "fennel", "default"}
SPEED_ALGOS = ["hdrf", "spring", "2ps-l", "dbh", "greedy", "ldg", "fennel", "grem"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- graphs
def _shuffle_copy(src: Path, dst: Path, seed: int | None) -> None:
    """Rewrite ``src``'s edges in a seeded random order into ``dst`` (splits and labels
    kept); with ``seed=None`` in their order in ``src``."""
    from shoal.data.format import GraphDir, GraphWriter

    g = GraphDir.open(src)
    e = np.array(g.edge_stream().memmap())
    if seed is not None:
        e = e[np.random.default_rng(seed).permutation(e.shape[0])]
    with GraphWriter(dst, num_nodes=g.num_nodes, directed=g.directed, name=g.name) as w:
        for s in range(0, e.shape[0], 1 << 22):
            w.add_edges(e[s : s + (1 << 22)])
        del e
        w.finish_edges()
        for split in ("train", "val", "test"):
            idx = g.split(split)
            if idx is not None:
                w.write_split(split, np.asarray(idx))
        y = g.labels()
        if y is not None:
            w.write_labels(np.asarray(y))


def _make_raw(name: str, raw: Path) -> None:
    """The graph ``name`` made undirected and simple (edges sorted by source by the dedup)."""
    simple = ["--dedup", "--drop-self-loops", "--out", raw]
    spec = SYNTHETIC.get(name) or FAMILY_SYNTHETIC.get(name)
    if isinstance(spec, tuple):
        from shoal.data.synth.road import RoadConfig, generate_road

        generate_road(raw, RoadConfig(**spec[1], seed=0, dedup=True, drop_self_loops=True))
    elif spec is not None:
        common.shoal("data", "synth", *spec, "--seed", "0", *simple)
    else:
        common.shoal("data", "import", SHARED / name / "graph.npz", "--undirected", *simple)


def prepare_graph(name: str, work: Path = PARTITION_WORK, seed: int = 0) -> Path:
    """The benchmark graph ``name`` under ``work/graphs``: undirected, simple, its edges
    shuffled with ``seed`` (``NAME@sorted``: left sorted by source, as the dedup wrote them),
    its CSR views built."""
    out = work / "graphs" / name
    if (out / "meta.json").exists():
        return out
    raw = work / "raw" / name
    shutil.rmtree(raw, ignore_errors=True)
    raw.parent.mkdir(parents=True, exist_ok=True)
    log(f"prepare {name}")
    _make_raw(base_name(name), raw)
    _shuffle_copy(raw, out, None if name.endswith(SORTED_SUFFIX) else seed)  # no features
    shutil.rmtree(raw)
    from shoal.data.format import GraphDir

    g = GraphDir.open(out)
    g.build_csr("out")
    g.build_csr("in")
    return out


# --------------------------------------------------------------------------- runs
def run_one(graph: Path, variant: str, parts: int, timeout: float) -> dict[str, Any]:
    from shoal.partition.grem import GremConfig

    key = f"{graph.name}.{variant}.p{parts}"
    runs = PARTITION_WORK / "runs"
    out_dir, js, err_path = runs / f"{key}.assignment", runs / f"{key}.json", runs / f"{key}.err"
    shutil.rmtree(out_dir, ignore_errors=True)
    runs.mkdir(parents=True, exist_ok=True)
    js.unlink(missing_ok=True)
    args = [*VARIANTS[variant], "--parts", str(parts), "--seed", "0"]
    cmd = [*SHOAL, "partition", str(graph), *args, "--out", str(out_dir), "--json", str(js)]
    with open(err_path, "wb") as err:
        r = common.run_capped(cmd, None, timeout=timeout, stdout=subprocess.DEVNULL, stderr=err)
    shutil.rmtree(out_dir, ignore_errors=True)
    rec: dict[str, Any] = {
        "graph": graph.name,
        "variant": variant,
        "parts": parts,
        "command": " ".join(["shoal partition", graph.name, *args]),
        "wall_seconds": r["seconds"],
        "load_after": os.getloadavg()[0],  # 1-minute load: was the machine shared?
        "grem_seed_history_default": bool(GremConfig(num_parts=2).seed_history),
        "returncode": r["returncode"],
        "child_peak_rss_bytes": r["maxrss_bytes"],
    }
    if r["timed_out"]:
        rec["timed_out"] = True
    if r["returncode"] == 0 and js.exists():
        rec["metrics"] = json.loads(js.read_text())
    else:
        rec["error"] = err_path.read_text(errors="replace")[-1500:]
    return rec


# The partitioners time their phases with time.perf_counter(); in this process it is swapped
# for time.process_time(), so the phase seconds they report are CPU seconds of this process.
SPEED_SNIPPET = """
import json, os, sys, time
wall = time.perf_counter
time.perf_counter = time.process_time
from shoal.data.format import GraphDir
from shoal.partition.base import get_partitioner
g = GraphDir.open(sys.argv[1])
part = get_partitioner(sys.argv[2], num_parts=int(sys.argv[3]))
c0, w0 = time.process_time(), wall()
a = part.partition(g)
print(json.dumps({"cpu": time.process_time() - c0, "wall": wall() - w0,
                  "phases_cpu": a.seconds, "load": os.getloadavg(), "num_edges": g.num_edges}))
"""


def run_speed(graph: Path, algo: str, parts: int, repeats: int) -> dict[str, Any]:
    """The algorithm alone (no balance, no metrics) in a fresh process, ``repeats`` times."""
    cmd = [sys.executable, "-c", SPEED_SNIPPET, graph, algo, parts]
    reps = [json.loads(common.sh(cmd).stdout.strip().splitlines()[-1]) for _ in range(repeats)]
    return {"graph": graph.name, "algo": algo, "parts": parts, "repeats": reps}


# --------------------------------------------------------------------------- report
def _m(rec: dict, key: str) -> float | None:
    m = rec.get("metrics", {})
    v = (
        (m.get("seconds_per_phase") or {}).get("partition")
        if key == "partition_seconds"
        else m.get(key)
    )
    return float(v) if isinstance(v, int | float) else None


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _mb(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:.0f}"


def _mean_over(idx, graphs, variant, parts, key) -> float | None:
    vals = [_m(idx[(g, variant, parts)], key) for g in graphs if (g, variant, parts) in idx]
    vals = [v for v in vals if v is not None]
    return mean(vals) if vals and len(vals) == len(graphs) else None


#: Phases that are not one pass over the edges (their edges/s would mean nothing).
NOT_EDGE_PASSES = {
    "metrics",
    "partition",
    "csr",
    "load",
    "metis",
    "kaminpar",
    "mapping",
    "merge",
    "placement",
    "refine",
}


def _passes(rec: dict) -> str:
    """Edges per second of each streaming phase (phase seconds from the CLI's JSON)."""
    m = rec.get("metrics", {})
    e = m.get("num_edges") or 0
    items = (m.get("seconds_per_phase") or {}).items()
    return ", ".join(
        f"{k} {e / s / 1e6:.1f}" for k, s in items if k not in NOT_EDGE_PASSES and s and s >= 0.05
    )


def _before_issue31(rec: dict) -> bool:
    """A GREM run (``--algo grem`` or the default partitioner) without an explicit
    ``seed_history`` option recorded before issue 31 made ``seed_history=true`` GREM's
    default: it ran with the history from 0."""
    args = VARIANTS.get(rec["variant"], [])
    grem = rec["variant"] == "default" or args[:2] == ["--algo", "grem"]
    explicit = any(a.startswith("seed_history=") for a in args)
    return grem and not explicit and "grem_seed_history_default" not in rec


REFERENCE_TABLE = {
    # p: METIS cut, RF; GREM 10% cut, RF; GREM 1% cut; fixed 1% cut; SPRING cut, RF;
    #    HDRF->owner RF; hash cut   (issue 3, "quick reference prototype")
    4: (0.155, 1.83, 0.232, 2.10, 0.374, 0.640, 0.512, 2.72, 2.98, 0.750),
    8: (0.232, 2.49, 0.340, 2.91, 0.508, 0.748, 0.637, 4.14, 4.61, 0.875),
    16: (0.301, 3.42, 0.428, 3.92, 0.608, 0.803, 0.704, 6.06, 6.65, 0.938),
}
REFERENCE_KEYS = [
    ("metis", "edge_cut"),
    ("metis", "replication_factor"),
    ("grem", "edge_cut"),
    ("grem", "replication_factor"),
    ("grem_1pct", "edge_cut"),
    ("grem_fixed_1pct", "edge_cut"),
    ("spring", "edge_cut"),
    ("spring", "replication_factor"),
    ("hdrf", "replication_factor"),
    ("hash", "edge_cut"),
]
MEAN_COLUMNS = [
    *_PLAIN[:3],
    "grem_1pct",
    "grem_fixed_1pct",
    *_PLAIN[3:],
    "hash",
    "random",
    "default",
]
PS = (4, 8, 16)


def _table(L: list[str], title: str, cols: list[str], cell) -> None:
    L += [title, "", "| p | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    L += [f"| {p} | " + " | ".join(cell(c, p) for c in cols) + " |" for p in PS]
    L.append("")


def _reference_section(L: list[str], idx: dict, ref: list[str], meta: dict) -> None:
    missing = [g for g in meta.get("reference_graphs", REFERENCE_GRAPHS) if g not in ref]
    L += [
        "## Means over the reference graphs",
        "",
        f"Graphs: {', '.join(ref)}"
        + (f" (missing: {', '.join(missing)})" if missing else "")
        + ". A mean is shown only when the variant ran on all of them.",
        "",
    ]

    def mean_of(key: str, spec: str):
        return lambda c, p: _fmt(_mean_over(idx, ref, c, p, key), spec)

    cut_title = "Edge cut (fraction of edges whose endpoints' owners differ):"
    _table(L, cut_title, MEAN_COLUMNS, mean_of("edge_cut", ".3f"))
    rf_title = "Replication factor (full-neighbourhood parts):"
    _table(L, rf_title, MEAN_COLUMNS, mean_of("replication_factor", ".2f"))
    vc_title = "Vertex-cut RF of the raw edge assignment (edge partitioners):"
    _table(L, vc_title, ["hdrf", "dbh", "greedy", "2ps-l"], mean_of("vertex_cut_rf", ".2f"))
    L += [
        "### Against the issue's reference table (ours / reference)",
        "",
        "| p | METIS cut | METIS RF | GREM 10% cut | GREM 10% RF | GREM 1% cut | "
        "fixed-greedy 1% cut | SPRING cut | SPRING RF | HDRF→owner RF | hash cut |",
        "|---" * 11 + "|",
    ]
    for p in PS:
        cells = [
            f"{_fmt(_mean_over(idx, ref, v, p, k))} / {r}"
            for (v, k), r in zip(REFERENCE_KEYS, REFERENCE_TABLE[p], strict=True)
        ]
        L.append(f"| {p} | " + " | ".join(cells) + " |")

    def ratio(a_v, a_k, b_v, b_k, p):
        a, b = _mean_over(idx, ref, a_v, p, a_k), _mean_over(idx, ref, b_v, p, b_k)
        return None if a is None or b is None or b == 0 else a / b

    def holds(ok: bool) -> str:
        return "**holds**" if ok else "**fails**"

    L += ["", "### Targets", "", "| target | p=4 | p=8 | p=16 |", "|---|---|---|---|"]
    for label, a, b, bound in (
        ("SPRING RF ≤ 0.92 × HDRF RF", "spring", "hdrf", 0.92),
        ("GREM 10% cut ≤ 1.5 × METIS cut", "grem", "metis", 1.5),
        ("GREM 1% cut ≤ 0.8 × fixed-greedy 1% cut", "grem_1pct", "grem_fixed_1pct", 0.8),
        ("default (restreaming) cut ≤ 1.2 × METIS cut", "default", "metis", 1.2),
    ):
        key = "replication_factor" if label.startswith("SPRING") else "edge_cut"
        rs = [ratio(a, key, b, key, p) for p in PS]
        cells = ["not run" if r is None else f"{r:.3f} {holds(r <= bound)}" for r in rs]
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for p in PS:
        a = _mean_over(idx, ref, "spring", p, "partition_seconds")
        b = _mean_over(idx, ref, "2ps-l", p, "partition_seconds")
        cells.append(
            "not run" if a is None or b is None else f"{a:.2f}s vs {b:.2f}s {holds(a < b)}"
        )
    L.append(
        "| SPRING faster than 2PS-L (mean wall seconds of the algorithm itself, before "
        "balance/metrics) | " + " | ".join(cells) + " |"
    )
    sp = {(x["graph"], x["algo"], x["parts"]): x for x in meta.get("speed") or []}

    def cpu(algo: str, phase: str | None = None) -> float | None:
        x = sp.get(("rmat_1m_20m", algo, 8))
        if not x:
            return None
        reps = x["repeats"]
        return float(
            np.median([r["phases_cpu"].get(phase, np.nan) if phase else r["cpu"] for r in reps])
        )

    a, b = cpu("spring"), cpu("2ps-l")
    if a and b:
        L.append(
            "| SPRING faster than 2PS-L on R-MAT 1M/20M (speed stage, CPU seconds of the "
            f"algorithm) | | {a:.1f}s vs {b:.1f}s {holds(a < b)} ({b / a:.1f}x) | |"
        )
    for label, algo, phase, bound in (
        ("HDRF pass ≥ 6 M edges/s", "hdrf", "hdrf", 6.0),
        ("SPRING clustering pass ≥ 20 M edges/s", "spring", "clustering", 20.0),
        ("2PS-L clustering pass ≥ 20 M edges/s", "2ps-l", "clustering", 20.0),
    ):
        v = cpu(algo, phase)
        if v and v > 0:
            rate = sp[("rmat_1m_20m", algo, 8)]["repeats"][0]["num_edges"] / v / 1e6
            L.append(
                f"| {label} (R-MAT 1M/20M, speed stage, CPU time) | | {rate:.1f} "
                f"{holds(rate >= bound)} | |"
            )
    L += [
        "",
        "### Ratios against METIS and HDRF (means over the reference graphs)",
        "",
        "| variant | p | cut / METIS cut | RF / METIS RF | RF / HDRF RF |",
        "|---|---|---|---|---|",
    ]
    for c in MEAN_COLUMNS:
        for p in PS:
            r1 = ratio(c, "edge_cut", "metis", "edge_cut", p)
            r2 = ratio(c, "replication_factor", "metis", "replication_factor", p)
            r3 = ratio(c, "replication_factor", "hdrf", "replication_factor", p)
            if r1 is not None or r2 is not None:
                L.append(
                    f"| {c} | {p} | {_fmt(r1, '.2f')} | {_fmt(r2, '.2f')} | {_fmt(r3, '.2f')} |"
                )


def _rules_section(L: list[str], idx: dict, ref: list[str]) -> None:
    """The default rule against an alternative, means over the reference graphs (issue 16)."""
    rows = []
    for shoal_v, paper_v, what in RULE_PAIRS:
        for p in PS:
            both = [g for g in ref if (g, shoal_v, p) in idx and (g, paper_v, p) in idx]
            if not both:
                continue
            keys = (
                ("edge_cut", ".4f"),
                ("replication_factor", ".3f"),
                ("node_balance", ".3f"),
                ("seconds", ".2f"),
            )
            cells = [
                " | ".join(_fmt(_mean_over(idx, both, v, p, k), f) for k, f in keys)
                for v in (shoal_v, paper_v)
            ]
            rows.append(f"| {what} | {p} | {len(both)} | {cells[0]} | {cells[1]} |")
    if rows:
        L += [
            "",
            "## Paper rules against shoal's (issues 16, 31)",
            "",
            "Means over the reference graphs that have both runs; the first of each pair is the "
            "default, the second the alternative. Seconds: wall time of the whole CLI run.",
            "",
            "| rule | p | graphs | default cut | RF | balance | s | alternative cut | RF | "
            "balance | s |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]


def _families_section(L: list[str], idx: dict, ref: list[str], families: dict) -> None:
    """Mean cut of METIS and GREM's variants per graph family, in both stream orders (the
    comparison with an independent implementation: bench/results/grem_reference.md)."""
    every = [g for gs in families.values() for g in gs]
    if not any(g + SORTED_SUFFIX in {k[0] for k in idx} for g in every):
        return
    groups = [
        *families.items(),
        ("the reference graphs", ref),
        ("held-out graphs (not the reference ones)", [g for g in every if g not in ref]),
        ("all families", every),
    ]
    opts = ", ".join(
        f"`{v}` = `{' '.join(VARIANTS[v][2:-2])}`" for v in FAMILY_VARIANTS if v.startswith("grem_")
    )
    L += [
        "",
        "## GREM per graph family (issue 31)",
        "",
        "`--stage families`: METIS and GREM (`--algo grem`, no restreaming refinement) on "
        "every family, seed 0. A cell is the mean edge cut over the family's graphs (shown only "
        "when every graph of the family has the run); *random*: edges shuffled (the paper's "
        "setting, Armada Sec. 4.1), *sorted*: the same graph in the order `shoal data import "
        f"--dedup` writes (by source). `grem` is the default configuration; {opts}. GREM "
        "against an independent implementation of the paper: bench/results/grem_reference.md.",
        "",
        f"| family | graphs | order | p | {' | '.join(f'{c} cut' for c in FAMILY_VARIANTS)} "
        "| grem / metis |",
        "|---" * (len(FAMILY_VARIANTS) + 5) + "|",
    ]
    for fam, gs in groups:
        for order, suffix in (("random", ""), ("sorted", SORTED_SUFFIX)):
            names = [g + suffix for g in gs]
            for p in PS:
                vals = {c: _mean_over(idx, names, c, p, "edge_cut") for c in FAMILY_VARIANTS}
                if all(v is None for v in vals.values()):
                    continue
                m, gr = vals["metis"], vals["grem"]
                rr = gr / m if m and gr is not None else None
                cells = " | ".join(_fmt(v, ".4f") for v in vals.values())
                L.append(f"| {fam} | {len(gs)} | {order} | {p} | {cells} | {_fmt(rr, '.2f')} |")


def _synthetic_section(L: list[str], records: list[dict], idx: dict) -> None:
    syn = [g for g in SYNTHETIC if any(k[0] == g for k in idx)]
    if not syn:
        return
    L += [
        "",
        "## 1M-node synthetic graphs: memory and speed",
        "",
        "| graph | p | variant | cut | RF | node bal | seconds | peak RSS MB | RSS / METIS | "
        "Medges/s per phase |",
        "|---" * 10 + "|",
    ]
    # METIS runs killed at the time limit still have a peak RSS: a lower bound ("≥")
    any_rss = {
        (r["graph"], r["variant"], r["parts"]): (r.get("child_peak_rss_bytes"), "metrics" not in r)
        for r in records
    }
    for g in syn:
        for p in PS:
            base_rss, base_partial = any_rss.get((g, "metis", p), (None, False))
            if base_partial and base_rss:
                L.append(
                    f"| {g} | {p} | metis | killed at the time limit | | | | "
                    f"≥ {_mb(base_rss)} | | |"
                )
            for v in VARIANTS:
                r = idx.get((g, v, p))
                if r is None:
                    continue
                rss = r.get("child_peak_rss_bytes")
                rr = (rss / base_rss) if (rss and base_rss) else None
                L.append(
                    f"| {g} | {p} | {v}{' †' if _before_issue31(r) else ''} | "
                    f"{_fmt(_m(r, 'edge_cut'))} | {_fmt(_m(r, 'replication_factor'), '.2f')} | "
                    f"{_fmt(_m(r, 'node_balance'), '.3f')} | {_fmt(_m(r, 'seconds'), '.1f')} | "
                    f"{_mb(rss)} | {'≤ ' if base_partial else ''}{_fmt(rr, '.3f')} | "
                    f"{_passes(r)} |"
                )
    a, b = "rmat_1m_5m", "rmat_1m_20m"
    if a in syn and b in syn:
        L += [
            "",
            "Peak RSS when edges grow 4x at 1M nodes (R-MAT 1M/5M -> 1M/20M generated edges):",
            "",
            "| variant | p | RSS 5M (MB) | RSS 20M (MB) | growth | ≤ 1/10 of METIS at 20M |",
            "|---|---|---|---|---|---|",
        ]
        for p in PS:
            m_rss, m_partial = any_rss.get((b, "metis", p), (None, False))
            for v in VARIANTS:
                ra, rb = idx.get((a, v, p)), idx.get((b, v, p))
                if ra is None or rb is None:
                    continue
                x, y = ra.get("child_peak_rss_bytes"), rb.get("child_peak_rss_bytes")
                ok = "—"
                if v in STREAMING and m_rss:
                    ok = "**holds**" if y * 10 <= m_rss else "**fails**"
                    ok += " (METIS killed: its RSS a lower bound)" if m_partial else ""
                L.append(f"| {v} | {p} | {_mb(x)} | {_mb(y)} | {y / x:.2f}x | {ok} |")
    if any(_before_issue31(r) for r in records if r["graph"] in syn and "metrics" in r):
        L += [
            "",
            "† ran before issue 31 made `seed_history=true` GREM's default: these GREM runs "
            "started every node's history at 0 (the first window's counts were not kept).",
        ]


def _speed_section(L: list[str], meta: dict) -> None:
    if not meta.get("speed"):
        return
    L += [
        "",
        "## Speed of the algorithms alone (no balance post-pass, no metrics)",
        "",
        f"`{meta.get('speed_command')}`: each algorithm in a fresh process via the Python API, "
        "the edge file read from disk in 2**20-edge chunks; medians over the repeats. The "
        "phase timers are switched to process CPU time in that process, so Medges/s per phase "
        "= |E| / CPU seconds of that pass: what one dedicated core does, which other jobs "
        "(load average in the last column) disturb least. Wall seconds of the whole algorithm "
        "are shown too.",
        "",
        "| graph | p | algorithm | wall s | CPU s | CPU Medges/s per phase | load avg |",
        "|---" * 7 + "|",
    ]
    for rec in meta["speed"]:
        reps = rec["repeats"]
        e = reps[0]["num_edges"]
        wall = float(np.median([r["wall"] for r in reps]))
        cpu = float(np.median([r["cpu"] for r in reps]))
        phases = {}
        for k in reps[0].get("phases_cpu", {}):
            v = float(np.median([r["phases_cpu"].get(k, np.nan) for r in reps]))
            if v > 0 and k not in NOT_EDGE_PASSES:
                phases[k] = e / v / 1e6
        ph = ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
        L.append(
            f"| {rec['graph']} | {rec['parts']} | {rec['algo']} | {wall:.1f} | {cpu:.1f} | {ph} | "
            f"{reps[-1]['load'][0]:.1f} |"
        )


def render(data: dict) -> str:
    meta, records = data["meta"], data["runs"]
    idx = {(r["graph"], r["variant"], r["parts"]): r for r in records if "metrics" in r}
    loads = [r["load_after"] for r in records if "load_after" in r]
    load = f"{len(loads)} of {len(records)} runs recorded the 1-minute load after them" + (
        f" (median {np.median(loads):.1f}, max {max(loads):.1f})" if loads else ""
    )
    paras = [
        "Each run is one `shoal partition` subprocess (seed 0); peak RSS is that process's "
        "`ru_maxrss` (the whole process: Python, numpy, numba, the algorithm, balance "
        "post-pass, refinement and metrics). Graphs are undirected and simple, edges in a "
        "seeded random order (`NAME@sorted`: sorted by source, as `shoal data import --dedup` "
        "writes them). RF = replication factor after full-neighbourhood expansion; vcRF = "
        f"vertex-cut RF of the raw edge assignment. Timings on a shared machine: {load}; "
        "compare within a row.",
    ][: len(records)]
    paras += [
        f"Started {meta['started']}"
        + (f", last run {meta['updated']}." if meta.get("updated") else "."),
        *meta.get("notes", []),
    ]
    L = common.header("Partitioner benchmark (issue 3)", meta, *paras)
    errors = [r for r in records if "metrics" not in r]
    graphs = sorted({r["graph"] for r in records})
    if records:
        L += [
            f"Runs: {len(records)} ({len(errors)} failed or timed out); graphs: "
            f"{', '.join(graphs)}.",
            "",
        ]
    ref_set = meta.get("reference_graphs", REFERENCE_GRAPHS)
    ref = [g for g in ref_set if any(k[0] == g for k in idx)]
    if ref:
        _reference_section(L, idx, ref, meta)
    _rules_section(L, idx, ref)
    _families_section(L, idx, ref_set, meta.get("families", FAMILIES))
    _synthetic_section(L, records, idx)
    _speed_section(L, meta)
    L += (
        []
        if not records
        else [
            "",
            "## Every run",
            "",
            "| graph | p | variant | cut | RF | vcRF | node bal | train bal | seconds | "
            "peak RSS MB | Medges/s per phase |",
            "|---" * 11 + "|",
        ]
    )
    for r in records:
        if "metrics" not in r:
            why = f"FAILED (rc {r.get('returncode')}{', timeout' if r.get('timed_out') else ''})"
            L.append(f"| {r['graph']} | {r['parts']} | {r['variant']} | {why} | | | | | | | |")
            continue
        L.append(
            f"| {r['graph']} | {r['parts']} | {r['variant']} | {_fmt(_m(r, 'edge_cut'))} | "
            f"{_fmt(_m(r, 'replication_factor'), '.2f')} | {_fmt(_m(r, 'vertex_cut_rf'), '.2f')} | "
            f"{_fmt(_m(r, 'node_balance'))} | {_fmt(_m(r, 'train_balance'))} | "
            f"{_fmt(_m(r, 'seconds'), '.2f')} | {_mb(r.get('child_peak_rss_bytes'))} | "
            f"{_passes(r)} |"
        )
    if errors:
        L += ["", "## Failures", ""]
        for r in errors:
            err = " / ".join((r.get("error") or "").strip().splitlines()[-3:])[:400]
            L.append(
                f"- {r['graph']} p={r['parts']} {r['variant']}: `{r['command']}` -> rc "
                f"{r.get('returncode')}: {err}"
            )
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- main
def plan(args: argparse.Namespace) -> list[tuple[list[str], list[int], list[str]]]:
    """(graphs, parts, variants) of the stage."""
    if args.smoke:
        return [
            (["rmat_smoke"], [4], ["metis", "grem", "default"]),
            (["rmat_smoke@sorted"], [4], ["grem"]),
        ]
    out = []
    if args.stage in ("all", "reference"):
        out.append((REFERENCE_GRAPHS, [4, 8, 16], list(VARIANTS)))
    if args.stage in ("all", "families"):
        out.append(
            (
                [g + s for s in ("", SORTED_SUFFIX) for g in FAMILY_GRAPHS],
                [4, 8, 16],
                FAMILY_VARIANTS,
            )
        )
    if args.stage in ("all", "synthetic"):  # p = 8 first (memory and speed targets)
        out += [
            (list(SYNTHETIC), [8], SYNTHETIC_VARIANTS),
            (list(SYNTHETIC), [4, 16], SYNTHETIC_VARIANTS),
        ]
    return [
        (
            args.graphs or gs,
            args.parts or ps,
            [v for v in vs if not args.variants or v in args.variants],
        )
        for gs, ps, vs in out
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--stage", choices=["all", "reference", "families", "synthetic", "speed"], default="all"
    )
    ap.add_argument("--repeats", type=int, default=3, help="repeats of --stage speed")
    ap.add_argument("--graphs", nargs="*", help="override the stage's graphs")
    ap.add_argument("--parts", nargs="*", type=int, help="override the stage's p")
    ap.add_argument("--variants", nargs="*", choices=list(VARIANTS), help="a subset of the stage's")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument(
        "--resume", action="store_true", help="keep the runs in the JSON, add the missing"
    )
    ap.add_argument("--redo", nargs="*", default=[], help="with --resume: run these variants again")
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    common.bench_args(ap, out="bench/results/partition")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/partition")
    old = common.load_json(prefix.with_suffix(".json"), {"meta": {}, "runs": []})
    if args.report_only:
        common.write_text_atomic(prefix.with_suffix(".md"), render(old))
        return 0
    command = common.command_line("partition.py")
    keep = args.resume or args.stage == "speed"  # the speed stage adds to the file
    meta = {**(old["meta"] if keep else {}), "command": command, "machine": common.machine_line()}
    meta["commands"] = [*(meta.get("commands", []) if keep else []), command]
    meta.setdefault("started", time.strftime("%Y-%m-%d %H:%M:%S"))
    if args.smoke:
        meta.update(SMOKE)
    data = {"meta": meta, "runs": old["runs"] if keep else []}

    def save() -> None:
        meta["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
        common.write_results(prefix, data, render)

    if args.stage == "speed" or args.smoke:
        meta["speed_command"] = command
        speed = meta.setdefault("speed", [])
        for gname in ["rmat_smoke"] if args.smoke else args.graphs or ["rmat_1m_20m"]:
            for p in [4] if args.smoke else args.parts or [8]:
                for algo in ["spring"] if args.smoke else args.variants or SPEED_ALGOS:
                    rec = run_speed(
                        prepare_graph(gname), algo, p, 1 if args.smoke else args.repeats
                    )
                    speed[:] = [
                        x for x in speed if (x["graph"], x["algo"], x["parts"]) != (gname, algo, p)
                    ]
                    speed.append(rec)
                    save()
        if not args.smoke:
            return 0
    # failed runs are retried on --resume; runs killed at the time limit are not
    done = {
        (r["graph"], r["variant"], r["parts"])
        for r in data["runs"]
        if ("metrics" in r or r.get("timed_out")) and r["variant"] not in args.redo
    }
    for graphs, parts, variants in plan(args):
        for gname in graphs:
            try:
                gpath = prepare_graph(gname)
            except RuntimeError as exc:
                log(f"cannot prepare {gname}: {exc}")
                continue
            for p in parts:
                for v in variants:
                    if (gname, v, p) in done:
                        continue
                    rec = run_one(gpath, v, p, args.timeout)
                    m = rec.get("metrics", {})
                    log(
                        f"{gname} p={p} {v}: rc={rec['returncode']} "
                        f"cut={m.get('edge_cut', float('nan')):.3f}"
                    )
                    key = (gname, v, p)
                    data["runs"] = [
                        r for r in data["runs"] if (r["graph"], r["variant"], r["parts"]) != key
                    ]
                    data["runs"].append(rec)
                    done.add(key)
                    save()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
