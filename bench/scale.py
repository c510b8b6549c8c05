"""The whole pipeline on a quarter of papers100M: every stage inside one memory group and uncapped.

    python bench/scale.py --graph quarter [--cap 4GiB] [--stages synth,partition,store,train,minibatch]
    python bench/scale.py --graph 10m
    python bench/scale.py --report-only

Graphs (``SCALES``): ``quarter``, a DC-SBM graph shaped as a quarter of ogbn-papers100M: 28M
nodes, 400M undirected edges (800M stored), 128 float16 features, 172 classes, papers100M's
split fractions (train 1.1%, val 0.11%, test 0.19%, the other nodes unlabelled); ``10m``, the
same shape at 10M nodes and 50M edges, for a quicker rerun. Stages, each run uncapped and then
inside one cgroup-v1 memory group of ``--cap`` bytes (default 4 GiB; the group covers the
processes and their page cache; the stage's inputs are dropped from the page cache before
each run), back to back:

- ``synth``: ``shoal data synth dcsbm ... --feature-dtype float16``;
- ``csr``: ``shoal data csr G`` (both views, by a bounded-memory external sort; the stages
  after it would otherwise build them on first use, in whichever run comes first);
- ``partition``: ``shoal partition G --algo ldg --parts 2`` (streaming, O(V) memory);
- ``store``: ``shoal store build G A`` (2 parts, their full in-neighbourhoods);
- ``train``: one process, ``shoal train --graph G --model sage --fanouts 10,5 --hidden 128
  --epochs 3 --eval-every 3``: exact evaluation of val and test after the third
  epoch (reused as the final evaluation when that epoch is the best);
- ``minibatch``: the same model on 2 ranks (``--store S --engine minibatch --nproc 2``), both
  ranks in the one group. Neither passes ``--threads``: one process takes every core, each
  rank its share (the runs before 2026-12-02 passed ``--threads 2`` to each rank, four
  threads on two cores).

A stage that writes data writes its uncapped run beside the capped one's output, records its
files (sizes, and the metadata without paths and times) and deletes it before the capped run,
then checks that the capped run wrote the same (the disk holds one copy of each output: the
quarter graph and its store are about 21 and 18 GB). Each row: wall time, the group's peak usage
(capped) or the largest max RSS of the stage's processes (uncapped), bytes read and written
(``wait4`` of the stage's processes), and for the training stages the median and mean epoch,
the evaluation time and the accuracies. The checks of issue 54 follow the tables: every
stage completes in the group at most 2x its uncapped time, the same accuracy, and an
evaluation at most one training epoch.

``--stages`` runs some stages and keeps the others' results (a long run can be resumed
across sessions; the data stays in ``bench/work/scale/<graph>``). ``--smoke``: a 3,000-node
graph of the same shape, 1 epoch, a 2 GiB cap.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import time
from pathlib import Path

from common import (
    ROOT,
    SHOAL,
    WORK,
    bench_args,
    caps_available,
    disk_limits,
    disk_line,
    header,
    load_json,
    out_prefix,
    parse_size,
    record_command,
    run_capped,
    synth_flags,
    write_results,
)

GiB = 1 << 30
#: papers100M's labelled fractions: 1.2M train, 125k val, 214k test of 111M nodes
SPLIT = {"train-frac": 0.011, "val-frac": 0.0011, "test-frac": 0.0019}
SCALES: dict[str, dict] = {
    "quarter": {"nodes": 28_000_000, "edges": 400_000_000, "features": 128, "classes": 172},
    "10m": {"nodes": 10_000_000, "edges": 50_000_000, "features": 128, "classes": 172},
    "smoke": {"nodes": 3000, "edges": 30000, "features": 16, "classes": 8},
}
STAGES = ("synth", "csr", "partition", "store", "train", "minibatch")
MODEL = ["--model", "sage", "--fanouts", "10,5", "--hidden", "128"]
#: the longest a stage's run may take (seconds)
TIMEOUT = 4 * 3600


def synth_spec(name: str) -> dict:
    """``shoal data synth dcsbm`` options of graph ``name``."""
    return {**SCALES[name], **SPLIT, "feature-dtype": "float16", "seed": 0}


def stage_command(stage: str, name: str, d: Path, out: Path, epochs: int) -> list[str]:
    """The command of ``stage`` on graph ``name`` under ``d``, writing to ``out``."""
    g, a, s = d / "graph", d / "ldg2", d / "store"
    if stage == "synth":
        flags = synth_flags(synth_spec(name))
        return [*SHOAL, "data", "synth", "dcsbm", *flags, "--out", str(out), "--overwrite", "-q"]
    if stage == "csr":
        return [*SHOAL, "data", "csr", str(g), "--kind", "both", "-q"]
    if stage == "partition":
        how = ["--algo", "ldg", "--parts", "2"]
        return [*SHOAL, "partition", str(g), *how, "--out", str(out), "--overwrite", "-q"]
    if stage == "store":
        return [*SHOAL, "store", "build", str(g), str(a), "--out", str(out), "--overwrite", "-q"]
    common = [*MODEL, "--epochs", str(epochs), "--eval-every", str(epochs), "--no-progress"]
    if stage == "train":
        return [*SHOAL, "train", "--graph", str(g), *common, "--json", str(out)]
    how = ["--store", str(s), "--engine", "minibatch", "--nproc", "2"]
    return [*SHOAL, "train", *how, *common, "--json", str(out)]


def _inputs(stage: str, d: Path) -> list[Path]:
    """What a stage reads (dropped from the page cache before each of its runs)."""
    return {
        "synth": [],
        "csr": [d / "graph"],
        "partition": [d / "graph"],
        "store": [d / "graph", d / "ldg2"],
        "train": [d / "graph"],
        "minibatch": [d / "store"],
    }[stage]


def _output(stage: str, d: Path) -> Path:
    return {
        "synth": d / "graph",
        "csr": d / "graph",
        "partition": d / "ldg2",
        "store": d / "store",
        "train": d / "train.json",
        "minibatch": d / "minibatch.json",
    }[stage]


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` (a directory) and its size (``meta.json``'s: None, it names
    the directory; :func:`_meta` compares its contents)."""
    return {
        str(p.relative_to(root)): None if p.name == "meta.json" else p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _meta(root: Path) -> dict:
    """``meta.json`` of a written directory without what names its place or its time."""
    p = root / "meta.json"
    if not p.exists():
        return {}

    varying = ("path", "time", "seconds", "created", "command", "rss")

    def strip(x, top=False):
        if isinstance(x, dict):
            return {
                k: strip(v)
                for k, v in x.items()
                # a store's own checksum covers its meta (command included)
                if not (top and k in ("name", "checksum")) and not any(w in k for w in varying)
            }
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip(json.loads(p.read_text()), top=True)


def _listing(root: Path) -> tuple[dict, dict]:
    """What :func:`same_output` compares of one written directory."""
    return _files(root), _meta(root)


def same_output(a: Path, b: Path) -> bool:
    """Whether two runs of a stage wrote the same files (names, sizes, metadata)."""
    return _listing(a) == _listing(b)


def run_stage(stage: str, name: str, d: Path, cap: int | None, epochs: int) -> dict:
    """One run of ``stage``, capped at ``cap`` bytes (None: uncapped); an uncapped run of a
    stage that writes data writes beside the capped one's output."""
    out = _output(stage, d)
    if cap is None and stage != "csr":  # beside the capped one's: graph.uncapped, …json
        out = out.with_name(out.stem + ".uncapped" + out.suffix)
    if stage != "csr" and out.is_dir():
        shutil.rmtree(out)
    elif stage != "csr":
        out.unlink(missing_ok=True)
    cmd = stage_command(stage, name, d, out, epochs)
    tag = "uncapped" if cap is None else f"capped {cap / GiB:.2f} GiB"
    print(f"[{stage} {tag}] {shlex.join(cmd[2:])}", flush=True)
    res = run_capped(
        cmd,
        cap,
        name=f"scale_{os.getpid()}",
        evict_paths=_inputs(stage, d),
        cwd=ROOT,
        timeout=TIMEOUT,
    )
    res.update(stage=stage, cap=cap, output=str(out))
    if res["returncode"] == 0 and out.suffix == ".json" and out.exists():
        res["train"] = json.loads(out.read_text())
    elif res["returncode"] == 0 and out.is_dir() and stage != "csr":
        res["output_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"[{stage} {tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


def _csr_files(g: Path) -> dict:
    """The CSR views' entries (bytes, checksum) in the graph's ``meta.json``."""
    files = json.loads((g / "meta.json").read_text()).get("files", {})
    return {k: v for k, v in files.items() if k.startswith("csr_")}


def _drop_csr(g: Path, meta: str) -> None:
    """Remove the CSR views of ``g`` and restore its ``meta.json`` text ``meta``."""
    for v in ("csr_in", "csr_out"):
        if (g / v).is_dir():
            shutil.rmtree(g / v)
    (g / "meta.json").write_text(meta)


def run_csr(d: Path, cap: int | None) -> dict:
    """The ``csr`` stage: it writes inside the graph directory, so the uncapped run's views
    are recorded (sizes and checksums) and removed before the capped run builds them again."""
    g = d / "graph"
    _drop_csr(g, (g / "meta.json").read_text())  # a rerun starts without views
    meta = (g / "meta.json").read_text()
    base = run_stage("csr", "", d, None, 0)
    first = _csr_files(g)
    _drop_csr(g, meta)
    capped = run_stage("csr", "", d, cap, 0)
    return {"uncapped": base, "capped": capped, "same_output": first == _csr_files(g)}


def run_pair(stage: str, name: str, d: Path, cap: int | None, epochs: int) -> dict:
    """The uncapped run, then the capped one (same inputs, back to back); for a stage that
    writes data, whether both wrote the same, then the uncapped copy deleted. The smoke run
    pairs ``synth`` and ``csr`` only, the other stages capped only (the suite's time)."""
    if stage == "csr":
        return run_csr(d, cap)
    if name == "smoke" and stage not in ("synth", "csr"):  # one pair of each kind is enough
        return {"uncapped": None, "capped": run_stage(stage, name, d, cap, epochs)}
    base = run_stage(stage, name, d, None, epochs)
    a = Path(base["output"])
    listing = None
    if a.is_dir():  # recorded, then removed: the disk holds one copy of the stage's output
        listing = _listing(a)
        shutil.rmtree(a)
    capped = run_stage(stage, name, d, cap, epochs)
    pair = {"uncapped": base, "capped": capped}
    b = Path(capped["output"])
    if listing is not None and b.is_dir():
        pair["same_output"] = listing == _listing(b)
    return pair


def graph_info(g: Path) -> dict:
    """Sizes of the graph directory ``g``."""
    meta = json.loads((g / "meta.json").read_text())
    feats = g / "features.npy"
    return {
        "nodes": meta["num_nodes"],
        "edges": meta["num_edges"],
        "features": meta["feature_dim"],
        "dtype": meta.get("feature_dtype") or "float32",
        "feature_bytes": feats.stat().st_size if feats.exists() else 0,
    }


# ----------------------------------------------------------------------------- report
def _epochs(t: dict) -> tuple[float, float]:
    """Median and mean epoch seconds (the mean with the reading done at the start)."""
    hist = t["history"]
    secs = [h["seconds"] for h in hist]
    start = sum((h.get("io") or {}).get("start_seconds") or 0.0 for h in hist)
    return statistics.median(secs), (sum(secs) + start) / len(secs)


def _peak(r: dict) -> float | None:
    cg = r.get("cgroup")
    if cg:
        return cg.get("max_usage") or (cg.get("peak_sampled") or {}).get("rss+cache")
    return r.get("maxrss_bytes")


def _row(stage: str, r: dict) -> str:
    tag = "uncapped" if not r["cap"] else f"in {r['cap'] / GiB:.2f} GiB"
    peak = _peak(r)
    cells = [
        stage,
        tag,
        f"{r['seconds']:.0f}" if r["returncode"] == 0 else f"failed (rc {r['returncode']})",
        f"{peak / GiB:.2f}" if peak else "-",
        f"{r.get('read_bytes', 0) / 1e9:.2f}",
        f"{r.get('write_bytes', 0) / 1e9:.2f}",
    ]
    t = r.get("train")
    if t:
        med, mean = _epochs(t)
        reads = [(h.get("io") or {}).get("bytes_read", 0) / 1e9 for h in t["history"]]
        csr = [(h.get("io") or {}).get("structure_bytes_read") or 0 for h in t["history"]]
        cells += [
            f"{med:.1f} / {mean:.1f}",
            f"{t['eval_seconds']:.1f}",
            f"{statistics.mean(reads):.2f} / {statistics.mean(csr) / 1e9:.2f}",
            f"{t['val_accuracy']:.4f}",
            f"{t['test_accuracy']:.4f}",
        ]
    else:
        cells += ["-"] * 5
    return "| " + " | ".join(cells) + " |"


TABLE = (
    "| stage | run | wall s | peak GiB | read GB | written GB | epoch s (median / mean) "
    "| evaluation s | features / CSR read GB per epoch | val acc | test acc |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def checks(s: dict) -> list[str]:
    """Issue 54's checks of one graph's stages."""
    out = []
    for stage in STAGES:
        p = s["stages"].get(stage)
        if not p:
            out.append(f"- {stage}: not run yet.")
            continue
        b, c = p["uncapped"], p["capped"]
        if b is None:
            out.append(f"- {stage}: capped only (rc {c['returncode']}).")
            continue
        if b["returncode"] or c["returncode"]:
            out.append(
                f"- {stage}: **failed** (uncapped rc {b['returncode']}, capped rc "
                f"{c['returncode']}, OOM kills {(c.get('cgroup') or {}).get('oom_kill')})."
            )
            continue
        ratio = c["seconds"] / b["seconds"] if b["seconds"] else float("nan")
        words = [f"capped / uncapped wall {ratio:.2f}x ({'<=' if ratio <= 2 else '>'} 2)"]
        if "same_output" in p:
            words.append("same output" if p["same_output"] else "**different output**")
        if b.get("train") and c.get("train"):
            tb, tc = b["train"], c["train"]
            same = tb["test_accuracy"] == tc["test_accuracy"]
            words.append("same accuracy" if same else "**different accuracy**")
            for tag, t in (("uncapped", tb), ("capped", tc)):
                med = _epochs(t)[0]
                words.append(
                    f"{tag} evaluation {t['eval_seconds'] / med:.2f}x the median epoch "
                    f"({'<=' if t['eval_seconds'] <= med else '>'} 1)"
                )
        out.append(f"- {stage}: " + "; ".join(words) + ".")
    return out


def section(name: str, s: dict) -> list[str]:
    gr = s["graph"]
    lines = [
        f"## {name}: {gr['nodes']:,} nodes, {gr['edges']:,} stored edges, {gr['features']} "
        f"{gr['dtype']} features = {gr['feature_bytes'] / 1e9:.2f} GB",
        "",
        f"Graph: `shoal data synth dcsbm {' '.join(synth_flags(synth_spec(name)))}`. Cap: "
        f"{s['cap'] / GiB:.2f} GiB for every stage (both ranks of `minibatch` in the one group).",
        "",
        disk_line(s["disk"]),
        "",
        TABLE,
    ]
    for stage in STAGES:
        p = s["stages"].get(stage)
        if p:
            lines += [_row(stage, r) for r in (p["uncapped"], p["capped"]) if r is not None]
    machines, cmds = s.get("machines", {}), s.get("commands", {})
    dated = [_dated(k, v, machines.get(k), cmds.get(k)) for k, v in s.get("dates", {}).items()]
    lines += ["", *dated, ""]
    return lines + checks(s) + [""]


def _dated(stage: str, date: str, machine: str | None, command: str | None = None) -> str:
    """A stage's date line, with the machine it ran on (stages rerun in later sessions may
    have run on another host than the header's: compare a stage's rows with each other) and
    the command that ran it (when recorded: stages run before 2026-12-04 name none)."""
    cpu = f" on {machine.split(',')[1].strip()}" if machine and "," in machine else ""
    by = f" by `{command}`" if command else ""
    return f"Stage {stage} run {date}{cpu}{by}."


def _commands(res: dict) -> list[str]:
    """Every command that wrote a stage now in ``res``, once each in order; for a graph's
    stages run before the stages named theirs (2026-12-04), the command that writes them."""
    cmds: list[str] = []
    for name, s in res.get("graphs", {}).items():
        known = s.get("commands", {})
        older = [k for k in s.get("dates", {}) if k not in known]
        if older:
            cmds.append(f"python bench/scale.py --graph {name} --stages {','.join(older)}")
        for c in known.values():
            if c not in cmds:
                cmds.append(c)
    return cmds


def render(res: dict) -> str:
    lines = header(
        "A quarter of papers100M in 4 GiB",
        {**res, "commands": _commands(res)},
        "Every stage of the pipeline runs uncapped and then inside one cgroup-v1 memory group "
        "(limit on the processes and their page cache), back to back, its inputs dropped from "
        "the page cache before each run. `peak GiB`: the group's peak usage (capped), the "
        "largest max RSS among the stage's processes (uncapped; page cache not counted). `read` "
        "/ `written`: the disk bytes of the stage's processes (wait4). Training: median epoch "
        "and mean epoch with the reading done at the start; the evaluation is the exact val + "
        "test pass after the last epoch (the final one when that epoch is the best); features / "
        "CSR read per epoch: the rows read from disk, and the neighbour lists when the "
        "structure is on disk. Each stage's uncapped and capped runs ran back to back on one "
        "machine; stages rerun later may have run on another (named beside their date).",
    )
    for name, s in res["graphs"].items():
        lines += section(name, s)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/scale")
    ap.add_argument("--graph", choices=[k for k in SCALES if k != "smoke"], default="10m")
    ap.add_argument("--cap", default="4GiB", help="the memory group's limit (default 4GiB)")
    ap.add_argument("--epochs", type=int, default=3, help="training epochs (default 3)")
    ap.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated stages to run (default all: {','.join(STAGES)}); the others' "
        "results are kept",
    )
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    prefix = out_prefix(a, "bench/results/scale")
    res = load_json(prefix.with_suffix(".json"), {"graphs": {}})
    if a.report_only:
        write_results(prefix, res, render)
        return
    name = "smoke" if a.smoke else a.graph
    epochs = 1 if a.smoke else a.epochs
    stages = [x for x in a.stages.split(",") if x]
    bad = [x for x in stages if x not in STAGES]
    if bad:
        raise SystemExit(f"unknown stage(s) {', '.join(bad)}; valid: {', '.join(STAGES)}")
    cap = parse_size("2GiB" if a.smoke else a.cap) if caps_available(a.smoke) else None
    record_command(res, name, "scale.py")
    d = (WORK / "smoke" / "scale" if a.smoke else WORK / "scale") / name
    d.mkdir(parents=True, exist_ok=True)
    s = res["graphs"].setdefault(name, {"stages": {}, "dates": {}})
    s.update(command=res["commands"][name], machine=res["machine"], cap=cap or 0)
    s["disk"] = disk_limits()
    for stage in STAGES:
        if stage not in stages:
            continue
        s["dates"][stage] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        s.setdefault("commands", {})[stage] = res["commands"][name]
        s.setdefault("machines", {})[stage] = res["machine"]
        s["stages"][stage] = run_pair(stage, name, d, cap, epochs)
        if (d / "graph" / "meta.json").exists():
            s["graph"] = graph_info(d / "graph")
        write_results(prefix, res, render)  # after every stage: a long run keeps its parts
    print(prefix.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
