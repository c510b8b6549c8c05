"""What trains where (issue 53): every engine, and one process, x task x graph, then the typed
engines under a memory cap.

    python bench/matrix.py [--epochs 2] [--timeout 300] [--typed-scale 0.01]
        [--typed-features 32] [--target-relation cites] [--cap fraction:8] [--cap-scale 0.5]
        [--cap-features 512] [--cap-epochs 3] [--cap-engines minibatch,averaging]
        [--cap-timeout 300] [--cells PATTERNS] [--no-cap] [--out bench/results/matrix]
    python bench/matrix.py --report-only

**The matrix.** Runners: "one process" (``shoal train --graph G``) and every engine of the
registry (``shoal.engines.registry.engine_names()``: ``shoal train --store S --engine E
--nproc 2``); tasks ``node`` (test accuracy) and ``link`` (``--task link``, test MRR); graphs
``untyped`` (Cora: the shared dataset, else shoal's bundled copy) and ``typed`` (``shoal data
synth igbh --size tiny --scale 0.01 --features 32``: IGBH's six node types and eleven
relations, about 5,600 nodes). The link task trains on ``shoal data split-edges G --val 0.05
--test 0.1 --seed 0`` of the graph (on the typed graph with ``--target-relation cites``).
Stores: ``shoal partition --algo ldg --parts 2`` and ``shoal store build --halo-features`` of
the graph or of its split, one per graph for every engine. Every cell runs ``--model sage``
(untyped) or ``rgcn`` (typed) ``--fanouts 10,5 --hidden 64 --batch-size 256 --epochs E
--eval-every E --threads 1 --seed 0 --json`` in its own subprocess (its own session, killed
with its workers at ``--timeout``), and is recorded as:

- ``trained``: exit 0 and the run's JSON: its final test metric, mean epoch seconds and
  evaluation seconds;
- ``refused``: exit 2 without a traceback: shoal's ``ShoalInputError`` (``shoal: error:
  MESSAGE -> FIX``) or an argparse error (an option that does not exist yet), its line kept;
- ``refused in a worker``: a ``ShoalInputError`` raised inside a rank, which torchrun reports
  with a traceback and exit 1 (a refusal made late);
- ``failed``: any other exit (a crash), with its last line; ``timeout``: killed at
  ``--timeout``.

A cell whose input could not be made (the split, the partition or the store) carries that
command's outcome. Then "N of M cells train".

**The cap.** ``--cap-engines`` (minibatch and averaging, the typed engines) on a typed store
whose features are several times the cap's share of them (eight times at ``fraction:8``):
``shoal data synth igbh --size tiny --scale 0.5 --features 512 --train-frac 0.1 --val-frac
0.02`` (279,248 nodes, 0.57 GB of features, about 0.29 GB per rank with the halo: minutes per
run), LDG in 2 parts with halo features; ``--model rgcn --fanouts 5,5 --batch-size 256
--epochs 3``. The cap also holds the footprint (the memory plan's reserve, about 0.9 GiB per
rank), so at this size a rank's features are below the whole cap; features several times the
whole cap take several GB per rank (e.g. ``--cap-scale 2 --cap-features 2048``, 8.5 GB:
beyond this script's 20 minutes). Per engine, back to back: the 2 ranks
uncapped, then each rank in its own cgroup-v1 memory group capped at ``--cap`` (the process
and its page cache; the store's pages dropped before each run; ranks started with torchrun's
environment, ``common.run_capped_each``). A ``fraction:K`` cap is a K-th of rank 0's feature
rows (core and halo) plus the footprint the uncapped run's memory plan measured
(``common.cap_bytes``): the run's memory plan, whose default takes 90% of the cgroup's limit,
so the cgroup is that over 0.9 (the tenth the plan leaves to the kernel and page cache); without a memory plan in the uncapped run's JSON it cannot be sized and
the capped run is recorded as not run. Each row: median epoch seconds (the first epoch left
out) and evaluation seconds with their ratio to the uncapped run's, bytes read per epoch
against the distinct rows' bytes the epoch needed (each epoch's ``io`` record), test accuracy.

``--cells``: only the cells named (``RUNNER:TASK:GRAPH`` patterns), to rerun a few.
``--smoke``: Cora and the typed graph at ``--typed-features 8``, 1 epoch, two cells (node
task: one process on Cora, minibatch on the typed store), and the cap part for minibatch
alone on that typed store at a 1.5 GiB cap (its capped run only); the results under WORK/smoke.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import socket
import time
from pathlib import Path
from typing import Any

import common
from common import (
    ROOT,
    SHOAL,
    WORK,
    attempt,
    bench_args,
    cap_bytes,
    dataset_graph,
    epoch_summary,
    header,
    load_json,
    median,
    new_results,
    out_prefix,
    outcome,
    run_capped_each,
    write_results,
)

ONE = "one process"
TASKS = ("node", "link")
GRAPH_KINDS = ("untyped", "typed")
GiB = 1 << 30
ENV = {"OMP_NUM_THREADS": "1"}
PREP_TIMEOUT = 1800  # a step that builds a graph or a store (the cap part's is the largest)


def runners() -> list[str]:
    """One process, then every registered engine (the registry's order)."""
    from shoal.engines.registry import engine_names

    return [ONE, *engine_names()]


# ----------------------------------------------------------------------------- inputs
class Prep:
    """The matrix's inputs, each made once (its command's outcome kept, in ``steps``)."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.dir = WORK / "matrix"
        self.steps: dict[str, dict] = {}

    def step(self, key: str, out: Path, cmd: list[Any]) -> Path | None:
        """``out`` when it exists or ``cmd`` made it; else None, the outcome in ``steps``
        (a step that failed is not tried again by the next cell)."""
        if self.steps.get(key, {}).get("status", "ok") != "ok":
            return None
        if (out / "meta.json").exists():
            self.steps.setdefault(key, {"command": shlex.join(map(str, cmd[2:])), "status": "ok"})
            return out
        print(f"[prepare] {shlex.join(map(str, cmd[2:]))}", flush=True)
        r = attempt(cmd, timeout=PREP_TIMEOUT, env=ENV, cwd=ROOT)
        o = _short(outcome(r["returncode"], r["stderr"], timed_out=r["timed_out"]))
        self.steps[key] = {"command": shlex.join(r["command"][2:]), **o}
        if o["status"] != "ok":
            print(f"[prepare] {o['status']}: {o['reason']}", flush=True)
            return None
        return out

    def graph(self, kind: str) -> Path | None:
        if kind == "untyped":
            g = dataset_graph("cora")
            self.steps.setdefault("untyped graph", {"command": "cora", "status": "ok"})
            return g
        a = self.a
        g = self.dir / f"igbh-{a.typed_scale}-{a.typed_features}f"
        synth = ["--size", "tiny", "--scale", a.typed_scale, "--features", a.typed_features]
        cmd = [*SHOAL, "data", "synth", "igbh", *synth, "--out", g, "--overwrite", "-q"]
        return self.step("typed graph", g, cmd)

    def split(self, kind: str) -> Path | None:
        g = self.graph(kind)
        if g is None:
            return None
        out = self.dir / f"{g.name}-link"
        rel = ["--target-relation", self.a.target_relation] if kind == "typed" else []
        cmd = [*SHOAL, "data", "split-edges", g, "--val", "0.05", "--test", "0.1", "--seed", "0"]
        return self.step(f"{kind} link split", out, [*cmd, *rel, "--out", out, "--overwrite"])

    def data(self, kind: str, task: str) -> Path | None:
        """The graph a one-process cell trains."""
        return self.graph(kind) if task == "node" else self.split(kind)

    def store(self, kind: str, task: str) -> Path | None:
        """The 2-part store the engines' cells train (named as ``common.partitioned_store``
        names it)."""
        g = self.data(kind, task)
        return None if g is None else self.store_of(g, f"{kind} {task}")

    def store_of(self, g: Path, key: str) -> Path | None:
        parts = self.dir / f"{g.name}-ldg2"
        store = parts.with_name(parts.name + "-store")
        cmd = [*SHOAL, "partition", g, "--algo", "ldg", "--parts", 2, "--out", parts]
        if self.step(f"{key} partition", parts, [*cmd, "--overwrite", "-q"]) is None:
            return None
        cmd = [*SHOAL, "store", "build", g, parts, "--out", store, "--halo-features"]
        return self.step(f"{key} store", store, [*cmd, "--overwrite", "-q"])

    def blocker(self, kind: str, task: str, runner: str) -> dict:
        """The failed step a cell's input depends on."""
        keys = [f"{kind} graph"] if kind == "typed" else []
        keys += [f"{kind} link split"] if task == "link" else []
        if runner != ONE:
            keys += [f"{kind} {task} partition", f"{kind} {task} store"]
        for k in keys:
            s = self.steps.get(k)
            if s is not None and s["status"] != "ok":
                return {
                    "status": s["status"],
                    "reason": f"`{s['command']}`: {s['reason']}",
                    "input": k,
                }
        return {"status": "failed", "reason": "its input is missing", "input": None}


def describe(g: Path) -> dict:
    meta = json.loads((g / "meta.json").read_text())
    d = {"path": common.rel(g), "nodes": meta.get("num_nodes"), "edges": meta.get("num_edges")}
    if meta.get("node_types"):
        d["node_types"] = len(meta["node_types"])
        d["relations"] = len(meta.get("edge_types") or [])
    d["feature_bytes"] = _feature_bytes(g, "features")
    return d


def _feature_bytes(d: Path, *names: str) -> int:
    """Bytes of ``d/<name>.npy`` (untyped) or ``d/<name>/*.npy`` (typed, one per node type)
    for each name."""
    files = [f for n in names for f in (d / f"{n}.npy", *sorted((d / n).glob("*.npy")))]
    return sum(f.stat().st_size for f in files if f.is_file())


# ----------------------------------------------------------------------------- cells
def flags(kind: str, task: str, epochs: int) -> list[str]:
    f = ["--model", "sage" if kind == "untyped" else "rgcn", "--fanouts", "10,5"]
    f += ["--hidden", "64", "--batch-size", "256", "--epochs", str(epochs)]
    f += ["--eval-every", str(epochs), "--threads", "1", "--no-progress", "--seed", "0"]
    return f + (["--task", "link"] if task == "link" else [])


def _short(o: dict) -> dict:
    """An :func:`common.outcome` with ``error: `` dropped and paths under the checkout or
    WORK shortened."""
    why = o["reason"].removeprefix("error: ")
    why = why.replace(str(WORK) + "/", "WORK/").replace(str(ROOT) + "/", "")
    return {**o, "reason": why}


def cell(prep: Prep, runner: str, task: str, kind: str, a: argparse.Namespace) -> dict:
    row: dict[str, Any] = {"runner": runner, "task": task, "graph": kind}
    where = prep.data(kind, task) if runner == ONE else prep.store(kind, task)
    if where is None:
        return {**row, **prep.blocker(kind, task, runner)}
    name = f"{'one' if runner == ONE else runner}-{task}-{kind}"
    out = WORK / "matrix" / "runs" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    if runner == ONE:
        how = ["--graph", where]
    else:
        how = ["--store", where, "--engine", runner, "--nproc", "2"]
    cmd = [*SHOAL, "train", *how, *flags(kind, task, a.epochs), "--json", out]
    r = attempt(cmd, timeout=a.timeout, env=ENV, cwd=ROOT)
    out.with_suffix(".log").write_text(r["stdout"] + "\n--- stderr ---\n" + r["stderr"])
    o = _short(outcome(r["returncode"], r["stderr"], timed_out=r["timed_out"]))
    row.update(
        command="shoal " + shlex.join(r["command"][3:]).replace(str(ROOT) + "/", ""),
        returncode=r["returncode"],
        wall_seconds=round(r["seconds"], 2),
        **o,
    )
    if o["status"] == "ok":
        if not out.exists():
            row.update(status="failed", reason="exit 0 without its --json file")
            return row
        run = json.loads(out.read_text())
        metric = run.get("metric", "accuracy")
        row.update(
            status="trained",
            metric=metric,
            test=run.get(f"test_{metric}", run.get("test_accuracy")),
            epochs=run.get("epochs"),
            seconds_per_epoch=run.get("seconds_per_epoch"),
            eval_seconds=run.get("eval_seconds"),
        )
    return row


def plan(a: argparse.Namespace) -> list[tuple[str, str, str]]:
    """The cells to run: every one, those ``--cells`` names, or the smoke run's two (both
    launch paths, both graphs)."""
    if a.smoke:
        return [(ONE, "node", "untyped"), ("minibatch", "node", "typed")]
    every = [(r, t, k) for r in runners() for t in TASKS for k in GRAPH_KINDS]
    if not a.cells:
        return every
    pats = [p.strip() for p in a.cells.split(",") if p.strip()]
    return [c for c in every if any(fnmatch.fnmatchcase(":".join(c), p) for p in pats)]


# ----------------------------------------------------------------------------- the cap
def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_features(store: Path, base: dict | None) -> int:
    """Rank 0's feature bytes (core and halo): its memory plan's, else its part's files."""
    plan_ = ((base or {}).get("config") or {}).get("memory_plan") or {}
    if plan_.get("features"):
        return int(plan_["features"])
    return _feature_bytes(store / "part_0", "features", "halo_features")


def cap_run(store: Path, engine: str, tag: str, limit: int | None, a: argparse.Namespace) -> dict:
    out = WORK / "matrix" / "cap" / f"{engine}-{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    # -vv: every epoch's line and the evaluations' budgets (DEBUG between epochs) in the
    # stderr, so that a run killed by its cgroup shows the phase it died in (issue 53)
    cmd = [*SHOAL, "-vv", "train", "--store", str(store), "--engine", engine, "--model", "rgcn"]
    cmd += ["--fanouts", "5,5", "--batch-size", "256", "--hidden", "64"]
    cmd += ["--epochs", str(a.cap_epochs), "--eval-every", str(a.cap_epochs), "--threads", "1"]
    cmd += ["--no-progress", "--seed", "0", "--json", str(out)]
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    env |= {"MASTER_PORT": str(_port()), **ENV}
    cmds = [(cmd, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    cap_s = "uncapped" if limit is None else f"{limit / GiB:.2f} GiB per rank"
    print(f"[cap] {engine} {cap_s}: {shlex.join(cmd[2:])}", flush=True)
    err = out.with_suffix(".stderr")
    with open(err, "w") as f:
        ranks = run_capped_each(
            cmds,
            limit,
            name=f"matrix_{os.getpid()}",
            evict_paths=[store],
            cwd=ROOT,
            timeout=a.cap_timeout,
            stderr=f,
            stdout=f,
        )
    rcs = [r["returncode"] for r in ranks]
    rc = next((c for c in rcs if c > 0), next((c for c in rcs if c != 0), 0))
    o = _short(outcome(rc, err.read_text(), timed_out=any(r["timed_out"] for r in ranks)))
    res: dict[str, Any] = {
        "engine": engine,
        "tag": tag,
        "cap": limit,
        "command": "shoal " + shlex.join(cmd[3:]).replace(str(ROOT) + "/", ""),
        "returncode": rc,
        "wall_seconds": round(max(r["seconds"] for r in ranks), 2),
        "cgroup": [r.get("cgroup") for r in ranks],
        **o,
    }
    if o["status"] == "ok" and out.exists():
        run = json.loads(out.read_text())
        res["train"] = run
        res["status"] = "trained"
    elif o["status"] == "ok":
        res.update(status="failed", reason="exit 0 without its --json file")
    print(f"[cap] {engine} {tag}: {res['status']} {res['reason']}".rstrip(), flush=True)
    return res


def cap_part(a: argparse.Namespace, prep: Prep, res: dict, save) -> None:
    cap: dict[str, Any] = {"spec": a.cap, "engines": a.cap_engines.split(","), "runs": []}
    res["cap"] = cap
    if a.smoke:  # the matrix's typed graph: no fraction of its features is a working set
        g = prep.graph("typed")
        store = None if g is None else prep.store_of(g, "cap")
    else:
        g = WORK / "matrix" / f"igbh-cap-{a.cap_scale}-{a.cap_features}f"
        synth = ["--size", "tiny", "--scale", a.cap_scale, "--features", a.cap_features]
        synth += ["--train-frac", "0.1", "--val-frac", "0.02"]
        cap["synth"] = "shoal data synth igbh " + " ".join(map(str, synth))
        cmd = [*SHOAL, "data", "synth", "igbh", *synth, "--out", g, "--overwrite", "-q"]
        g = prep.step("cap graph", g, cmd)
        store = None if g is None else prep.store_of(g, "cap")
    res["prepare"] = prep.steps
    if store is None:
        cap["not_run"] = "its store could not be made (see the inputs)"
        save()
        return
    cap["graph"] = describe(g)
    cap["store"] = common.rel(store)
    can_cap = os.geteuid() == 0 and common.CGROUP_BASE.is_dir()
    for engine in cap["engines"]:
        if a.smoke:  # the smoke's cap is a fixed size: no uncapped run sizes it (suite time)
            why = "smoke: the cap is a fixed size"
            base = {"engine": engine, "tag": "uncapped", "status": "not run", "reason": why}
        else:
            base = cap_run(store, engine, "uncapped", None, a)
        cap["runs"].append(base)
        save()
        feats = rank_features(store, base.get("train"))
        row = {"engine": engine, "tag": "capped", "rank_feature_bytes": feats}
        if not can_cap:
            why = f"capped runs need root and cgroup v1 at {common.CGROUP_BASE}"
            cap["runs"].append({**row, "status": "not run", "reason": why})
            continue
        try:
            limit = cap_bytes(a.cap, feats, base.get("train"))
            if a.cap.startswith("fraction:"):  # the plan's default: 90% of the cgroup's limit
                limit = int(limit / 0.9)
        except SystemExit as e:  # fraction:K without the uncapped run's memory plan
            why = f"{e}: the uncapped run's JSON has no config.memory_plan"
            if base["status"] != "trained":
                why = "the uncapped run did not train, so the cap cannot be sized"
            cap["runs"].append({**row, "status": "not run", "reason": why})
            save()
            continue
        cap["runs"].append({**cap_run(store, engine, "capped", limit, a), **row})
        save()


# ----------------------------------------------------------------------------- report
def _f(x: Any, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.3f}"


def _cell_text(c: dict) -> tuple[str, str, str, str, str]:
    if c["status"] == "trained":
        m = "MRR" if c.get("metric") == "mrr" else "acc"
        return (
            "trained",
            f"{m} {_f(c.get('test'), '.4f')}",
            _f(c.get("seconds_per_epoch")),
            _f(c.get("eval_seconds"), ".2f"),
            "",
        )
    return c["status"], "-", "-", "-", c.get("reason", "").replace("|", "\\|")


def _io(run: dict) -> tuple[float | None, float | None]:
    hist = run.get("history") or []
    keep = hist[1:] if len(hist) > 1 else hist
    ios = [h.get("io") for h in keep if h.get("io")]
    if not ios:
        return None, None
    return (
        median([i.get("bytes_read", 0) for i in ios]),
        median([i.get("unique_bytes", 0) for i in ios]),
    )


def _cap_rows(cap: dict) -> list[str]:
    base: dict[str, dict] = {}
    lines = []
    for r in cap["runs"]:
        run = r.get("train")
        cap_s = "none" if r["tag"] == "uncapped" else "-"
        if r.get("cap"):
            cap_s = f"{r['cap'] / GiB:.2f} GiB ({cap['spec']})"
            feats = r.get("rank_feature_bytes")
            if feats:
                cap_s += f"; features {feats / r['cap']:.1f}x it"
        if run is None:
            why = r.get("reason", "").replace("|", "\\|")
            lines.append(
                f"| {r['engine']} | {r['tag']} | {cap_s} | {r['status']}: {why} |" + " - |" * 7
            )
            continue
        ep = epoch_summary(run)["median_epoch_seconds"]
        ev = run.get("eval_seconds")
        if r["tag"] == "uncapped":
            base[r["engine"]] = {"epoch": ep, "eval": ev}
        b = base.get(r["engine"]) if r["tag"] != "uncapped" else None
        ratio_ep = f"{ep / b['epoch']:.2f}x" if b and b.get("epoch") else "-"
        ratio_ev = f"{ev / b['eval']:.2f}x" if b and b.get("eval") and ev is not None else "-"
        read, need = _io(run)
        lines.append(
            f"| {r['engine']} | {r['tag']} | {cap_s} | trained | {_f(ep, '.2f')} | {ratio_ep} "
            f"| {_f(ev, '.2f')} | {ratio_ev} | {_gb(read)} | {_gb(need)} "
            f"| {_f(run.get('test_accuracy'), '.4f')} |"
        )
    return lines


def _verdicts(cap: dict) -> list[str]:
    """Per engine: the capped run's epoch and evaluation against the uncapped run's (the
    issue's target: within 2x), or why there is no ratio."""
    out = []
    for engine in cap["engines"]:
        runs = {r["tag"]: r for r in cap["runs"] if r["engine"] == engine}
        b, c = runs.get("uncapped"), runs.get("capped")
        if not (b and c and b.get("train") and c.get("train")):
            miss = [t for t, r in (("uncapped", b), ("capped", c)) if not (r and r.get("train"))]
            out.append(f"- {engine}: no ratio ({' and '.join(miss)} run did not train).")
            continue
        ep = [epoch_summary(r["train"])["median_epoch_seconds"] for r in (b, c)]
        ev = [r["train"].get("eval_seconds") or float("nan") for r in (b, c)]
        re_, rv = ep[1] / ep[0], ev[1] / ev[0]
        ok = "within 2x" if re_ <= 2 and rv <= 2 else "NOT within 2x"
        out.append(
            f"- {engine}: capped epoch {re_:.2f}x, evaluation {rv:.2f}x the uncapped run's: {ok}."
        )
    return out


def render(res: dict) -> str:
    s = res["settings"]
    gr = res.get("graphs", {})

    def gline(kind: str) -> str:
        d = gr.get(kind)
        if not d:
            return f"{kind}: not made"
        t = ""
        if "relations" in d:
            t = f" in {d['node_types']} node types and {d['relations']} relations"
        return f"{kind}: `{d['source']}`, {d['nodes']:,} nodes, {d['edges']:,} stored edges{t}"

    lines = header(
        "What trains where: engines x task x graph (issue 53)",
        res,
        f"Graphs: {gline('untyped')}; {gline('typed')}. Link task: `shoal data split-edges G "
        f"--val 0.05 --test 0.1 --seed 0` (typed: `--target-relation {s['target_relation']}`). "
        "Stores: `shoal partition --algo ldg --parts 2`, `shoal store build --halo-features` "
        "of the graph or its split.",
        f"Each cell: `shoal train --graph G` (one process) or `--store S --engine E --nproc 2`, "
        f"`--model sage` (untyped) or `rgcn` (typed), `--fanouts 10,5 --hidden 64 --batch-size "
        f"256 --epochs {s['epochs']} --eval-every {s['epochs']} --threads 1 --seed 0` "
        f"(`--task link` for link), in its own subprocess killed after {s['timeout']} s. "
        "Metric: test accuracy (node) or test MRR against 100 negatives (link), at the best "
        "validation epoch. `refused`: exit 2 with shoal's `error:` line (a `ShoalInputError` "
        "or an unknown option); `refused in a worker`: a `ShoalInputError` raised in a rank "
        "(exit 1, traceback); `failed`: any other exit, with its last line.",
    )
    lines += [
        "| runner | task | graph | outcome | test metric | s/epoch | eval s | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in res.get("cells", []):
        st, m, sec, ev, why = _cell_text(c)
        lines.append(
            f"| {c['runner']} | {c['task']} | {c['graph']} | {st} | {m} | {sec} | {ev} | {why} |"
        )
    cells = res.get("cells", [])
    n_ok = sum(c["status"] == "trained" for c in cells)
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    rest = ", ".join(f"{n} {k}" for k, n in counts.items() if k != "trained")
    lines += ["", f"**{n_ok} of {s['cells']} cells train**" + (f" ({rest})." if rest else ".")]
    if len(cells) < s["cells"]:
        lines.append(f"(Only {len(cells)} of the {s['cells']} cells have run.)")
    cap = res.get("cap")
    if cap:
        lines += [
            "",
            f"## The typed engines at `--cap {cap['spec']}`",
            "",
        ]
        if cap.get("graph"):
            d = cap["graph"]
            src = cap.get("synth") or "the matrix's typed graph"
            lines += [
                f"Graph: `{src}`: {d['nodes']:,} nodes, {d['edges']:,} stored edges, features "
                f"{d['feature_bytes'] / 1e9:.2f} GB; store `{cap['store']}` (LDG, 2 parts, halo "
                f"features). `shoal train --store S --engine E --model rgcn --fanouts 5,5 "
                f"--batch-size 256 --hidden 64 --epochs {s['cap_epochs']} --eval-every "
                f"{s['cap_epochs']} --threads 1 --seed 0`, 2 ranks, uncapped then each rank in "
                "its own cgroup-v1 memory group (process and page cache; the store's pages "
                "dropped before each run). A `fraction:K` cap: a K-th of rank 0's feature rows "
                "(core and halo) plus the footprint of the uncapped run's memory plan. Epoch: "
                "median, the first left out; read and needed: bytes read from storage per "
                "epoch and the distinct rows' bytes the epoch gathered (each epoch's `io`).",
                "",
            ]
        if cap.get("not_run"):
            lines.append(f"Not run: {cap['not_run']}.")
        else:
            lines += [
                "| engine | run | cap per rank | outcome | epoch s | vs uncapped | eval s | "
                "vs uncapped | read GB/epoch | needed GB/epoch | test acc |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
                *_cap_rows(cap),
            ]
            lines += ["", *_verdicts(cap)]
            ratios = [
                r["rank_feature_bytes"] / r["cap"]
                for r in cap["runs"]
                if r.get("cap") and r.get("rank_feature_bytes")
            ]
            if ratios and min(ratios) < 2:
                lines += [
                    "",
                    f"Rank 0's features are only {min(ratios):.1f}x its cap here: the cap is "
                    "mostly the footprint (the memory plan's reserve), so it holds the "
                    "features to much less than a K-th only when they are several times that "
                    "footprint (`--cap-scale`, `--cap-features`: gigabytes per rank).",
                ]
    steps = res.get("prepare") or {}
    bad = {k: v for k, v in steps.items() if v["status"] != "ok"}
    if bad:
        lines += ["", "Inputs that could not be made:", ""]
        lines += [f"- {k}: `{v['command']}`: {v['status']}: {v['reason']}" for k, v in bad.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/matrix")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per cell (default 2)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per cell (default 300)")
    ap.add_argument(
        "--typed-scale",
        type=float,
        default=0.01,
        help="typed graph's IGBH-tiny scale (default 0.01: about 5,600 nodes)",
    )
    ap.add_argument("--typed-features", type=int, default=32, help="typed graph's features (32)")
    ap.add_argument(
        "--target-relation", default="cites", help="the typed link split's relation (default cites)"
    )
    ap.add_argument("--cap", default="fraction:8", help="per-rank cap (default fraction:8)")
    ap.add_argument(
        "--cap-scale", type=float, default=0.5, help="the cap part's IGBH-tiny scale (default 0.5)"
    )
    ap.add_argument(
        "--cap-features", type=int, default=512, help="the cap part's feature width (default 512)"
    )
    ap.add_argument("--cap-epochs", type=int, default=3, help="the cap part's epochs (3)")
    ap.add_argument(
        "--cap-engines",
        default="minibatch,averaging",
        help="engines of the cap part (default minibatch,averaging)",
    )
    ap.add_argument(
        "--cap-timeout",
        type=float,
        default=300,
        help="seconds per run of the cap part (default 300)",
    )
    ap.add_argument(
        "--cells",
        default=None,
        help="only these cells: comma-separated RUNNER:TASK:GRAPH patterns (fnmatch), e.g. "
        "'minibatch:link:*,one process:*:typed' (default every cell)",
    )
    ap.add_argument("--no-cap", action="store_true", help="the matrix only")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    prefix = out_prefix(a, "bench/results/matrix")
    if a.report_only:
        write_results(prefix, load_json(prefix.with_suffix(".json")), render)
        return 0
    if a.smoke:
        a.epochs, a.typed_features, a.cap, a.cap_epochs = 1, 8, "1536MiB", 1
        a.cap_engines = "minibatch"
    cells = plan(a)
    res = new_results("matrix.py", threads=1)
    res["settings"] = {
        "epochs": a.epochs,
        "timeout": a.timeout,
        "target_relation": a.target_relation,
        "cap_epochs": a.cap_epochs,
        "cells": len(cells),
        "runners": runners(),
    }
    res["cells"] = []
    prep = Prep(a)

    def save() -> None:
        res["prepare"] = prep.steps
        write_results(prefix, res, render)

    n_cap = 0 if a.no_cap else 2 * len(a.cap_engines.split(","))
    print(
        f"matrix: {len(cells)} cells ({len(res['settings']['runners'])} runners x "
        f"{len(TASKS)} tasks x {len(GRAPH_KINDS)} graphs{', smoke subset' if a.smoke else ''}), "
        f"each at most {a.timeout:.0f} s; then {n_cap} runs of the cap part",
        flush=True,
    )
    res["graphs"] = {}
    for kind in GRAPH_KINDS:
        g = prep.graph(kind)
        if g is not None:
            src = "Cora"
            if kind == "typed":
                src = f"shoal data synth igbh --size tiny --scale {a.typed_scale} "
                src += f"--features {a.typed_features}"
            res["graphs"][kind] = {"source": src, **describe(g)}
    for i, (runner, task, kind) in enumerate(cells, 1):
        t0 = time.perf_counter()
        c = cell(prep, runner, task, kind, a)
        res["cells"].append(c)
        save()
        what = f"{c.get('test', 0):.4f}" if c["status"] == "trained" else c.get("reason", "")
        print(
            f"[{i}/{len(cells)}] {runner} {task} {kind}: {c['status']} {what} "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    if not a.no_cap:
        cap_part(a, prep, res, save)
    save()
    print(prefix.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
