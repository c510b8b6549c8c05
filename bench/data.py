"""Data-stage benchmark: R-MAT generation, CSR views under a memory cap, DC-SBM GNN vs MLP.

Every step runs in its own subprocess; its peak resident set is the child's ``ru_maxrss``
read with ``os.wait4`` (the kernel's own high-water mark of that process, not a sample).
Steps:

1. ``baseline``: ``python -m shoal data --help`` (interpreter + numpy + shoal.data imports):
   the fixed overhead every data command pays.
2. ``rmat``: ``python -m shoal data synth rmat --nodes 1000000 --edges 20000000`` (the lean
   entry point, only the data commands loaded) and ``rmat_full_cli``: the same through the
   ``shoal`` command (which also imports the other stages' modules).
3. ``info``: ``shoal data info`` on that graph (degree statistics, power-law indicators).
4. ``csr_in`` / ``csr_out``: ``python -m shoal data csr DIR --kind in|out --memory 256MB``.
5. ``csr_check``: the CSR views of the 1M/20M graph compared with an in-memory
   ``np.lexsort`` of its edges (this step itself needs the whole edge list in memory).
6. ``dcsbm``: ``shoal data synth dcsbm --nodes 100000 --edges 1000000`` and a full-graph
   2-layer PyG ``GCNConv`` network against a 2-layer MLP on it (same width, optimiser,
   epochs; test accuracy at the best validation accuracy).

Results: ``bench/results/data.json`` and ``bench/results/data.md`` (with the commands and the
machine). Usage::

    python bench/data.py                 # everything (~10-20 min on 2 busy cores)
    python bench/data.py --steps dcsbm   # one step (plus what it needs)
    python bench/data.py --nodes 100000 --edges 2000000   # a smaller R-MAT
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
from typing import Any

from common import (
    PY,
    RESULTS,
    SHOAL,
    WORK,
    load_json,
    machine,
    machine_line,
    write_json,
    write_text_atomic,
)
from common import ROOT as REPO

DATA = [*SHOAL, "data"]
SHOAL_SCRIPT = [str(Path(PY).with_name("shoal"))]
STEPS = ("baseline", "rmat", "rmat_full_cli", "info", "csr_in", "csr_out", "csr_check", "dcsbm")

GNN_SCRIPT = r"""
import json, sys, time
import numpy as np, torch
from torch_geometric.nn import GCNConv
from shoal.data.format import GraphDir
torch.set_num_threads(int(sys.argv[3]))
g = GraphDir.open(sys.argv[1])
epochs = int(sys.argv[2])
ei = torch.from_numpy(np.asarray(g.edge_stream().memmap()).T.astype(np.int64))
x = torch.from_numpy(np.array(g.features()))
y = torch.from_numpy(np.array(g.labels()))
tr, va, te = (torch.from_numpy(g.mask(s)) for s in ("train", "val", "test"))
res = {}
for kind in ("mlp", "gcn"):
    torch.manual_seed(0)
    F, H, C = x.shape[1], 64, g.num_classes
    if kind == "gcn":
        l1, l2 = GCNConv(F, H, cached=True), GCNConv(H, C, cached=True)
        fwd = lambda t: l2(torch.dropout(torch.relu(l1(x, ei)), 0.5, t), ei)
    else:
        l1, l2 = torch.nn.Linear(F, H), torch.nn.Linear(H, C)
        fwd = lambda t: l2(torch.dropout(torch.relu(l1(x)), 0.5, t))
    opt = torch.optim.Adam([*l1.parameters(), *l2.parameters()], lr=0.01, weight_decay=5e-4)
    best, t0 = (-1.0, 0.0, 0.0), time.perf_counter()
    for ep in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(fwd(True)[tr], y[tr]).backward()
        opt.step()
        if ep % 10 == 9 or ep == epochs - 1:
            with torch.no_grad():
                p = fwd(False).argmax(1)
            acc = [float((p[m] == y[m]).float().mean()) for m in (tr, va, te)]
            if acc[1] > best[0]:
                best = (acc[1], acc[2], acc[0])
    res[kind] = {"val": best[0], "test": best[1], "train": best[2],
                 "seconds": time.perf_counter() - t0}
print(json.dumps(res))
"""


def run_child(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` and read its own rusage with ``os.wait4``."""
    t0 = time.perf_counter()
    with open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(
            cmd,
            stdin=devnull,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        chunks = []
        assert p.stdout is not None
        for line in iter(p.stdout.readline, b""):
            chunks.append(line)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    out = b"".join(chunks).decode(errors="replace")
    return {
        "cmd": " ".join(cmd).replace(PY, "python"),
        "rc": p.returncode,
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
        "output": out[-3000:],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", default=str(WORK / "data"))
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000)
    ap.add_argument("--memory", default="256MB", help="CSR memory cap (default 256MB)")
    ap.add_argument("--sbm-nodes", type=int, default=100_000)
    ap.add_argument("--sbm-edges", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    ap.add_argument("--out", default=str(RESULTS / "data"), help="results prefix")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args(argv)
    if args.report_only:
        res = load_json(args.out + ".json")
        write_text_atomic(args.out + ".md", report(res))
        return 0

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rmat = work / f"rmat_{args.nodes}_{args.edges}"
    sbm = work / f"dcsbm_{args.sbm_nodes}_{args.sbm_edges}"
    out_json = Path(args.out + ".json")
    res: dict[str, Any] = load_json(out_json)
    res.setdefault("steps", {})
    res["machine"] = machine()
    res["params"] = vars(args)

    def step(name: str, cmd: list[str]) -> dict[str, Any]:
        print(f"[{name}] {' '.join(cmd)}", flush=True)
        r = run_child(cmd)
        r["load_avg_end"] = os.getloadavg()
        print(
            f"[{name}] rc={r['rc']} wall {r['wall_s']}s cpu {r['cpu_s']}s "
            f"peak RSS {r['peak_rss_mib']} MiB",
            flush=True,
        )
        if r["rc"] != 0:
            print(r["output"], file=sys.stderr)
        res["steps"][name] = r
        write_json(out_json, res, indent=2)
        return r

    size = ["--nodes", str(args.nodes), "--edges", str(args.edges)]
    if "baseline" in args.steps:
        step("baseline", [*DATA, "--help"])
    if "rmat" in args.steps or (not rmat.exists() and set(args.steps) & {"info", "csr_in"}):
        shutil.rmtree(rmat, ignore_errors=True)
        step("rmat", [*DATA, "synth", "rmat", *size, "--out", str(rmat)])
    if "rmat_full_cli" in args.steps:
        tmp = work / "rmat_full_cli"
        shutil.rmtree(tmp, ignore_errors=True)
        step("rmat_full_cli", [*SHOAL_SCRIPT, "data", "synth", "rmat", *size, "--out", str(tmp)])
        shutil.rmtree(tmp, ignore_errors=True)
    if "info" in args.steps:
        step("info", [*DATA, "info", str(rmat), "--json", str(work / "rmat_info.json")])
        res["rmat_info"] = json.loads((work / "rmat_info.json").read_text())
    for kind in ("in", "out"):
        if f"csr_{kind}" in args.steps:
            step(f"csr_{kind}", [*DATA, "csr", str(rmat), "--kind", kind, "--memory", args.memory])
    if "csr_check" in args.steps:
        check = (
            "import sys, numpy as np; from shoal.data.format import GraphDir;"
            "g = GraphDir.open(sys.argv[1]); e = np.fromfile(g.path / 'edges.bin', "
            "dtype=g.edge_dtype).reshape(-1, 2); ok = True\n"
            "for kind, (p, s) in {'in': (1, 0), 'out': (0, 1)}.items():\n"
            "    c = g.csr(kind, build=False); o = np.lexsort((e[:, s], e[:, p]))\n"
            "    ok &= bool(np.array_equal(np.asarray(c.indices), e[o, s]))\n"
            "    ok &= bool(np.array_equal(np.asarray(c.indptr), np.r_[0, np.cumsum("
            "np.bincount(e[:, p], minlength=g.num_nodes))]))\n"
            "print('CSR_EQUAL', ok); sys.exit(0 if ok else 1)"
        )
        step("csr_check", [PY, "-c", check, str(rmat)])
    if "dcsbm" in args.steps:
        shutil.rmtree(sbm, ignore_errors=True)
        step(
            "dcsbm_synth",
            [
                *DATA,
                "synth",
                "dcsbm",
                "--nodes",
                str(args.sbm_nodes),
                "--edges",
                str(args.sbm_edges),
                "--out",
                str(sbm),
            ],
        )
        r = step(
            "dcsbm_gnn_vs_mlp",
            [PY, "-c", GNN_SCRIPT, str(sbm), str(args.epochs), str(args.threads)],
        )
        if r["rc"] == 0:
            res["gnn_vs_mlp"] = json.loads(r["output"].strip().splitlines()[-1])
    res["machine"]["load_avg_end"] = os.getloadavg()
    write_json(out_json, res, indent=2)
    write_text_atomic(args.out + ".md", report(res))
    print(f"wrote {out_json} and {args.out}.md")
    return 0


def report(res: dict[str, Any]) -> str:
    """The markdown summary of a results dict (rewritten from the JSON)."""
    s, m, p = res["steps"], res["machine"], res["params"]
    mib = lambda k: s[k]["peak_rss_mib"] if k in s else None  # noqa: E731
    lines = [
        "# Data stage benchmark",
        "",
        f"Machine: {machine_line(m)} (wall times are noisy, CPU times less so).",
        "",
        "Command: `python bench/data.py` "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in p.items()
            if k in ("nodes", "edges", "memory", "sbm_nodes", "sbm_edges", "epochs")
        ),
        "",
        "Every step is one subprocess; peak RSS is its `ru_maxrss` from `os.wait4`.",
        "",
        "| step | command | wall s | CPU s | peak RSS MiB |",
        "|---|---|---|---|---|",
    ]
    for k, r in s.items():
        cmd = r["cmd"].replace(str(REPO) + "/", "")
        if cmd.startswith("python -c "):  # inline script: name it instead of printing it
            nargs = 3 if k.startswith("dcsbm") else 1
            cmd = f"python -c <{k} script of bench/data.py> " + " ".join(cmd.split()[-nargs:])
        lines.append(f"| {k} | `{cmd}` | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_mib']} |")
    lines.append("")
    if "rmat" in s:
        lines.append(
            f"- R-MAT {p['nodes']:,} nodes / {p['edges']:,} edges: {s['rmat']['wall_s']} s wall, "
            f"peak RSS {mib('rmat')} MiB (target: a few minutes, < 400 MB = 381 MiB)."
        )
    if "rmat_full_cli" in s:
        lines.append(
            f"- The same through the `shoal` command (all stages' command modules loaded): peak "
            f"RSS {mib('rmat_full_cli')} MiB (baseline of the lean `python -m shoal data` "
            f"entry: {mib('baseline')} MiB)."
        )
    for k in ("csr_in", "csr_out"):
        if k in s:
            cap, base = _cap_mib(p["memory"]), mib("baseline") or 0.0
            ind = (p["nodes"] + 1) * 8 / 2**20
            ok = "within" if mib(k) <= cap + base + ind else "OVER"
            lines.append(
                f"- {k}: {s[k]['wall_s']} s wall, peak RSS {mib(k)} MiB; bound = {p['memory']} "
                f"cap ({cap} MiB) + {base} MiB interpreter baseline + O(N) indptr ({ind:.0f} "
                f"MiB) = {cap + base + ind:.0f} MiB -> {ok}."
            )
    if "csr_in" in s:
        lines.append(
            "  (Before the merge phase of `extsort.py` sorted the merged slice in place and fed "
            "the sink in 1 Mi-key pieces, the same runs peaked at 437 MiB.)"
        )
    if "csr_check" in s:
        ok = "CSR_EQUAL True" in s["csr_check"]["output"]
        lines.append(f"- CSR views equal an in-memory `np.lexsort` of the edges: {ok}.")
    info = res.get("rmat_info")
    if info:
        d = info["degree"]
        pl = d["power_law"]
        lines += [
            f"- `shoal data info` on the R-MAT graph: degree ({d['kind']}) min {d['min']}, "
            f"median {d['median']}, mean {d['mean']:.1f}, p99 {d['percentiles']['p99']}, max "
            f"{d['max']}; max/mean {pl['max_to_mean']:.0f}, CCDF log-log slope "
            f"{pl['ccdf_loglog_slope']:.2f}, alpha (MLE, d >= {pl['d_min']}) "
            f"{pl['alpha_mle']:.2f} -> power_law_like = {pl['power_law_like']}; "
            f"self-loops {info['self_loops']:,}, isolated nodes {info['isolated_nodes']:,}.",
        ]
    g = res.get("gnn_vs_mlp")
    if g:
        gap = 100 * (g["gcn"]["test"] - g["mlp"]["test"])
        lines += [
            "",
            f"## DC-SBM {p['sbm_nodes']:,} nodes / {p['sbm_edges']:,} undirected edges "
            "(generator defaults: 10 classes, 64 features, homophily 0.5, feature signal 1.5, "
            "degree exponent 2.5, splits 10/10/80 %)",
            "",
            f"Full-graph training, hidden 64, dropout 0.5, Adam lr 0.01, weight decay 5e-4, "
            f"{p['epochs']} epochs, test accuracy at the best validation accuracy (checked every "
            "10 epochs), seed 0:",
            "",
            "| model | train | val | test |",
            "|---|---|---|---|",
            *(
                f"| {k.upper()} | {v['train']:.3f} | {v['val']:.3f} | {v['test']:.3f} |"
                for k, v in g.items()
            ),
            "",
            f"GCN - MLP = {gap:.1f} points (target >= 10).",
        ]
    return "\n".join(lines) + "\n"


def _cap_mib(text: str) -> float:
    sys.path.insert(0, str(REPO / "src"))
    from shoal.utils.io import parse_size

    return round(parse_size(text) / 2**20, 1)


if __name__ == "__main__":
    raise SystemExit(main())
