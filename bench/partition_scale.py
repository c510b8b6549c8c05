"""Partitioning at papers100M shape under a memory cap (issue 11).

Generates DC-SBM graphs (edges, labels and splits only: :data:`SYNTH`) of the ``--sizes``
under ``WORK/partition_scale`` (kept between runs), then partitions each into ``--parts``
parts with each of ``--algos`` (``default`` = ``shoal partition`` without ``--algo``), each run
in a cgroup-v1 memory group capped at ``--limit`` (:func:`common.run_capped`: the cap covers the
process and its page cache; the graph's page cache is dropped first, so every run starts cold).
The CSR views the default's refinement builds (an external sort) are deleted before every run,
so each run pays for them. The group's ``memory.stat`` is sampled every 0.2 s for its anonymous
memory (``rss``: the process's own arrays, no page cache), the figure the per-node cost is
fitted on.

With ``--baseline-rev REV`` (its ``src`` extracted with ``git archive``) or ``--baseline-src
DIR`` (a ``src`` folder of another shoal), graphs of at most ``--baseline-max-nodes`` nodes are
also partitioned by that code with ``--baseline-algos`` (the ``before`` rows). The phase profile
(:func:`profile_child`) runs the default pipeline in a capped child on graphs of at most
``--profile-max-nodes`` nodes, sampling its anonymous memory per phase.

Results: for every run whether it finished, wall seconds, the group's peak usage, the sampled
anonymous peak, bytes read, edge cut and balance; least-squares fits ``cost = fixed + slope * x``
of the anonymous peak (against nodes) and of the wall time (against stored edges) over the
sizes, projected to ogbn-papers100M's shape (:data:`PAPERS100M`).

Usage::

    python bench/partition_scale.py [--sizes 28000000:400000000@g28m,7000000:100000000@g7m]
        [--algos default,spring] [--limit 2GiB] [--baseline-rev REV] [--reuse]
    python bench/partition_scale.py --report-only     # re-render the .md from the .json

``--smoke`` runs two tiny graphs, the default algorithm, this checkout's ``src`` as the
baseline and the phase profile, capped at ``--limit`` when a cgroup-v1 memory controller is
writable (uncapped otherwise).
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

import common
from common import ROOT, SHOAL, WORK, Cgroup, parse_size, run_capped

PAPERS100M = {"nodes": 111_059_956, "undirected_edges": 1_615_685_872}
SYNTH = ["--features", "0", "--classes", "16", "--train-frac", "0.01", "--val-frac", "0.002"]
SYNTH += ["--seed", "0"]
SRC_PATHS = ["src/shoal/partition", "src/shoal/data"]


def parse_sizes(text: str) -> list[tuple[int, int, str]]:
    """``N:E[@DIR],...`` -> ``[(N, E, dir name)]``; the default dir name is ``dcsbm_N_E``."""
    out = []
    for item in text.split(","):
        size, _, name = item.partition("@")
        n, e = (int(float(x)) for x in size.split(":"))
        out.append((n, e, name or f"dcsbm_{n}_{e}"))
    return out


def ensure_graph(work: Path, n: int, e: int, name: str) -> dict:
    """Generate the DC-SBM graph ``work/name`` once (uncapped); returns the generator's
    JSON summary."""
    d, js = work / name, work / f"{name}.synth.json"
    if not (d / "meta.json").exists():
        size = ["--nodes", n, "--edges", e]
        common.shoal(
            "data", "synth", "dcsbm", *size, *SYNTH, "--out", d, "--overwrite", "--json", js
        )
    return json.loads(js.read_text()) if js.exists() else {}


class StatSampler(threading.Thread):
    """Peak of ``rss`` (anonymous) and ``rss + mapped_file`` in the group's memory.stat."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path / "memory.stat"
        self.peak_rss = self.peak_rss_mapped = 0
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
        shutil.rmtree(g / name, ignore_errors=True)


def partition_run(g: Path, algo: str, args, src: str | None, limit: int | None) -> dict:
    """One capped ``shoal partition`` run; the run_capped record plus metrics."""
    drop_csr(g)
    out = args.work / f"metrics_{g.name}_{algo}_{'before' if src else 'after'}.json"
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "partition", str(g), "--parts", str(args.parts), "--json", str(out)]
    cmd += [] if algo == "default" else ["--algo", algo]
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    sampler = StatSampler(Cgroup(args.cgroup_name, limit or 0).path)
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
        res["metrics"] = {k: m[k] for k in (*keep, "seconds_per_phase", "peak_rss_bytes")}
    drop_csr(g)
    return res


def extract_src(rev: str, work: Path) -> Path:
    """``src/`` of git revision ``rev``, extracted once under ``work/before_<rev>``."""
    dest = work / f"before_{rev}"
    if not (dest / "src").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        arc = subprocess.run(
            ["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=arc.stdout, check=True)
    return dest / "src"


def git(*a: str) -> str:
    return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def git_rev() -> str:
    """The last commit that changed the partitioning code (:data:`SRC_PATHS`), with ``+dirty``
    when the work tree differs from it there (then the run did not use committed code)."""
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
    """The phase profile of the default partitioner, after and before, on every graph of
    at most ``--profile-max-nodes`` nodes, each capped."""
    res = []
    for n, _, name in parse_sizes(args.sizes):
        if n > args.profile_max_nodes:
            continue
        g = args.work / name
        for src in [None, args.baseline_src] if args.baseline_src else [None]:
            out = args.work / f"phases_{name}_{'before' if src else 'after'}.json"
            drop_csr(g)
            cmd = [
                sys.executable,
                __file__,
                "--profile-child",
                g,
                "--parts",
                args.parts,
                "--out",
                out,
            ]
            env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
            r = run_capped(
                [str(c) for c in cmd],
                args.limit,
                name=args.cgroup_name,
                timeout=args.baseline_timeout,
                evict_paths=[g],
                env=env,
            )
            drop_csr(g)
            if r["returncode"] == 0:
                code = "before" if src else "after"
                res.append({"graph": name, "code": code, **json.loads(out.read_text())})
    return res


def fit(rows: list[dict], key, var: str) -> dict | None:
    """Least squares ``y = fixed + slope * x`` over the runs, ``x`` = nodes (``var="N"``, for
    memory) or stored edges (``"E"``, for time)."""
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


def run_one(g: Path, algo: str, src: str | None, limit: int | None, args, info: dict) -> dict:
    """One run's record, from ``--work`` when ``--reuse`` finds one made by this same code
    (same :func:`git_rev`), else measured now and kept there."""
    code = "before" if src else "after"
    cache = args.work / f"run_{g.name}_{algo}_{code}.json"
    rev = git_rev() if not src else f"{args.baseline_rev or args.baseline_src} (before)"
    if args.reuse and cache.exists():
        r = json.loads(cache.read_text())
        if r.get("git") == rev and "+dirty" not in rev:
            return {**r, "reused": True}
    print(f"partition {g.name} {algo} {code}", flush=True)
    load = os.getloadavg()[0]
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
        load_before=f"{load:.2f}",
        load_after=f"{os.getloadavg()[0]:.2f}",
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    common.write_json(cache, r, default=str)
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
            variants += [
                (a, args.baseline_src, args.baseline_limit) for a in args.baseline_algos.split(",")
            ]
        runs += [run_one(g, algo, src, limit, args, info) for algo, src, limit in variants]
    fits = {}
    for algo, code in sorted({(r["algo"], r["code"]) for r in runs}):
        rows = [
            r
            for r in runs
            if (r["algo"], r["code"]) == (algo, code)
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
        reused = " (reused)" if r.get("reused") else ""
        lines.append(
            f"- {r['graph']} {r['algo']} {r['code']} (code {r.get('git')}, run "
            f"{r.get('date')}{reused}): {txt or '—'}"
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


def render(res: dict) -> str:
    h, runs = res["header"], res["runs"]
    limit = h.get("limit") or next((r["limit"] for r in runs if r["code"] == "after"), None)
    cap = "uncapped" if limit is None else f"under a {limit / 2**30:g} GiB cap"
    ratios = sorted({round(r["stored_edges"] / r["nodes"], 1) for r in runs})
    p100 = 2 * PAPERS100M["undirected_edges"] / PAPERS100M["nodes"]
    paras = [
        f"Date: {h['date']}. Code: partitioning at {h['git']}, repository at {h.get('head')}. "
        f"Load before: {h['load']}; each run's load before and after is in the table (the "
        "times depend on it, the memory does not).",
        "DC-SBM graphs (`shoal data synth dcsbm --nodes N --edges E "
        f"{h.get('synth', ' '.join(SYNTH))}`), "
        f"`--parts` {h['parts']}; `default` = `shoal partition` without `--algo`, the others "
        f"`--algo ALGO`. `before` rows: the code of `{h.get('baseline_src')}`. Each run in its "
        "own memory cgroup (limit column), the graph's page cache dropped first, the CSR views "
        "of the refinement deleted before the run and rebuilt inside it. Peak anon = sampled "
        "(0.2 s) peak of the group's anonymous memory (`rss` of memory.stat: the process's own "
        "arrays, no page cache); cgroup peak = `memory.max_usage_in_bytes` (page cache "
        "included, so it reaches the cap whenever the files are larger than it). Read GB = "
        "blocks read by the process (`ru_inblock`). With `--reuse`, a run recorded earlier "
        "under `--work` by the same code (same commit of `src/shoal/partition` and "
        "`src/shoal/data`, clean) is reused (marked below with its date).",
    ]
    lines = common.header(f"Partitioning at papers100M shape {cap}", h, *paras)
    lines += [
        *_run_rows(runs),
        "",
        "## Fits and projection to ogbn-papers100M (111 M nodes, 3.23 B stored rows)",
        "",
        "Least squares `cost = fixed + slope * x` over the finished runs with N >= "
        f"{h['fit_min_nodes']:,}: memory against N, time against stored edges. The graphs "
        f"have {', '.join(map(str, ratios))} stored edges per node (papers100M {p100:.1f}); at "
        "one ratio a per-node and a per-edge term cannot be told apart, so the slope is the "
        "cost per node at that ratio and the projection follows it. With two sizes the line "
        "passes through both points, and the peak may come from different phases at the two "
        "sizes (phase profile below).",
        "",
        *_fit_rows(res["fits"]),
        "",
        "## Where the default's memory goes (phase profile)",
        "",
        "The default pipeline run in-process in the same cap, its anonymous memory (`RssAnon`) "
        "sampled every 20 ms, phases marked by wrapping the functions `run_partition` calls "
        "(`grem` = the partitioner). Per node = (peak - the process before the pipeline) / N: "
        "it includes the fixed buffers, so it overstates the slope.",
        "",
        *_phase_rows(res.get("phases", [])),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes",
        default="28000000:400000000@g28m,7000000:100000000@g7m",
        help="N:undirected_edges[@DIR], comma-separated (DIR under the work folder, generated "
        "if missing; default name dcsbm_N_E)",
    )
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--algos", default="default,spring")
    ap.add_argument("--limit", type=parse_size, default=parse_size("2GiB"))
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--fit-min-nodes", type=int, default=4_000_000)
    ap.add_argument(
        "--reuse", action="store_true", help="reuse run records kept in the work folder"
    )
    ap.add_argument("--baseline-src", default=None, help="src folder of the code before")
    ap.add_argument("--baseline-rev", default=None, help="git revision of the code before")
    ap.add_argument("--baseline-max-nodes", type=int, default=28_000_000)
    ap.add_argument("--baseline-limit", type=parse_size, default=parse_size("2GiB"))
    ap.add_argument("--baseline-algos", default="default")
    ap.add_argument("--baseline-timeout", type=float, default=900.0)
    ap.add_argument("--profile-max-nodes", type=int, default=7_000_000)
    ap.add_argument(
        "--cgroup-name", default="shoal_partition_scale", help="memory cgroup of each run"
    )
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    ap.add_argument("--profile-child", default=None, help=argparse.SUPPRESS)
    common.bench_args(ap, out="bench/results/partition_scale")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/partition_scale")
    if args.profile_child:
        return profile_child(args.profile_child, args.parts, Path(args.out))
    if args.report_only:
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
        return 0
    args.work = WORK / "partition_scale"
    if args.smoke:
        args.sizes, args.algos, args.fit_min_nodes = "2000:8000@s2k,4000:16000@s4k", "default", 0
        args.baseline_src, args.baseline_max_nodes, args.profile_max_nodes = (
            str(ROOT / "src"),
            2000,
            2000,
        )
        if not os.access(common.CGROUP_BASE, os.W_OK):
            args.limit = args.baseline_limit = None
    args.work.mkdir(parents=True, exist_ok=True)
    if args.baseline_rev:
        args.baseline_src = str(extract_src(args.baseline_rev, args.work))
    header = {
        "command": common.command_line("partition_scale.py"),
        "machine": common.machine_line(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": f"{os.getloadavg()[0]:.2f}",
        "parts": args.parts,
        "limit": args.limit,
        "synth": " ".join(SYNTH),
        "fit_min_nodes": args.fit_min_nodes,
        "baseline_src": args.baseline_rev or (args.baseline_src and common.rel(args.baseline_src)),
        "git": git_rev(),
        "head": git("rev-parse", "--short", "HEAD"),
    }
    t0 = time.time()
    res = {"header": header, **run_all(args), "phases": profile_runs(args)}
    header["total_seconds"] = time.time() - t0
    common.write_results(prefix, res, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
