"""Partitioning at papers100M shape under a memory cap (issue 11).

Generates DC-SBM graphs (edges, labels and splits only: ``--features 0``) of the given sizes
under ``--work`` (kept between runs), then partitions each into ``--parts`` parts with the
default partitioner (``shoal partition`` without ``--algo``) and with ``--algo spring``, each
inside a cgroup-v1 memory group capped at ``--limit`` (``bench/cgroup.py``: the cap covers the
process and its page cache; the graph's page cache is dropped first, so every run starts cold).
The CSR view the default's refinement builds (``csr_out``, an external sort) is deleted before
every run, so each run pays for it. While a run is in flight, the group's ``memory.stat`` is
sampled every 0.2 s for its anonymous memory (``rss``, the process's own arrays; page cache
excluded), whose peak is the figure that the per-node cost is fitted on.

With ``--baseline-rev REV`` (a git revision; its ``src`` is extracted with ``git archive`` under
``--work``; or ``--baseline-src DIR``, a ``src`` folder of an older shoal), graphs of at most ``--baseline-max-nodes`` nodes are also partitioned with that code by the
algorithms of ``--baseline-algos`` (under ``--baseline-limit``), as the ``before`` rows.

Writes ``<out>.json`` and ``<out>.md`` (default ``bench/results/partition_scale``): for every run
whether it finished, wall seconds, the cgroup's peak usage, the sampled anonymous peak, bytes
read, edge cut, node and edge balance; then least-squares fits ``cost = a + b*N + c*E`` of the
anonymous peak and of the wall time over the sizes, projected to ogbn-papers100M's shape
(111,059,956 nodes, 1,615,685,872 undirected edges = 3.23 B stored rows).

Usage::

    python bench/partition_scale.py          # 28M/400M (g28m) and 7M/100M (g7m) undirected
    python bench/partition_scale.py --sizes 1000000:14300000 --out bench/work/ps  # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from common import (
    RESULTS,
    ROOT,
    SHOAL,
    WORK,
    Cgroup,
    command_line,
    machine_line,
    parse_size,
    run_capped,
    write_json,
    write_text_atomic,
)

PAPERS100M = {"nodes": 111_059_956, "undirected_edges": 1_615_685_872}
CG_NAME = "shoal_partition_scale"


def parse_sizes(text: str) -> list[tuple[int, int, str]]:
    """``N:E[@DIR],...`` -> ``[(N, E, dir name)]``; the default dir name is ``dcsbm_N_E``."""
    out = []
    for item in text.split(","):
        size, _, name = item.partition("@")
        n, e = (int(float(x)) for x in size.split(":"))
        out.append((n, e, name or f"dcsbm_{n}_{e}"))
    return out


def ensure_graph(work: Path, n: int, e: int, name: str) -> dict:
    """Generate the DC-SBM graph ``work/name`` once (uncapped) unless it exists; returns the
    generator's JSON summary (``work/name.synth.json``)."""
    d = work / name
    js = d.with_suffix(".synth.json")
    if not (d / "meta.json").exists():
        cmd = [*SHOAL, "data", "synth", "dcsbm", "--nodes", str(n), "--edges", str(e)]
        cmd += ["--features", "0", "--classes", "16", "--train-frac", "0.01"]
        cmd += ["--val-frac", "0.002", "--seed", "0", "--out", str(d), "--overwrite"]
        cmd += ["--json", str(js)]
        print("generating:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(js.read_text()) if js.exists() else {}


class StatSampler(threading.Thread):
    """Peak of ``rss`` (anonymous) and ``rss + mapped_file`` in the group's memory.stat."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path / "memory.stat"
        self.peak_rss = 0
        self.peak_rss_mapped = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                st = dict(ln.split() for ln in self.path.read_text().splitlines())
                rss = int(st.get("rss", 0))
                self.peak_rss = max(self.peak_rss, rss)
                self.peak_rss_mapped = max(self.peak_rss_mapped, rss + int(st["mapped_file"]))
            except (OSError, ValueError, KeyError):
                pass
            self.stop.wait(0.2)


def drop_csr(g: Path) -> None:
    for name in ("csr_out", "csr_in"):
        if (g / name).exists():
            shutil.rmtree(g / name)


def partition_run(g: Path, algo: str, args, src: str | None, limit: int) -> dict:
    """One capped ``shoal partition`` run; returns the run_capped record plus metrics."""
    drop_csr(g)
    out = args.work / f"metrics_{g.name}_{algo}_{'before' if src else 'after'}.json"
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "partition", str(g), "--parts", str(args.parts), "--json", str(out)]
    if algo != "default":
        cmd += ["--algo", algo]
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    sampler = StatSampler(Cgroup(args.cgroup_name, limit).path)
    sampler.start()
    with open(out.with_suffix(".log"), "w") as log:
        res = run_capped(
            cmd,
            limit,
            name=args.cgroup_name,
            timeout=args.baseline_timeout if src else args.timeout,
            evict_paths=[g],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    sampler.stop.set()
    sampler.join()
    res["stderr_tail"] = out.with_suffix(".log").read_text()[-2000:]
    res["peak_anon_bytes"] = sampler.peak_rss
    res["peak_anon_mapped_bytes"] = sampler.peak_rss_mapped
    res["finished"] = res["returncode"] == 0 and out.exists()
    if res["finished"]:
        m = json.loads(out.read_text())
        keep = ("edge_cut", "node_balance", "edge_balance", "train_balance", "seconds")
        res["metrics"] = {k: m[k] for k in keep}
        res["metrics"]["seconds_per_phase"] = m["seconds_per_phase"]
        res["metrics"]["peak_rss_bytes"] = m["peak_rss_bytes"]
    drop_csr(g)
    return res


def extract_src(rev: str, work: Path) -> Path:
    """``src/`` of git revision ``rev``, extracted once under ``work/before_<rev>``."""
    dest = work / f"before_{rev}"
    if not (dest / "src").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        arc = subprocess.run(
            ["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=arc, check=True)
    return dest / "src"


SRC_PATHS = ["src/shoal/partition", "src/shoal/data"]


def git_rev() -> str:
    """The last commit that changed the partitioning code (``SRC_PATHS``), with ``+dirty``
    when the work tree differs from it there (then the run did not use committed code)."""

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", *SRC_PATHS)
    return git("log", "-1", "--format=%h", "--", *SRC_PATHS) + ("+dirty" if dirty else "")


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def profile_child(graph: str, parts: int, out: Path) -> int:
    """In a capped child: the default pipeline (``run_partition`` as ``shoal partition`` runs
    it), its own anonymous memory (``RssAnon``) sampled every 20 ms, and the start and end of
    every phase (the partitioner, balance, the CSR build, refinement, metrics), marked by
    wrapping the functions ``run_partition`` calls. Writes the peak of every phase to ``out``.
    """
    from shoal.data.format import GraphDir
    from shoal.partition import run as R

    samples: list[tuple[float, int]] = []
    marks: list[tuple[str, float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), _rss_anon()))
            stop.wait(0.02)

    def marked(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                marks.append((name, t, time.perf_counter()))

        return wrapper

    for name, label in (
        ("balance_assignment", "balance"),
        ("refine_assignment", "refine"),
        ("partition_metrics", "metrics"),
    ):
        setattr(R, name, marked(label, getattr(R, name)))
    GraphDir.build_csr = marked("csr build (in refine)", GraphDir.build_csr)
    g = GraphDir.open(graph)
    part = R.get_partitioner(R.DEFAULT_ALGORITHM, num_parts=1)
    type(part).partition = marked("grem", type(part).partition)
    base = _rss_anon()
    threading.Thread(target=sample, daemon=True).start()
    R.run_partition(
        g,
        R.DEFAULT_ALGORITHM,
        num_parts=parts,
        refine_passes=R.DEFAULT_REFINE_PASSES,
        **R.DEFAULT_OPTIONS,
    )
    stop.set()
    rows = [
        {
            "phase": n,
            "seconds": t1 - t0,
            "start_anon": base,
            "peak_anon": max([v for t, v in samples if t0 <= t <= t1] or [0]),
        }
        for n, t0, t1 in sorted(marks, key=lambda m: m[1])
    ]
    out.write_text(json.dumps({"nodes": g.num_nodes, "phases": rows}) + "\n")
    return 0


def profile_runs(args) -> list[dict]:
    """The phase profile (:func:`profile_child`) of the default partitioner, after and
    before, on every graph of at most ``--profile-max-nodes`` nodes, each capped."""
    res = []
    for n, _, name in parse_sizes(args.sizes):
        g = args.work / name
        if n > args.profile_max_nodes:
            continue
        for src in [None, args.baseline_src] if args.baseline_src else [None]:
            out = args.work / f"phases_{name}_{'before' if src else 'after'}.json"
            drop_csr(g)
            cmd = [
                sys.executable,
                __file__,
                "--profile-child",
                str(g),
                "--parts",
                str(args.parts),
                "--out",
                str(out),
            ]
            env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
            r = run_capped(
                cmd,
                args.limit,
                name=args.cgroup_name,
                timeout=args.baseline_timeout,
                evict_paths=[g],
                env=env,
            )
            drop_csr(g)
            if r["returncode"] == 0:
                res.append(
                    {
                        "graph": name,
                        "code": "before" if src else "after",
                        **json.loads(out.read_text()),
                    }
                )
    return res


def fit(rows: list[dict], key, var: str) -> dict | None:
    """Least squares ``y = fixed + slope * x`` over the runs, ``x`` = nodes (``var="N"``, for
    memory: the design is O(V) plus fixed buffers) or stored edges (``"E"``, for time: every
    phase streams the edges). The sizes share one E/N ratio (papers100M's), so a separate
    per-node and per-edge term cannot be told apart; the projection follows the same ratio."""
    pts = [(r["nodes"] if var == "N" else r["stored_edges"], key(r)) for r in rows]
    pts = [(x, y) for x, y in pts if y is not None]
    if len({x for x, _ in pts}) < 2:
        return None
    x, y = (np.array(v, dtype=np.float64) for v in zip(*pts, strict=True))
    slope, fixed = np.polyfit(x, y, 1)
    target = PAPERS100M["nodes"] if var == "N" else 2 * PAPERS100M["undirected_edges"]
    return {
        "var": var,
        "fixed": float(fixed),
        "slope": float(slope),
        "papers100m": float(fixed + slope * target),
        "points": len(pts),
    }


def run_one(g: Path, algo: str, src: str | None, limit: int, args, info: dict) -> dict:
    """One run's record, from ``--work`` when ``--reuse`` finds one made by this same code
    (same ``git_rev()``), else measured now and kept there."""
    code = "before" if src else "after"
    cache = args.work / f"run_{g.name}_{algo}_{code}.json"
    rev = git_rev() if not src else f"{args.baseline_rev or args.baseline_src} (before)"
    if args.reuse and cache.exists():
        r = json.loads(cache.read_text())
        if r.get("git") == rev and "+dirty" not in rev:
            r["reused"] = True
            return r
    print(f"partition {g.name} {algo} {code}", flush=True)
    load = open("/proc/loadavg").read().split()[0]
    r = partition_run(g, algo, args, src, limit)
    meta = json.loads((g / "meta.json").read_text())
    r.update(
        graph=g.name,
        nodes=meta["num_nodes"],
        stored_edges=meta["num_edges"],
        algo=algo,
        code=code,
        limit=limit,
        synth_seconds=info.get("seconds"),
        git=rev,
        load_before=load,
        load_after=open("/proc/loadavg").read().split()[0],
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    cache.write_text(json.dumps(r, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in r.items() if k != "command"}, default=str))
    return r


def run_all(args) -> dict:
    runs = []
    for n, e, name in parse_sizes(args.sizes):
        info = ensure_graph(args.work, n, e, name)
        g = args.work / name
        meta = json.loads((g / "meta.json").read_text())
        if meta["num_nodes"] != n or meta["num_edges"] != 2 * e:
            raise SystemExit(
                f"{g}: {meta['num_nodes']} nodes / {meta['num_edges']} rows, expected {n} / {2 * e}"
            )
        variants = [(a, None, args.limit) for a in args.algos.split(",")]
        if args.baseline_src and n <= args.baseline_max_nodes:
            bl = args.baseline_algos.split(",")
            variants += [(a, args.baseline_src, args.baseline_limit) for a in bl]
        runs += [run_one(g, algo, src, limit, args, info) for algo, src, limit in variants]
    fits = {}
    for algo, code in sorted({(r["algo"], r["code"]) for r in runs}):
        rows = [
            r
            for r in runs
            if r["algo"] == algo
            and r["code"] == code
            and r["finished"]
            and r["nodes"] >= args.fit_min_nodes
        ]
        fits[f"{algo} {code}"] = {
            "peak_anon_bytes": fit(rows, lambda r: r["peak_anon_bytes"], "N"),
            "seconds": fit(rows, lambda r: r["seconds"], "E"),
        }
    return {"runs": runs, "fits": fits}


def _mib(x) -> str:
    return "—" if x is None else f"{x / 2**20:,.0f}"


def _f(x, fmt="{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _finished(r: dict) -> str:
    if r["finished"]:
        return "yes"
    if r.get("timed_out"):
        return f"NO: killed after {r['seconds']:.0f} s (timeout)"
    if r.get("cgroup", {}).get("oom_kill"):
        return "NO: OOM-killed"
    return f"NO: exit {r['returncode']}"


def _run_rows(runs: list[dict]) -> list[str]:
    lines = [
        "| graph | N | stored edges | algo | code | limit MiB | finished | seconds | "
        "cgroup peak MiB | peak anon MiB | anon B/node | read GB | edge cut | node bal | "
        "edge bal | load before/after |",
        "|" + "---|" * 16,
    ]
    for r in runs:
        m = r.get("metrics", {})
        lines.append(
            f"| {r['graph']} | {r['nodes']:,} | {r['stored_edges']:,} | {r['algo']} | "
            f"{r['code']} | {_mib(r['limit'])} | {_finished(r)} | "
            f"{r['seconds']:.0f} | {_mib(r.get('cgroup', {}).get('max_usage'))} | "
            f"{_mib(r['peak_anon_bytes'])} | {r['peak_anon_bytes'] / r['nodes']:.0f} | "
            f"{r['read_bytes'] / 1e9:.1f} | {_f(m.get('edge_cut'))} | "
            f"{_f(m.get('node_balance'))} | {_f(m.get('edge_balance'))} | "
            f"{r.get('load_before', '?')} / {r.get('load_after', '?')} |"
        )
    lines += [
        "",
        "Seconds per phase (inside the partitioner; the wall time above adds the "
        "interpreter start and the JSON output):",
        "",
    ]
    for r in runs:
        ph = r.get("metrics", {}).get("seconds_per_phase", {})
        txt = ", ".join(f"{k} {v:.0f}" for k, v in ph.items())
        lines.append(
            f"- {r['graph']} {r['algo']} {r['code']} (code {r.get('git')}, run "
            f"{r.get('date')}): {txt or '—'}"
        )
    return lines


def _phase_rows(profiles: list[dict]) -> list[str]:
    lines = [
        "| graph | code | phase | seconds | peak anon MiB | above start MiB | per node B |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in profiles:
        for r in p["phases"]:
            above = r["peak_anon"] - r["start_anon"]
            lines.append(
                f"| {p['graph']} | {p['code']} | {r['phase']} | {r['seconds']:.0f} | "
                f"{_mib(r['peak_anon'])} | {_mib(above)} | {above / p['nodes']:.1f} |"
            )
    return lines


def _fit_rows(fits: dict) -> list[str]:
    lines = [
        "| algo | code | quantity | fixed | slope | points | papers100M |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, f in fits.items():
        algo, code = key.split()
        m, s = f["peak_anon_bytes"], f["seconds"]
        if m:
            lines.append(
                f"| {algo} | {code} | peak anon memory | {_mib(m['fixed'])} MiB | "
                f"{m['slope']:.1f} B per node | {m['points']} | "
                f"{m['papers100m'] / 2**30:.2f} GiB |"
            )
        if s:
            lines.append(
                f"| {algo} | {code} | wall seconds | {s['fixed']:.0f} s | "
                f"{s['slope'] * 1e9:.1f} ns per stored edge | {s['points']} | "
                f"{s['papers100m'] / 60:.0f} min |"
            )
    return lines


def write_md(res: dict, path: Path) -> None:
    h = res["header"]
    lines = [
        "# Partitioning at papers100M shape under a 2 GiB cap",
        "",
        f"Command: `{h['command']}`",
        f"Date: {h['date']}. Machine: {h['machine']}. Code: partitioning at {h['git']}, "
        f"repository at {h.get('head')}. Load before: "
        f"{h['load']}. Another session ran tests and benchmarks on the same 2 cores at the "
        "same time (load column), so the times are noisy; memory is not affected.",
        "",
        "DC-SBM graphs (16 classes, homophily 0.5, degree exponent 2.5, 1% train nodes, no "
        f"features), `--parts` {h['parts']}; `default` = `shoal partition` without `--algo` "
        "(GREM with windows of min(|V|, 2 Mi) edges, METIS on the first window of each level, "
        "`edge_balance` 1.5, 4 restreaming refinement passes over the CSR built by an external "
        "sort); `spring` = `--algo spring`. `before` rows: the code of "
        f"`{h.get('baseline_src')}`. Each run in its own memory cgroup (limit column), graph "
        "page cache dropped first, the CSR view of the refinement deleted before the run and "
        "rebuilt inside it. Peak anon = sampled (0.2 s) peak of the group's anonymous memory "
        "(`rss` of memory.stat: the process's own arrays, no page cache); cgroup peak = "
        "`memory.max_usage_in_bytes` (page cache included, so it reaches the cap whenever the "
        "files are larger than it). Read GB = blocks read by the process (`ru_inblock`). "
        "With `--reuse`, a run recorded earlier under `--work` by the same code (same commit "
        "of `src/shoal/partition` and `src/shoal/data`, clean) is reused: its date is listed "
        "below.",
        "",
        *_run_rows(res["runs"]),
        "",
        "## Fits and projection to ogbn-papers100M (111 M nodes, 3.23 B stored rows)",
        "",
        "Least squares `cost = fixed + slope * x` over the finished runs with N >= "
        f"{h['fit_min_nodes']:,}: memory against N (the design is O(V) plus buffers of a fixed "
        "size: the GREM window and METIS on it, the external sort's 256 MiB), time against "
        "stored edges (every phase streams the edges). All sizes have papers100M's E/N ratio "
        "(28.6 stored edges per node; papers100M 29.1), so a per-node and a per-edge term "
        "cannot be told apart: the slope is the cost per node at that ratio, and the "
        "projection follows it. With two sizes the line passes through both points, and the "
        "peak may come from different phases at the two sizes (below: GREM at 7M), so the "
        "slope can understate the O(V) state. That state, by design: GREM 11 bytes per node "
        "(int16 group, int8 side, float32 history difference, int32 in-degree) plus the 1-byte "
        "training mask; the post-passes one int32 part array and the mask; the CSR build "
        "(refinement) adds the external sort's int64 offsets, 8 bytes per node, and its 256 MiB "
        "buffer: at most 13 bytes per node at any phase, i.e. 1.34 GiB at papers100M's "
        "111 M nodes plus the fixed buffers.",
        "",
        *_fit_rows(res["fits"]),
        "",
        "## Where the default's memory goes (phase profile)",
        "",
        "The default pipeline run in-process in the same cap, its anonymous memory (`RssAnon`) "
        "sampled every 20 ms, phases marked by wrapping the functions `run_partition` calls "
        "(`grem` = the partitioner: in-degree pass and the bisection levels, METIS on each "
        "level's first window included). Per node = (peak - the process before the "
        "pipeline) / N: it includes the fixed buffers, so it overstates the slope.",
        "",
        *_phase_rows(res.get("phases", [])),
    ]
    write_text_atomic(path, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes",
        default="28000000:400000000@g28m,7000000:100000000@g7m",
        help="N:undirected_edges[@DIR], comma-separated (DIR under --work, generated if "
        "missing; default name dcsbm_N_E)",
    )
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--algos", default="default,spring")
    ap.add_argument("--limit", type=parse_size, default=parse_size("2GiB"))
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--work", type=Path, default=WORK / "partition_scale")
    ap.add_argument("--out", type=Path, default=RESULTS / "partition_scale")
    ap.add_argument("--fit-min-nodes", type=int, default=4_000_000)
    ap.add_argument("--reuse", action="store_true", help="reuse run records kept in --work")
    ap.add_argument("--baseline-src", default=None, help="src folder of the code before")
    ap.add_argument("--baseline-rev", default=None, help="git revision of the code before")
    ap.add_argument("--baseline-max-nodes", type=int, default=28_000_000)
    ap.add_argument("--baseline-limit", type=parse_size, default=parse_size("2GiB"))
    ap.add_argument("--baseline-algos", default="default")
    ap.add_argument("--baseline-timeout", type=float, default=900.0)
    ap.add_argument("--profile-max-nodes", type=int, default=7_000_000)
    ap.add_argument("--profile-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cgroup-name", default=CG_NAME, help="memory cgroup to create per run")
    args = ap.parse_args(argv)
    if args.profile_child:
        return profile_child(args.profile_child, args.parts, args.out)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.baseline_rev:
        args.baseline_src = str(extract_src(args.baseline_rev, args.work))
    header = {
        "command": command_line("partition_scale.py", argv),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_line(),
        "load": open("/proc/loadavg").read().split()[0],
        "parts": args.parts,
        "fit_min_nodes": args.fit_min_nodes,
        "baseline_src": args.baseline_rev or args.baseline_src,
        "git": git_rev(),
        "head": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
    }
    t0 = time.time()
    res = {"header": header, **run_all(args), "phases": profile_runs(args)}
    res["header"]["total_seconds"] = time.time() - t0
    write_json(args.out.with_suffix(".json"), res, default=str)
    write_md(res, args.out.with_suffix(".md"))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
