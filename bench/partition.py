"""Partitioner benchmark: quality, speed and peak memory of every registered algorithm.

Every run is one subprocess ``shoal partition GRAPH --algo A --parts P --out ... --json F``
(the real CLI entry ``shoal.cli.main`` with only the partition sub-command registered, see
:data:`PARTITION_RUNNER`), so peak RSS is the honest resident-set peak of that process, read
with ``os.wait4``. Results go to ``bench/results/partition.json`` (every run) and
``bench/results/partition.md`` (tables, means over the issue's reference graphs, target
checks); both are rewritten after every run, so an interrupted full run still leaves its
finished part behind (``--resume`` skips the runs already in the JSON).

Graphs (built once under ``--work``, default ``bench/work/partition``):

* the shared real graphs, made undirected and simple (``shoal data import --undirected
  --dedup --drop-self-loops``), then rewritten in a random stream order (a seeded
  permutation of the edge file: the external-sort dedup leaves edges sorted by source);
* ``rmat_1m_5m`` / ``rmat_1m_20m``: R-MAT, 1M nodes, 5M / 20M generated edges, made
  undirected and simple the same way and shuffled (``shoal data synth rmat``); the pair shows
  how peak memory grows when edges grow 4x at a fixed number of nodes;
* ``dcsbm_1m_20m``: a degree-corrected SBM with 1M nodes and 20M edges
  (``shoal data synth dcsbm``);
* the graph families of issue 31 (:data:`FAMILIES`): the nine reference graphs plus held-out
  graphs of every family (the other shared graphs, small R-MAT and DC-SBM graphs, and a
  road-like lattice from :mod:`shoal.data.synth.road`), each also in a second stream order:
  ``NAME@sorted`` is the same graph with its edges in the order ``shoal data import --dedup``
  writes them (sorted by source, then destination) instead of shuffled.

Usage::

    python bench/partition.py --quick            # 2 graphs, p = 4, every algorithm
    python bench/partition.py                    # full: everything (hours on 2 cores)
    python bench/partition.py --stage reference  # only the 9 reference graphs, p = 4, 8, 16
    python bench/partition.py --stage synthetic  # only the 1M-node synthetic graphs
    python bench/partition.py --stage families   # GREM / METIS on every graph family
    python bench/partition.py --resume           # continue an interrupted run
    python bench/partition.py --report-only      # rebuild the .md from the .json
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

from common import RESULTS, SHARED, WORK, command_line, machine_line, write_json, write_text_atomic

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
QUICK_GRAPHS = ["amazon_photo", "ca_astroph"]

#: Synthetic graphs: name -> shoal data synth arguments.
SYNTHETIC = {
    "rmat_1m_5m": ["rmat", "--nodes", "1000000", "--edges", "5000000", "--undirected"],
    "rmat_1m_20m": ["rmat", "--nodes", "1000000", "--edges", "20000000", "--undirected"],
    "dcsbm_1m_20m": ["dcsbm", "--nodes", "1000000", "--edges", "20000000", "--features", "0"],
}

#: Small synthetic graphs of the family benchmark: name -> ``shoal data synth`` arguments, or
#: ``("road", kwargs)`` for :func:`shoal.data.synth.road.generate_road` (no CLI sub-command).
FAMILY_SYNTHETIC: dict[str, list[str] | tuple[str, dict[str, Any]]] = {
    "rmat_16k": ["rmat", "--nodes", "16384", "--edges", "262144", "--undirected"],
    "rmat_64k": ["rmat", "--nodes", "65536", "--edges", "262144", "--undirected"],
    "dcsbm_50k": ["dcsbm", "--nodes", "50000", "--edges", "250000", "--features", "0"],
    "road_200": ("road", {"width": 200, "height": 200}),
}

#: Graph families (issue 31): family -> graphs, the nine reference graphs first. Every graph
#: is undirected and simple; the synthetic ones are :data:`FAMILY_SYNTHETIC`.
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
#: Every family graph; the held-out ones are those not in :data:`REFERENCE_GRAPHS`.
FAMILY_GRAPHS = [g for gs in FAMILIES.values() for g in gs]
#: Stream orders of the family benchmark: the shuffled file (the paper's "edge list stored on
#: disk in a random order", Armada Sec. 4.1) and the source-sorted file of ``shoal data import
#: --dedup`` (``NAME@sorted``).
ORDERS = ["random", "sorted"]
SORTED_SUFFIX = "@sorted"


def base_name(name: str) -> str:
    """The graph of a benchmark graph name (without the ``@sorted`` stream order)."""
    return name.removesuffix(SORTED_SUFFIX)


def family_of(name: str) -> str:
    return FAMILY_OF.get(base_name(name), "other")


#: Benchmark variants: label -> extra CLI arguments (``--algo`` included; the ``default``
#: variant gives none, i.e. the default configuration of ``shoal partition``).
VARIANTS: dict[str, list[str]] = {
    "metis": ["--algo", "metis", "--refine-passes", "0"],
    "kaminpar": ["--algo", "kaminpar", "--refine-passes", "0"],
    "grem": ["--algo", "grem", "--refine-passes", "0"],
    "grem_1pct": ["--algo", "grem", "--option", "window=0.01", "--refine-passes", "0"],
    "grem_fixed_1pct": [
        "--algo",
        "grem",
        "--option",
        "window=0.01",
        "--option",
        "refine=false",
        "--refine-passes",
        "0",
    ],
    "spring": ["--algo", "spring", "--refine-passes", "0"],
    "hdrf": ["--algo", "hdrf", "--refine-passes", "0"],
    "dbh": ["--algo", "dbh", "--refine-passes", "0"],
    "greedy": ["--algo", "greedy", "--refine-passes", "0"],
    "2ps-l": ["--algo", "2ps-l", "--refine-passes", "0"],
    "ldg": ["--algo", "ldg", "--refine-passes", "0"],
    "fennel": ["--algo", "fennel", "--refine-passes", "0"],
    "hash": ["--algo", "hash", "--refine-passes", "0"],
    "random": ["--algo", "random", "--refine-passes", "0"],
    "default": [],
    # issue 16: the papers' rules next to shoal's (see RULE_PAIRS)
    "spring_paper": [
        "--algo",
        "spring",
        "--option",
        "representative=richest",
        "--refine-passes",
        "0",
    ],
    "grem_paper": [
        "--algo",
        "grem",
        "--option",
        "move_rule=paper",
        "--option",
        "exact_capacity=true",
        "--option",
        "seed_history=true",
        "--refine-passes",
        "0",
    ],
    "grem_seed_history": [
        "--algo",
        "grem",
        "--option",
        "seed_history=true",
        "--refine-passes",
        "0",
    ],
    "default_no_seed_history": ["--option", "seed_history=false"],
    "grem_1pct_no_seed_history": [
        "--algo",
        "grem",
        "--option",
        "window=0.01",
        "--option",
        "seed_history=false",
        "--refine-passes",
        "0",
    ],
    "grem_no_seed_history": [
        "--algo",
        "grem",
        "--option",
        "seed_history=false",
        "--refine-passes",
        "0",
    ],
    "grem_paper_assign": [
        "--algo",
        "grem",
        "--option",
        "move_rule=paper",
        "--option",
        "exact_capacity=true",
        "--refine-passes",
        "0",
    ],
}
#: (shoal's variant, the paper's, what differs) for the rules comparison (issue 16); the
#: first of each pair is the default of its algorithm
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
RULE_VARIANTS = [
    "spring",
    "spring_paper",
    "grem",
    "grem_no_seed_history",
    "grem_paper_assign",
    "grem_paper",
]
#: Variants run on the 1M-node synthetic graphs (GREM 1% / fixed only on the reference set).
SYNTHETIC_VARIANTS = [
    "metis",
    "kaminpar",
    "default",
    "grem",
    "spring",
    "hdrf",
    "dbh",
    "greedy",
    "2ps-l",
    "ldg",
    "fennel",
    "hash",
]
#: Variants of the family benchmark (issue 31).
FAMILY_VARIANTS = ["metis", "grem", "grem_no_seed_history"]
STREAMING = {"grem", "spring", "hdrf", "dbh", "greedy", "2ps-l", "ldg", "fennel", "default"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


#: ``shoal partition`` through shoal.cli.main with only the partition sub-command registered:
#: the same parser, handler and error handling, without importing the other stages'
#: modules (``shoal.cli.train`` imports torch and PyG: +~250 MB RSS and seconds of start-up
#: in every process, which would swamp the partitioners' own peak memory).
PARTITION_RUNNER = (
    "import sys, shoal.cli as c; c.COMMAND_MODULES = ('shoal.cli.partition',); "
    "sys.exit(c.main(sys.argv[1:]))"
)


def partition_cmd() -> list[str]:
    return [sys.executable, "-c", PARTITION_RUNNER, "partition"]


def shoal_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("shoal")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "shoal.cli"]


# --------------------------------------------------------------------------- graphs
def _shuffle_copy(src: Path, dst: Path, seed: int | None) -> None:
    """Rewrite ``src``'s edges in a seeded random order into ``dst`` (splits kept); with
    ``seed=None`` in their order in ``src``."""
    from shoal.data.format import GraphDir, GraphWriter

    g = GraphDir.open(src)
    e = np.array(g.edge_stream().memmap())
    if seed is not None:
        e = e[np.random.default_rng(seed).permutation(e.shape[0])]
    with GraphWriter(dst, num_nodes=g.num_nodes, directed=g.directed, name=g.name) as w:
        step = 1 << 22
        for s in range(0, e.shape[0], step):
            w.add_edges(e[s : s + step])
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
    simple = ["--dedup", "--drop-self-loops"]
    spec = SYNTHETIC.get(name) or FAMILY_SYNTHETIC.get(name)
    if isinstance(spec, tuple):
        from shoal.data.synth.road import RoadConfig, generate_road

        log(f"prepare {name}: generate_road({spec[1]}, seed=0, dedup)")
        generate_road(raw, RoadConfig(**spec[1], seed=0, dedup=True, drop_self_loops=True))
        return
    if spec is not None:
        cmd = [*shoal_cmd(), "data", "synth", *spec, "--out", str(raw), "--seed", "0", *simple]
    else:
        npz = SHARED / name / "graph.npz"
        cmd = [*shoal_cmd(), "data", "import", str(npz), "--out", str(raw), "--undirected"]
        cmd += simple
    log(f"prepare {name}: {' '.join(cmd[1:])}")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def prepare_graph(name: str, work: Path, seed: int = 0) -> Path:
    """The benchmark graph ``name`` under ``work/graphs``: undirected, simple, its edges
    shuffled with ``seed`` (``NAME@sorted``: left sorted by source, as the dedup wrote them)."""
    out = work / "graphs" / name
    if (out / "meta.json").exists():
        return out
    raw = work / "raw" / name
    if raw.exists():
        shutil.rmtree(raw)
    raw.parent.mkdir(parents=True, exist_ok=True)
    _make_raw(base_name(name), raw)
    # features are not needed to partition: drop them before the shuffle copy
    _shuffle_copy(raw, out, None if name.endswith(SORTED_SUFFIX) else seed)
    shutil.rmtree(raw)
    # the CSR views (vertex-stream passes: LDG, Fennel, restreaming refinement) are built
    # once here, so that no timed run pays for the external sort and all see the same files
    from shoal.data.format import GraphDir

    g = GraphDir.open(out)
    t0 = time.perf_counter()
    g.build_csr("out")
    g.build_csr("in")
    log(f"prepare {name}: CSR views in {time.perf_counter() - t0:.1f}s")
    return out


# --------------------------------------------------------------------------- runs
def run_one(graph: Path, variant: str, parts: int, work: Path, timeout: float) -> dict[str, Any]:
    key = f"{graph.name}.{variant}.p{parts}"
    out_dir = work / "runs" / f"{key}.assignment"  # per run: stages may run side by side
    js = work / "runs" / f"{key}.json"
    err_path = work / "runs" / f"{key}.stderr.txt"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    js.parent.mkdir(parents=True, exist_ok=True)
    js.unlink(missing_ok=True)
    cmd = [*partition_cmd(), str(graph), *VARIANTS[variant]]
    cmd += ["--parts", str(parts), "--seed", "0", "--out", str(out_dir), "--json", str(js)]
    rec: dict[str, Any] = {
        "graph": graph.name,
        "variant": variant,
        "parts": parts,
        "command": "shoal partition " + " ".join(cmd[len(partition_cmd()) :]),
    }
    t0 = time.perf_counter()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        deadline = t0 + timeout
        status, ru = 0, None
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                rec["timed_out"] = True
                break
            time.sleep(0.05)
    rec["wall_seconds"] = time.perf_counter() - t0
    rec["load_after"] = os.getloadavg()[0]  # 1-minute load: was the machine shared?
    rec["grem_seed_history_default"] = _grem_seed_history_default()
    rec["returncode"] = os.waitstatus_to_exitcode(status)
    proc.returncode = rec["returncode"]
    rec["child_peak_rss_bytes"] = int(ru.ru_maxrss) * 1024 if ru is not None else None
    rec["child_cpu_seconds"] = (ru.ru_utime + ru.ru_stime) if ru is not None else None
    if rec["returncode"] == 0 and js.exists():
        rec["metrics"] = json.loads(js.read_text())
    else:
        tail = err_path.read_text(errors="replace")[-1500:]
        rec["error"] = tail
    if out_dir.exists():
        shutil.rmtree(out_dir)
    return rec


def _grem_seed_history_default() -> bool:
    from shoal.partition.grem import GremConfig

    return bool(GremConfig(num_parts=2).seed_history)


def _before_issue31(rec: dict) -> bool:
    """A GREM run (``--algo grem`` or the default partitioner, GREM-based) without an
    explicit ``seed_history`` option, recorded before GREM's default became
    ``seed_history=true`` (issue 31): it ran with the history from 0."""
    args = VARIANTS.get(rec["variant"], [])
    grem = rec["variant"] == "default" or args[:2] == ["--algo", "grem"]
    explicit = any(a.startswith("seed_history=") for a in args)
    return grem and not explicit and "grem_seed_history_default" not in rec


# The partitioners time their phases with time.perf_counter(); in this process it is swapped
# for time.process_time(), so the phase seconds they report are CPU seconds of this process
# (the wall clock of a shared 2-core machine mostly measures the other jobs).
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
SPEED_ALGOS = ["hdrf", "spring", "2ps-l", "dbh", "greedy", "ldg", "fennel", "grem"]


def run_speed(graph: Path, algo: str, parts: int, repeats: int) -> dict[str, Any]:
    """The algorithm alone (no balance/metrics) in a fresh process, ``repeats`` times:
    wall seconds per phase and the process CPU seconds of the whole algorithm (the machine is
    shared, so CPU time is the steadier figure)."""
    reps = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", SPEED_SNIPPET, str(graph), algo, str(parts)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        reps.append(json.loads(out.strip().splitlines()[-1]))
    return {"graph": graph.name, "algo": algo, "parts": parts, "repeats": reps}


# --------------------------------------------------------------------------- report
def _m(rec: dict, key: str) -> float | None:
    if key == "partition_seconds":
        v = (rec.get("metrics", {}).get("seconds_per_phase") or {}).get("partition")
        return float(v) if isinstance(v, (int, float)) else None
    v = rec.get("metrics", {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _mb(x: float | None) -> str:
    return "—" if x is None else f"{x / 2**20:.0f}"


def _index(records: list[dict]) -> dict[tuple[str, str, int], dict]:
    return {(r["graph"], r["variant"], r["parts"]): r for r in records if "metrics" in r}


def _mean_over(idx, graphs, variant, parts, key) -> float | None:
    vals = [_m(idx[(g, variant, parts)], key) for g in graphs if (g, variant, parts) in idx]
    vals = [v for v in vals if v is not None]
    return mean(vals) if vals and len(vals) == len(graphs) else None


def _load_note(records: list[dict]) -> str:
    """What the runs' timings are worth: the machine's load when they ran, where recorded."""
    loads = [r["load_after"] for r in records if "load_after" in r]
    note = (
        f"{len(records) - len(loads)} of {len(records)} runs predate the load record and "
        "were taken over several sessions, some beside other jobs"
        if len(loads) < len(records)
        else ""
    )
    if loads:
        note += ("; " if note else "") + (
            f"the {len(loads)} recorded runs saw a 1-minute load of "
            f"{np.median(loads):.1f} (median), {max(loads):.1f} (max)"
        )
    return (
        f"Timings on a 2-core machine shared with other jobs (issue 31's runs too): {note}; "
        "noisy, compare within a row "
        "(quiet-machine times: partition_speed_quiet.md)."
    )


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
    out = []
    for k, s in (m.get("seconds_per_phase") or {}).items():
        if k in NOT_EDGE_PASSES or not s or s < 0.05:
            continue
        out.append(f"{k} {e / s / 1e6:.1f}")
    return ", ".join(out)


REFERENCE_TABLE = {
    # p: METIS cut, RF; GREM 10% cut, RF; GREM 1% cut; fixed 1% cut; SPRING cut, RF;
    #    HDRF->owner RF; hash cut   (issue 3, "quick reference prototype")
    4: (0.155, 1.83, 0.232, 2.10, 0.374, 0.640, 0.512, 2.72, 2.98, 0.750),
    8: (0.232, 2.49, 0.340, 2.91, 0.508, 0.748, 0.637, 4.14, 4.61, 0.875),
    16: (0.301, 3.42, 0.428, 3.92, 0.608, 0.803, 0.704, 6.06, 6.65, 0.938),
}


def _rules_section(L: list[str], idx: dict, ref: list[str]) -> None:
    """The default rule against an alternative (the paper's or the former default), means
    over the reference graphs (issue 16)."""
    rows = []
    for shoal_v, paper_v, what in RULE_PAIRS:
        for p in (4, 8, 16):
            both = [g for g in ref if (g, shoal_v, p) in idx and (g, paper_v, p) in idx]
            if not both:
                continue
            cells = []
            for v in (shoal_v, paper_v):
                cells.append(
                    " | ".join(
                        _fmt(_mean_over(idx, both, v, p, k), f)
                        for k, f in (
                            ("edge_cut", ".4f"),
                            ("replication_factor", ".3f"),
                            ("node_balance", ".3f"),
                            ("seconds", ".2f"),
                        )
                    )
                )
            rows.append(f"| {what} | {p} | {len(both)} | {cells[0]} | {cells[1]} |")
    if not rows:
        return
    L.append("\n## Paper rules against shoal's (issues 16, 31)\n")
    L.append(
        "Means over the reference graphs that have both runs; the first of each pair is the "
        "default, the second the alternative. Seconds: wall time of the whole CLI run.\n"
    )
    L.append(
        "| rule | p | graphs | default cut | RF | balance | s | alternative cut | RF | balance "
        "| s |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    L.extend(rows)


def _families_section(L: list[str], idx: dict) -> None:
    """Rows per graph family (issue 31): mean cut of METIS and GREM's variants over the
    family's graphs, in both stream orders; the reference comparison is in
    bench/results/grem_reference.md."""
    have = {k[0] for k in idx}
    if not any(g + SORTED_SUFFIX in have for g in FAMILY_GRAPHS):
        return
    held_out = [g for g in FAMILY_GRAPHS if g not in REFERENCE_GRAPHS]
    groups = [
        *FAMILIES.items(),
        ("the nine reference graphs", REFERENCE_GRAPHS),
        ("held-out graphs (not the nine)", held_out),
        ("all families", FAMILY_GRAPHS),
    ]
    L.append("\n## GREM per graph family (issue 31)\n")
    L.append(
        "`python bench/partition.py --stage families`: METIS and GREM (`--algo grem`, no "
        "restreaming refinement) on every family of :data:`FAMILIES`, seed 0. A cell is the "
        "mean edge cut over the family's graphs (shown only when every graph of the family "
        "has the run); *random*: edges shuffled (the paper's setting, Armada Sec. 4.1), "
        "*sorted*: the same graph in the order `shoal data import --dedup` writes (by "
        "source). `grem` is the default configuration; "
        + ", ".join(
            f"`{v}` = `{' '.join(VARIANTS[v][2:-2])}`"
            for v in FAMILY_VARIANTS
            if v.startswith("grem_")
        )
        + ". GREM against an independent implementation of the paper, per family: "
        "bench/results/grem_reference.md.\n"
    )
    cols = FAMILY_VARIANTS
    head = " | ".join(f"{c} cut" for c in cols)
    L.append(f"| family | graphs | order | p | {head} | grem / metis |")
    L.append("|---" * (len(cols) + 5) + "|")
    for fam, gs in groups:
        for order, suffix in (("random", ""), ("sorted", SORTED_SUFFIX)):
            names = [g + suffix for g in gs]
            for p in (4, 8, 16):
                vals = {c: _mean_over(idx, names, c, p, "edge_cut") for c in cols}
                if all(v is None for v in vals.values()):
                    continue
                m, gr = vals.get("metis"), vals.get("grem")
                rr = gr / m if m and gr is not None else None
                cells = " | ".join(_fmt(vals[c], ".4f") for c in cols)
                L.append(f"| {fam} | {len(gs)} | {order} | {p} | {cells} | {_fmt(rr, '.2f')} |")


def write_report(records: list[dict], meta: dict, path_md: Path, path_json: Path) -> None:
    write_json(path_json, {"meta": meta, "runs": records})

    idx = _index(records)
    L: list[str] = []
    L.append("# Partitioner benchmark (issue 3)\n")
    cmds = meta.get("commands") or [meta["command"]]
    if len(cmds) > 1:
        L.append(
            "Commands that wrote this file, in order (each resumed the JSON and re-ran or added "
            "the runs it names; runs older than the first were written by earlier commands, "
            "see the git history): " + "; ".join(f"`{c}`" for c in cmds) + "  "
        )
    else:
        L.append(f"Command: `{cmds[0]}`  ")
    for note in meta.get("notes") or []:
        L.append(f"- {note}")
    if meta.get("notes"):
        L.append("")
    L.append(f"Machine: {meta['machine']}  ")
    L.append(f"Started {meta['started']}, last update {time.strftime('%Y-%m-%d %H:%M:%S')}.  ")
    L.append(
        "Each run is one `shoal partition` subprocess (seed 0; `shoal.cli.main` with only the "
        "partition sub-command registered, so torch/PyG of the training stages are not "
        "imported); peak RSS is that process's `ru_maxrss` (whole process: Python, numpy, "
        "numba, the algorithm, balance post-pass, refinement and metrics; about 100 MB is "
        "the interpreter with numpy and numba). Graphs are undirected and simple, edges in a "
        "seeded random order (`NAME@sorted`: sorted by source, as `shoal data import --dedup` "
        "writes them). "
        "RF = replication factor after full-neighbourhood expansion; vcRF = vertex-cut RF "
        "of the raw edge assignment. " + _load_note(records) + "\n"
    )
    errors = [r for r in records if "metrics" not in r]
    done_graphs = sorted({r["graph"] for r in records})
    L.append(
        f"Runs: {len(records)} ({len(errors)} failed or timed out); graphs: "
        f"{', '.join(done_graphs)}.\n"
    )

    # ---- reference means
    ref = [g for g in REFERENCE_GRAPHS if any(k[0] == g for k in idx)]
    if ref:
        L.append("## Means over the reference graphs\n")
        missing = [g for g in REFERENCE_GRAPHS if g not in ref]
        L.append(
            f"Graphs: {', '.join(ref)}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + ". A mean is shown only when the variant ran on all of them.\n"
        )
        cols = [
            "metis",
            "kaminpar",
            "grem",
            "grem_1pct",
            "grem_fixed_1pct",
            "spring",
            "hdrf",
            "dbh",
            "greedy",
            "2ps-l",
            "ldg",
            "fennel",
            "hash",
            "random",
            "default",
        ]
        L.append("Edge cut (fraction of edges whose endpoints' owners differ):\n")
        L.append("| p | " + " | ".join(cols) + " |")
        L.append("|---" * (len(cols) + 1) + "|")
        for p in (4, 8, 16):
            row = [_fmt(_mean_over(idx, ref, c, p, "edge_cut")) for c in cols]
            L.append(f"| {p} | " + " | ".join(row) + " |")
        L.append("\nReplication factor (full-neighbourhood parts):\n")
        L.append("| p | " + " | ".join(cols) + " |")
        L.append("|---" * (len(cols) + 1) + "|")
        for p in (4, 8, 16):
            row = [_fmt(_mean_over(idx, ref, c, p, "replication_factor"), ".2f") for c in cols]
            L.append(f"| {p} | " + " | ".join(row) + " |")
        vc = ["hdrf", "dbh", "greedy", "2ps-l"]
        L.append("\nVertex-cut RF of the raw edge assignment (edge partitioners):\n")
        L.append("| p | " + " | ".join(vc) + " |")
        L.append("|---" * (len(vc) + 1) + "|")
        for p in (4, 8, 16):
            row = [_fmt(_mean_over(idx, ref, c, p, "vertex_cut_rf"), ".2f") for c in vc]
            L.append(f"| {p} | " + " | ".join(row) + " |")

        L.append("\n### Against the issue's reference table (ours / reference)\n")
        L.append(
            "| p | METIS cut | METIS RF | GREM 10% cut | GREM 10% RF | GREM 1% cut | "
            "fixed-greedy 1% cut | SPRING cut | SPRING RF | HDRF→owner RF | hash cut |"
        )
        L.append("|---" * 11 + "|")
        keys = [
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
        for p in (4, 8, 16):
            cells = []
            for (v, k), r in zip(keys, REFERENCE_TABLE[p]):
                ours = _mean_over(idx, ref, v, p, k)
                cells.append(f"{_fmt(ours, '.3f')} / {r}")
            L.append(f"| {p} | " + " | ".join(cells) + " |")

        L.append("\n### Targets\n")
        L.append("| target | p=4 | p=8 | p=16 |")
        L.append("|---|---|---|---|")

        def ratio(a_v, a_k, b_v, b_k, p):
            a = _mean_over(idx, ref, a_v, p, a_k)
            b = _mean_over(idx, ref, b_v, p, b_k)
            return None if a is None or b is None or b == 0 else a / b

        def line(label, a_v, a_k, b_v, b_k, bound):
            cells = []
            for p in (4, 8, 16):
                r = ratio(a_v, a_k, b_v, b_k, p)
                cells.append(
                    "not run"
                    if r is None
                    else f"{r:.3f} {'**holds**' if r <= bound else '**fails**'}"
                )
            L.append(f"| {label} | " + " | ".join(cells) + " |")

        line(
            "SPRING RF ≤ 0.92 × HDRF RF",
            "spring",
            "replication_factor",
            "hdrf",
            "replication_factor",
            0.92,
        )
        line("GREM 10% cut ≤ 1.5 × METIS cut", "grem", "edge_cut", "metis", "edge_cut", 1.5)
        line(
            "GREM 1% cut ≤ 0.8 × fixed-greedy 1% cut",
            "grem_1pct",
            "edge_cut",
            "grem_fixed_1pct",
            "edge_cut",
            0.8,
        )
        line(
            "default (restreaming) cut ≤ 1.2 × METIS cut",
            "default",
            "edge_cut",
            "metis",
            "edge_cut",
            1.2,
        )
        # speed: SPRING vs 2PS-L wall seconds of the algorithm
        cells = []
        for p in (4, 8, 16):
            a = _mean_over(idx, ref, "spring", p, "partition_seconds")
            b = _mean_over(idx, ref, "2ps-l", p, "partition_seconds")
            cells.append(
                "not run"
                if a is None or b is None
                else f"{a:.2f}s vs {b:.2f}s {'**holds**' if a < b else '**fails**'}"
            )
        L.append(
            "| SPRING faster than 2PS-L (mean seconds of the algorithm itself, before "
            "balance/metrics) | " + " | ".join(cells) + " |"
        )

        sp = {(x["graph"], x["algo"], x["parts"]): x for x in meta.get("speed") or []}
        a_sp, b_sp = sp.get(("rmat_1m_20m", "spring", 8)), sp.get(("rmat_1m_20m", "2ps-l", 8))
        if a_sp and b_sp:
            a = float(np.median([r["cpu"] for r in a_sp["repeats"]]))
            b = float(np.median([r["cpu"] for r in b_sp["repeats"]]))
            L.append(
                "| SPRING faster than 2PS-L on R-MAT 1M/20M (speed stage, CPU seconds of the "
                f"algorithm) | | {a:.1f}s vs {b:.1f}s "
                f"{'**holds**' if a < b else '**fails**'} ({b / a:.1f}x) | |"
            )

        def phase_rate(algo: str, phase: str) -> float | None:
            x = sp.get(("rmat_1m_20m", algo, 8))
            if not x:
                return None
            v = float(np.median([r["phases_cpu"].get(phase, np.nan) for r in x["repeats"]]))
            return x["repeats"][0]["num_edges"] / v / 1e6 if v > 0 else None

        for label, algo, phase, bound in (
            ("HDRF pass ≥ 6 M edges/s", "hdrf", "hdrf", 6.0),
            ("SPRING clustering pass ≥ 20 M edges/s", "spring", "clustering", 20.0),
            ("2PS-L clustering pass ≥ 20 M edges/s", "2ps-l", "clustering", 20.0),
        ):
            r = phase_rate(algo, phase)
            if r is not None:
                L.append(
                    f"| {label} (R-MAT 1M/20M, speed stage, CPU time) | | {r:.1f} "
                    f"{'**holds**' if r >= bound else '**fails**'} | |"
                )
        L.append(
            "\nThe reference graphs take 1-4 s per algorithm, mostly fixed costs (numba "
            "cache loading, CSR/degree passes over < 1.6M edges) measured in wall time on a "
            "machine shared with other jobs, so the SPRING/2PS-L seconds there are noise-level; "
            "the R-MAT 1M/20M row (CPU time) is the meaningful comparison."
        )

        L.append("\n### Ratios against METIS and HDRF (means over the reference graphs)\n")
        L.append("| variant | p | cut / METIS cut | RF / METIS RF | RF / HDRF RF |")
        L.append("|---|---|---|---|---|")
        for c in cols:
            for p in (4, 8, 16):
                r1 = ratio(c, "edge_cut", "metis", "edge_cut", p)
                r2 = ratio(c, "replication_factor", "metis", "replication_factor", p)
                r3 = ratio(c, "replication_factor", "hdrf", "replication_factor", p)
                if r1 is None and r2 is None:
                    continue
                L.append(
                    f"| {c} | {p} | {_fmt(r1, '.2f')} | {_fmt(r2, '.2f')} | {_fmt(r3, '.2f')} |"
                )

    _rules_section(L, idx, ref)
    _families_section(L, idx)

    # ---- synthetic / memory
    syn = [g for g in SYNTHETIC if any(k[0] == g for k in idx)]
    if syn:
        L.append("\n## 1M-node synthetic graphs: memory and speed\n")
        L.append(
            "| graph | p | variant | cut | RF | node bal | seconds | peak RSS MB | "
            "RSS / METIS | Medges/s per phase |"
        )
        L.append("|---" * 10 + "|")
        # METIS runs killed at the time limit still have a peak RSS: a lower bound ("≥")
        any_rss = {
            (r["graph"], r["variant"], r["parts"]): (
                r.get("child_peak_rss_bytes"),
                "metrics" not in r,
            )
            for r in records
        }
        for g in syn:
            for p in (4, 8, 16):
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
                    rr_s = ("≤ " if base_partial else "") + _fmt(rr, ".3f")
                    mark = " †" if _before_issue31(r) else ""
                    L.append(
                        f"| {g} | {p} | {v}{mark} | {_fmt(_m(r, 'edge_cut'))} | "
                        f"{_fmt(_m(r, 'replication_factor'), '.2f')} | "
                        f"{_fmt(_m(r, 'node_balance'), '.3f')} | {_fmt(_m(r, 'seconds'), '.1f')} | "
                        f"{_mb(rss)} | {rr_s} | {_passes(r)} |"
                    )
        a, b = "rmat_1m_5m", "rmat_1m_20m"
        if any(k[0] == a for k in idx) and any(k[0] == b for k in idx):
            L.append(
                "\nPeak RSS when edges grow 4x at 1M nodes (R-MAT 1M/5M -> 1M/20M "
                "generated edges):\n"
            )
            L.append(
                "| variant | p | RSS 5M (MB) | RSS 20M (MB) | growth | ≤ 1/10 of METIS at 20M |"
            )
            L.append("|---|---|---|---|---|---|")
            for p in (4, 8, 16):
                m_rss, m_partial = any_rss.get((b, "metis", p), (None, False))
                for v in VARIANTS:
                    ra, rb = idx.get((a, v, p)), idx.get((b, v, p))
                    if ra is None or rb is None:
                        continue
                    x, y = ra.get("child_peak_rss_bytes"), rb.get("child_peak_rss_bytes")
                    ok = "—"
                    if v in STREAMING and m_rss:
                        if y * 10 <= m_rss:
                            ok = "**holds**" + (" (METIS ≥, killed)" if m_partial else "")
                        else:
                            ok = "**fails**" + (" (METIS killed: lower bound)" if m_partial else "")
                    L.append(f"| {v} | {p} | {_mb(x)} | {_mb(y)} | {y / x:.2f}x | {ok} |")
            L.append(
                "\nAbout 100 MB of every figure is the interpreter with numpy and numba. The "
                "vertex-cut algorithms (hdrf, dbh, greedy, 2ps-l) grow by about 2 bytes per "
                "edge: their output, the E-entry int16 edge->part array, is a memory-mapped "
                "file, and the owner pass, the metrics and the assignment writer read it "
                "through the mapping, whose clean file pages count in `ru_maxrss` (the "
                "kernel may drop them at any time). Their O(V) state does not grow. GREM "
                "(and the default, GREM + refinement) holds its METIS-seeded first window "
                "(10% of the edges) in memory."
            )
        if any(_before_issue31(r) for r in records if r["graph"] in syn and "metrics" in r):
            L.append(
                "\n† ran before issue 31 made `seed_history=true` GREM's default: these GREM "
                "runs started every node's history at 0 (the first window's counts were not "
                "kept); not rerun on the 1M-node graphs (minutes per run on this machine)."
            )

    # ---- speed
    speed = meta.get("speed") or []
    if speed:
        L.append("\n## Speed of the algorithms alone (no balance post-pass, no metrics)\n")
        L.append(
            "`python bench/partition.py --stage speed`: each algorithm in a fresh process via "
            "the Python API, the edge file read from disk in 2**20-edge chunks; medians over "
            "the repeats. The phase timers are switched to process CPU time in that process "
            "(`time.perf_counter = time.process_time`), so Medges/s per phase = |E| / CPU "
            "seconds of that pass: what one dedicated core does, which the other jobs on this "
            "shared 2-core machine (load average in the last column) disturb least. Wall "
            f"seconds of the whole algorithm are shown too. Command: "
            f"`{meta.get('speed_command')}`.\n"
        )
        L.append("| graph | p | algorithm | wall s | CPU s | CPU Medges/s per phase | load avg |")
        L.append("|---" * 7 + "|")
        for rec in speed:
            reps = rec["repeats"]
            e = reps[0]["num_edges"]
            wall = float(np.median([r["wall"] for r in reps]))
            cpu = float(np.median([r["cpu"] for r in reps]))
            phases = {}
            for k in reps[0].get("phases_cpu", {}):
                v = float(np.median([r["phases_cpu"].get(k, np.nan) for r in reps]))
                if v > 0 and k not in NOT_EDGE_PASSES:
                    phases[k] = e / v / 1e6
            load = reps[-1]["load"][0]
            ph = ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
            L.append(
                f"| {rec['graph']} | {rec['parts']} | {rec['algo']} | {wall:.1f} | "
                f"{cpu:.1f} | {ph} | {load:.1f} |"
            )

    # ---- per-graph detail
    L.append("\n## Every run\n")
    L.append(
        "| graph | p | variant | cut | RF | vcRF | node bal | train bal | seconds | "
        "peak RSS MB | Medges/s per phase |"
    )
    L.append("|---" * 11 + "|")
    for r in records:
        if "metrics" not in r:
            L.append(
                f"| {r['graph']} | {r['parts']} | {r['variant']} | FAILED (rc "
                f"{r.get('returncode')}{', timeout' if r.get('timed_out') else ''}) "
                "| | | | | | | |"
            )
            continue
        L.append(
            f"| {r['graph']} | {r['parts']} | {r['variant']} | {_fmt(_m(r, 'edge_cut'))} | "
            f"{_fmt(_m(r, 'replication_factor'), '.2f')} | "
            f"{_fmt(_m(r, 'vertex_cut_rf'), '.2f')} | {_fmt(_m(r, 'node_balance'))} | "
            f"{_fmt(_m(r, 'train_balance'))} | {_fmt(_m(r, 'seconds'), '.2f')} | "
            f"{_mb(r.get('child_peak_rss_bytes'))} | {_passes(r)} |"
        )
    if errors:
        L.append("\n## Failures\n")
        for r in errors:
            err = (r.get("error") or "").strip().splitlines()[-3:]
            L.append(
                f"- {r['graph']} p={r['parts']} {r['variant']}: `{r['command']}` -> "
                f"rc {r.get('returncode')}: {' / '.join(err)[:400]}"
            )
    write_text_atomic(path_md, "\n".join(L) + "\n")


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 graphs, p = 4")
    ap.add_argument(
        "--stage", choices=["all", "reference", "families", "synthetic", "speed"], default="all"
    )
    ap.add_argument("--repeats", type=int, default=3, help="repeats of --stage speed")
    ap.add_argument("--graphs", nargs="*", help="override the graph list")
    ap.add_argument("--parts", nargs="*", type=int, help="override p (default 4 8 16)")
    ap.add_argument("--variants", nargs="*", help=f"subset of {', '.join(VARIANTS)}")
    ap.add_argument("--work", default=str(WORK / "partition"))
    ap.add_argument(
        "--out",
        default=None,
        help="results prefix (default bench/results/partition; with --quick "
        "bench/work/partition_quick, not committed)",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--resume", action="store_true", help="skip runs already in the JSON")
    ap.add_argument(
        "--redo",
        nargs="*",
        default=[],
        help="with --resume: run these variants again (e.g. shoal's rule next to the "
        "paper's, back to back in this run)",
    )
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument(
        "--note", action="append", default=[], help="with --report-only: a line for the header"
    )
    ap.add_argument(
        "--merge",
        nargs="*",
        default=[],
        help="with --report-only: also take the runs of these result JSONs (e.g. a synthetic "
        "stage run in parallel with --out bench/work/partition_synthetic)",
    )
    args = ap.parse_args(argv)

    work = Path(args.work)
    if args.out:
        prefix = Path(args.out)
    elif args.quick:
        prefix = work.parent / "partition_quick"
    else:
        prefix = RESULTS / "partition"
    path_md, path_json = prefix.with_suffix(".md"), prefix.with_suffix(".json")
    records: list[dict] = []
    meta = {
        "command": command_line("partition.py", argv),
        "machine": machine_line(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if (args.resume or args.report_only) and path_json.exists():
        old = json.loads(path_json.read_text())
        records = old["runs"]
        meta["started"] = old["meta"].get("started", meta["started"])
        if old["meta"].get("speed"):
            meta["speed"] = old["meta"]["speed"]
        # the commands whose runs the JSON holds, in order (the first: what made the file)
        earlier = old["meta"].get("commands") or [old["meta"].get("command", "?")]
        meta["commands"] = earlier if args.report_only else [*earlier, meta["command"]]
        if args.report_only:  # the runs are still those of the command that made them
            meta["command"] = old["meta"].get("command", meta["command"])
    if args.report_only:
        if args.note:
            meta["notes"] = args.note
            meta["command"] = "the stages below, merged by --report-only"
        for extra in args.merge:
            other = json.loads(Path(extra).read_text())
            got = other["runs"]
            if other["meta"].get("speed"):
                meta["speed"] = other["meta"]["speed"]
                meta["speed_command"] = other["meta"].get("speed_command")
            keys = {(r["graph"], r["variant"], r["parts"]) for r in got}
            records = [r for r in records if (r["graph"], r["variant"], r["parts"]) not in keys]
            records += got
        write_report(records, meta, path_md, path_json)
        return 0

    if args.stage == "speed":
        meta["speed_command"] = meta["command"]
        speed = list(meta.get("speed") or [])
        if path_json.exists():  # keep what the file holds; only add speed figures
            old = json.loads(path_json.read_text())
            records = old["runs"]
            meta = {**old["meta"], "speed_command": meta["command"]}
            speed = meta.get("speed") or []
        graphs = args.graphs or ["rmat_1m_20m"]
        for gname in graphs:
            gpath = prepare_graph(gname, work)
            for p in args.parts or [8]:
                for algo in args.variants or SPEED_ALGOS:
                    rec = run_speed(gpath, algo, p, args.repeats)
                    log(f"speed {gname} p={p} {algo}: " + json.dumps(rec["repeats"][-1]))
                    speed = [
                        x for x in speed if (x["graph"], x["algo"], x["parts"]) != (gname, algo, p)
                    ] + [rec]
                    meta["speed"] = speed
                    write_report(records, meta, path_md, path_json)
        return 0

    plan: list[tuple[str, list[int], list[str]]] = []
    if args.quick:
        plan.append((None, [4], list(VARIANTS)))  # type: ignore[arg-type]
        graphs_for = {None: args.graphs or QUICK_GRAPHS}
    else:
        graphs_for = {}
        if args.stage in ("all", "reference"):
            plan.append(("ref", args.parts or [4, 8, 16], list(VARIANTS)))
            graphs_for["ref"] = args.graphs or REFERENCE_GRAPHS
        if args.stage in ("all", "families"):
            plan.append(("fam", args.parts or [4, 8, 16], FAMILY_VARIANTS))
            graphs_for["fam"] = args.graphs or [
                g + suffix for suffix in ("", SORTED_SUFFIX) for g in FAMILY_GRAPHS
            ]
        if args.stage in ("all", "synthetic"):
            # p = 8 first (memory/speed targets), then 4 and 16
            for ps in ([8], [4, 16]) if not args.parts else (args.parts,):
                plan.append((f"syn{ps}", ps, SYNTHETIC_VARIANTS))
                graphs_for[f"syn{ps}"] = args.graphs or list(SYNTHETIC)
    # failed runs are retried on --resume; runs killed at the time limit are not
    done = {
        (r["graph"], r["variant"], r["parts"])
        for r in records
        if ("metrics" in r or r.get("timed_out")) and r["variant"] not in args.redo
    }
    for key, parts_list, variants in plan:
        if args.variants:
            variants = [v for v in variants if v in args.variants]
        for gname in graphs_for[key]:
            try:
                gpath = prepare_graph(gname, work)
            except subprocess.CalledProcessError as exc:
                log(f"cannot prepare {gname}: {exc}")
                continue
            for p in parts_list:
                for v in variants:
                    if (gname, v, p) in done:
                        continue
                    rec = run_one(gpath, v, p, work, args.timeout)
                    m = rec.get("metrics", {})
                    log(
                        f"{gname} p={p} {v}: rc={rec['returncode']} "
                        f"cut={m.get('edge_cut', float('nan')):.3f} "
                        f"rf={m.get('replication_factor', float('nan')):.2f} "
                        f"t={rec['wall_seconds']:.1f}s "
                        f"rss={(rec['child_peak_rss_bytes'] or 0) / 2**20:.0f}MB"
                    )
                    records = [
                        r
                        for r in records
                        if (r["graph"], r["variant"], r["parts"]) != (gname, v, p)
                    ]
                    records.append(rec)
                    done.add((gname, v, p))
                    write_report(records, meta, path_md, path_json)
    write_report(records, meta, path_md, path_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
