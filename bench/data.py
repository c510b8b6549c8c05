"""Data stage: R-MAT generation, CSR views under a memory cap, DC-SBM GNN against an MLP.

Every step is one subprocess, its peak resident set the child's ``ru_maxrss`` (``os.wait4``):

- ``baseline``: ``python -m shoal data --help``, the fixed cost of every data command;
- ``rmat``: ``python -m shoal data synth rmat --nodes N --edges E``; ``rmat_full_cli``: the same
  through the ``shoal`` command (whose parser imports every stage's module);
- ``info``: ``shoal data info`` on that graph (degrees, power-law indicators);
- ``csr_in`` / ``csr_out``: ``python -m shoal data csr --kind in|out --memory M``;
- ``csr_check``: the CSR views compared with an in-memory ``np.lexsort`` of the edges;
- ``dcsbm_synth``, ``dcsbm_gnn_vs_mlp``: ``shoal data synth dcsbm``, then a full-graph 2-layer
  PyG ``GCNConv`` network against a 2-layer MLP (same width, optimiser and epochs; test
  accuracy at the best validation accuracy).

Usage::

    python bench/data.py [--nodes 1000000 --edges 20000000 --memory 256MB]
                         [--sbm-nodes 100000 --sbm-edges 1000000 --epochs 100 --threads 2]
    python bench/data.py --report-only     # re-render the .md from the .json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import common
from common import PY, ROOT, SHOAL, WORK, header

DATA = [*SHOAL, "data"]

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

CSR_CHECK = (
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


def run_child(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` (from the checkout) and read its own rusage with ``os.wait4``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT
    )
    out = p.stdout.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc:
        raise SystemExit(f"{' '.join(cmd)} failed ({rc}):\n{out[-3000:]}")
    return {
        "cmd": " ".join("python" if c == PY else common.rel(c) for c in cmd),
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
        "output": out[-3000:],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = WORK / ("smoke/data" if args.smoke else "data")
    work.mkdir(parents=True, exist_ok=True)
    rmat = work / f"rmat_{args.nodes}_{args.edges}"
    sbm = work / f"dcsbm_{args.sbm_nodes}_{args.sbm_edges}"
    keys = ("nodes", "edges", "memory", "sbm_nodes", "sbm_edges", "epochs", "threads")
    params = {k: getattr(args, k) for k in keys}
    res = common.new_results("data.py", threads=args.threads, params=params, steps={})

    def step(name: str, cmd: list[str]) -> dict[str, Any]:
        r = res["steps"][name] = {**run_child(cmd), "load_avg_end": os.getloadavg()}
        print(f"[{name}] wall {r['wall_s']} s, peak RSS {r['peak_rss_mib']} MiB", flush=True)
        return r

    size = ["--nodes", str(args.nodes), "--edges", str(args.edges)]
    step("baseline", [*DATA, "--help"])
    for d in (rmat, work / "rmat_full_cli", sbm):
        shutil.rmtree(d, ignore_errors=True)
    step("rmat", [*DATA, "synth", "rmat", *size, "--out", str(rmat)])
    shoal_script = str(Path(PY).with_name("shoal"))
    step("rmat_full_cli", [shoal_script, "data", "synth", "rmat", *size, "--out", str(work / "x")])
    shutil.rmtree(work / "x")
    step("info", [*DATA, "info", str(rmat), "--json", str(work / "rmat_info.json")])
    res["rmat_info"] = json.loads((work / "rmat_info.json").read_text())
    for kind in ("in", "out"):
        step(f"csr_{kind}", [*DATA, "csr", str(rmat), "--kind", kind, "--memory", args.memory])
    step("csr_check", [PY, "-c", CSR_CHECK, str(rmat)])
    sbm_size = ["--nodes", str(args.sbm_nodes), "--edges", str(args.sbm_edges)]
    js = work / "dcsbm.json"
    step("dcsbm_synth", [*DATA, "synth", "dcsbm", *sbm_size, "--out", str(sbm), "--json", str(js)])
    res["dcsbm"] = json.loads(js.read_text())
    r = step(
        "dcsbm_gnn_vs_mlp", [PY, "-c", GNN_SCRIPT, str(sbm), str(args.epochs), str(args.threads)]
    )
    res["gnn_vs_mlp"] = json.loads(r["output"].strip().splitlines()[-1])
    return res


def _cap_mib(text: str) -> float:
    from shoal.utils.io import parse_size

    return round(parse_size(text) / 2**20, 1)


def report(res: dict[str, Any]) -> str:
    """The markdown of a results dict, every figure from it."""
    s, p = res["steps"], res["params"]
    mib = {k: r["peak_rss_mib"] for k, r in s.items()}
    paras = ["Every step is one subprocess; peak RSS is its `ru_maxrss` from `os.wait4`."]
    if res.get("commit"):  # numbers of an earlier version of this script
        paras.append(
            f"Measured by `bench/data.py` as of commit {res['commit']} (the commands above are "
            "that version's); rendered from the JSON by `python bench/data.py --report-only`."
        )
    lines = header("Data stage benchmark", res, *paras)
    lines += ["| step | command | wall s | CPU s | peak RSS MiB |", "|---|---|---|---|---|"]
    for k, r in s.items():
        cmd = r["cmd"].replace(str(ROOT) + "/", "")
        if cmd.startswith("python -c "):  # an inline script: named, not printed
            nargs = 3 if k.startswith("dcsbm") else 1
            cmd = f"python -c <{k} script of bench/data.py> " + " ".join(cmd.split()[-nargs:])
        lines.append(f"| {k} | `{cmd}` | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_mib']} |")
    lines += [
        "",
        f"- R-MAT {p['nodes']:,} nodes / {p['edges']:,} edges: {s['rmat']['wall_s']} s wall, "
        f"peak RSS {mib['rmat']} MiB; through the `shoal` command (every stage's command "
        f"module loaded) {mib['rmat_full_cli']} MiB; the lean `python -m shoal data` entry "
        f"alone: {mib['baseline']} MiB.",
    ]
    for k in ("csr_in", "csr_out"):
        cap, base = _cap_mib(p["memory"]), mib["baseline"]
        ind = (p["nodes"] + 1) * 8 / 2**20
        ok = "within" if mib[k] <= cap + base + ind else "OVER"
        lines.append(
            f"- {k}: {s[k]['wall_s']} s wall, peak RSS {mib[k]} MiB; bound = {p['memory']} "
            f"cap ({cap} MiB) + {base} MiB interpreter baseline + O(N) indptr ({ind:.0f} "
            f"MiB) = {cap + base + ind:.0f} MiB -> {ok}."
        )
    ok = "CSR_EQUAL True" in s["csr_check"]["output"]
    lines.append(f"- CSR views equal an in-memory `np.lexsort` of the edges: {ok}.")
    info = res["rmat_info"]
    d = info["degree"]
    pl = d["power_law"]
    lines.append(
        f"- `shoal data info` on the R-MAT graph: degree ({d['kind']}) min {d['min']}, "
        f"median {d['median']}, mean {d['mean']:.1f}, p99 {d['percentiles']['p99']}, max "
        f"{d['max']}; max/mean {pl['max_to_mean']:.0f}, CCDF log-log slope "
        f"{pl['ccdf_loglog_slope']:.2f}, alpha (MLE, d >= {pl['d_min']}) "
        f"{pl['alpha_mle']:.2f} -> power_law_like = {pl['power_law_like']}; "
        f"self-loops {info['self_loops']:,}, isolated nodes {info['isolated_nodes']:,}."
    )
    g, sb = res["gnn_vs_mlp"], res.get("dcsbm")
    what = f"{p['sbm_nodes']:,} nodes / {p['sbm_edges']:,} undirected edges"
    if sb:
        sp = sb["splits"]
        what += (
            f" ({sb['num_edges']:,} stored), {sb['num_classes']} classes, "
            f"{sb['feature_dim']} features, {sp['train']:,} / {sp['val']:,} / {sp['test']:,} "
            "train / val / test nodes"
        )
    lines += [
        "",
        f"## DC-SBM {what}",
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
        f"GCN - MLP = {100 * (g['gcn']['test'] - g['mlp']['test']):.1f} points.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000)
    ap.add_argument("--memory", default="256MB", help="CSR memory cap (default 256MB)")
    ap.add_argument("--sbm-nodes", type=int, default=100_000)
    ap.add_argument("--sbm-edges", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    common.bench_args(ap, out="bench/results/data")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.edges, args.sbm_nodes, args.sbm_edges = 2000, 16000, 2000, 16000
        args.epochs, args.threads = 2, 1
    prefix = common.out_prefix(args, "bench/results/data")
    if args.report_only:  # the JSON stays as it is
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), report(res))
    else:
        common.write_results(prefix, measure(args), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
