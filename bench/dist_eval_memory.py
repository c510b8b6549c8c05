"""Peak memory of ONE exact distributed evaluation, before and after the bounded rewrite.

The engines' exact evaluation used to hold each part's layer inputs (core rows plus every halo
row, pulled in one exchange per layer) in RAM; it now runs layer by layer in bounded batches
and pulls halo rows per batch (``shoal.distributed.dist_evaluate``). This script measures one
evaluation of each version on the issue's setting:

- graph: ``shoal data synth dcsbm --nodes 2000000 --edges 10000000 --features 128`` (other
  options at their defaults: 10 classes, train/val/test 0.1/0.1/0.8);
- ``shoal partition --algo spring --parts 4`` and ``shoal store build`` (no halo features);
- 2 ranks (``torch.distributed.run --standalone --nproc-per-node 2``), each holding 2 parts,
  the ``minibatch`` engine's model: GraphSAGE, 2 layers, hidden 128, random initial weights
  (seed 0; the "after" weights are saved to a file and loaded into "before", so both versions
  evaluate the very same weights);
- "before": commit a8fe23e (``shoal.engines.base.dist_evaluate``); "after": the checkout's
  HEAD commit when ``run`` starts (``--after-ref``). Each version is imported from its own git
  worktree under bench/work/dist_eval/ with ``PYTHONPATH=<worktree>/src``, so edits made to
  the checkout while the benchmark runs (other people's work in progress) cannot leak into a
  run. ``--extra-ref REF`` adds uncapped rows for other commits (e.g. an intermediate one).
  Every version first evaluates a small store once (unmeasured) so numba's kernel cache is
  warm and no JIT compilation falls inside a measured evaluation.

Per rank, just before the evaluation: RSS (RssAnon, RssFile, RssShmem from /proc/self/status),
then ``echo 5 > /proc/self/clear_refs`` (resets VmHWM) and a thread that samples RssAnon and
RssFile every 20 ms; after it: VmHWM, the sampled peaks, the increase of VmHWM over the RSS
before, seconds and accuracy.

Finally "after" and "before" run again inside a cgroup-v1 memory cgroup capped at launcher
RSS + 2 x (a rank's RSS before the evaluation + k x one part's features), k = 1 and 2
(``--cap-parts``), to see whether they complete (OOM kills are read from memory.oom_control; a
run still going after ``--cap-timeout`` seconds is stopped and its progress reported). The
cgroup is created as a child of this process's own memory cgroup (so it stays inside whatever
limit already applies) and removed afterwards. Needs root and cgroup v1.

Usage::

    python bench/dist_eval_memory.py prepare   # graph, partition, store, worktree (skips what exists)
    python bench/dist_eval_memory.py run [--extra-ref REF ...]   # measure, write the results
    python bench/dist_eval_memory.py report    # rewrite the .md from the .json

Results: bench/results/dist_eval_memory.md and .json (written only by this script). Data and
the git worktrees live in bench/work/dist_eval/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import common
from common import RESULTS, ROOT, Cgroup, evict, machine_line, write_json, write_text_atomic

WORK = common.WORK / "dist_eval"
BEFORE_COMMIT = "a8fe23e"
NODES, EDGES, FEATURES = 2_000_000, 10_000_000, 128
PARTS, NPROC, HIDDEN = 4, 2, 128
ALGO = "spring"
SHOAL = [sys.executable, "-m", "shoal"]
MiB = 1 << 20


def paths(work: Path) -> dict[str, Path]:
    return {
        "graph": work / "g",
        "parts": work / f"parts-{ALGO}{PARTS}",
        "store": work / f"store-{ALGO}{PARTS}",
        "before": work / "before",
        "warm_graph": work / "warm-g",
        "warm_parts": work / "warm-parts",
        "warm_store": work / "warm-store",
        "tmp": work / "tmp",
        "runs": work / "runs",
        "state": work / "model_seed0.pt",
    }


# --------------------------------------------------------------------------------------------
# /proc helpers


def proc_status(pid: str | int = "self") -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of a process, in bytes."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


class Sampler(threading.Thread):
    """Max RssAnon / RssFile / RssShmem of ``pid`` every ``interval`` s, plus a timeline."""

    def __init__(self, pid: str | int = "self", interval: float = 0.02, progress=None):
        super().__init__(daemon=True)
        self.pid, self.interval, self.progress = pid, interval, progress
        self.last_progress = 0.0
        self.stop_ev = threading.Event()
        self.peak = {"RssAnon": 0, "RssFile": 0, "RssShmem": 0, "VmRSS": 0}
        self.timeline: list[tuple[float, int, int]] = []
        self.t0 = time.perf_counter()

    def run(self) -> None:
        while True:
            s = proc_status(self.pid)
            if s:
                for k in self.peak:
                    self.peak[k] = max(self.peak[k], s.get(k, 0))
                self.timeline.append(
                    (time.perf_counter() - self.t0, s.get("RssAnon", 0), s.get("RssFile", 0))
                )
            if self.progress is not None and time.perf_counter() - self.last_progress > 1.0:
                self.last_progress = time.perf_counter()
                self.progress(self)
            if self.stop_ev.wait(self.interval):
                break

    def stop(self) -> None:
        self.stop_ev.set()
        self.join()


def read_bytes() -> int:
    """Bytes this process has caused to be read from storage (/proc/self/io)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------------------------
# prepare


def sh(cmd: list[str], log: list[str], **kw) -> None:
    line = " ".join(shlex.quote(str(c)) for c in cmd)
    print("+", line, flush=True)
    t0 = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)
    log.append(f"{line}  # {time.perf_counter() - t0:.0f} s")


def resolve(ref: str) -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def worktree(work: Path, name: str, ref: str, log: list[str] | None = None) -> tuple[Path, str]:
    """A detached git worktree ``work/name`` at ``ref`` (created, or moved to ``ref``)."""
    path, commit = work / name, resolve(ref)
    log = [] if log is None else log
    if not (path / ".git").exists():
        sh(["git", "worktree", "add", "--detach", path, commit], log)
    else:
        head = subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        if head != commit:
            sh(["git", "-C", path, "checkout", "--detach", "--force", commit], log)
    return path, commit


def prepare(args) -> None:
    p = paths(args.work)
    args.work.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    # every shoal command writes to a temporary sibling and renames it into place, so an
    # existing directory is a complete one
    if not p["graph"].exists():
        sh(
            SHOAL
            + [
                "data",
                "synth",
                "dcsbm",
                "--nodes",
                NODES,
                "--edges",
                EDGES,
                "--features",
                FEATURES,
                "--out",
                p["graph"],
            ],
            log,
        )
    if not p["parts"].exists():
        sh(
            SHOAL
            + [
                "partition",
                p["graph"],
                "--algo",
                ALGO,
                "--parts",
                PARTS,
                "--out",
                p["parts"],
                "--json",
                args.work / f"partition-{ALGO}{PARTS}.json",
            ],
            log,
        )
    if not p["store"].exists():
        sh(
            SHOAL
            + [
                "store",
                "build",
                p["graph"],
                p["parts"],
                "--out",
                p["store"],
                "--json",
                args.work / "store-build.json",
            ],
            log,
        )
    # a small store for the unmeasured warm-up evaluations (numba kernel caches)
    if not p["warm_graph"].exists():
        sh(
            SHOAL
            + [
                "data",
                "synth",
                "dcsbm",
                "--nodes",
                20000,
                "--edges",
                100000,
                "--features",
                FEATURES,
                "--out",
                p["warm_graph"],
            ],
            log,
        )
    if not p["warm_parts"].exists():
        sh(
            SHOAL
            + [
                "partition",
                p["warm_graph"],
                "--algo",
                "hash",
                "--parts",
                PARTS,
                "--out",
                p["warm_parts"],
            ],
            log,
        )
    if not p["warm_store"].exists():
        sh(
            SHOAL + ["store", "build", p["warm_graph"], p["warm_parts"], "--out", p["warm_store"]],
            log,
        )
    worktree(args.work, "before", BEFORE_COMMIT, log)
    prev = args.work / "prepare_log.json"
    old = json.loads(prev.read_text()) if prev.exists() else []
    prev.write_text(json.dumps(old + log, indent=1))
    print("prepared:", {k: str(v) for k, v in p.items()})


# --------------------------------------------------------------------------------------------
# worker (one rank, under torch.distributed.run)


def worker(args) -> None:
    import gc
    import inspect

    import torch

    torch.set_num_threads(1)
    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # noqa: BLE001
        pass
    import importlib.util

    import shoal

    shoal_file = Path(shoal.__file__).resolve()
    if args.src.resolve() not in shoal_file.parents:
        raise SystemExit(f"{args.which}: imported shoal from {shoal_file}, expected {args.src}")
    old_api = importlib.util.find_spec("shoal.distributed") is None  # before the restructure
    marks: list[tuple[float, str]] = []
    pulls = [0]  # halo pulls (after: one per batch and layer; before: one per layer)
    if old_api:
        from shoal.dist import DistConfig, process_group
        from shoal.train import TrainConfig

        import shoal.engines.base as evalmod
        from shoal.engines import EngineConfig, get_engine
        from shoal.store import Store

        dist_evaluate = evalmod.dist_evaluate
        # phase marks: _out_dim runs once per layer just before the halo pull; _map_core_rows
        # once per part and layer (the node-wise projection of the core rows)
        _od, _mc = evalmod._out_dim, evalmod._map_core_rows

        def out_dim(*a, **k):
            marks.append((time.perf_counter(), "halo pull + aggregation of a layer"))
            return _od(*a, **k)

        def map_core(*a, **k):
            marks.append((time.perf_counter(), "projection of a part's core rows"))
            return _mc(*a, **k)

        evalmod._out_dim, evalmod._map_core_rows = out_dim, map_core
        fs_cls = evalmod.DistFeatureStore
    else:
        import shoal.distributed.evaluate as evalmod
        from shoal.distributed import DistConfig, dist_evaluate, process_group
        from shoal.engines import EngineConfig, get_engine
        from shoal.store import Store
        from shoal.training import TrainConfig

        _sl = evalmod.PullRows.set_layer

        def set_layer(self, *a, **k):
            n = sum(1 for _, m in marks if m.startswith("layer"))
            marks.append((time.perf_counter(), f"layer {n} (batched pulls)"))
            return _sl(self, *a, **k)

        evalmod.PullRows.set_layer = set_layer
        _seg = evalmod._segment

        def segment(*a, **k):
            if not marks or not marks[-1][1].startswith("setup"):
                marks.append((time.perf_counter(), "setup (a sampler per part)"))
            return _seg(*a, **k)

        evalmod._segment = segment
        import shoal.training.inference as inf

        if hasattr(inf, "_stage"):  # the node-wise part of a layer, before its pulls
            _stage = inf._stage

            def stage(*a, **k):
                if not marks[-1][1].startswith("projection"):
                    marks.append((time.perf_counter(), "projection of the next layer's inputs"))
                return _stage(*a, **k)

            inf._stage = stage
        fs_cls = evalmod.DistFeatureStore
    _pull = fs_cls.pull

    pull_log: list[tuple] = []  # (pull, seconds, RssAnon, RssFile) after each pull

    def pull(self, *a, **k):
        pulls[0] += 1
        out = _pull(self, *a, **k)
        st = proc_status()
        pull_log.append((pulls[0], time.perf_counter(), st.get("RssAnon", 0), st.get("RssFile", 0)))
        return out

    fs_cls.pull = pull

    with process_group(DistConfig(backend="gloo", threads=1, timeout_s=3600)) as ctx:
        store = Store.open(args.store)
        tc = TrainConfig.from_options(
            model="sage", fanouts=(10, 5), hidden=HIDDEN, epochs=1, progress=False
        )
        torch.manual_seed(0)
        eng = get_engine("minibatch")(store, EngineConfig(train=tc), ctx)
        model = eng.model
        sd = model.state_dict()
        if args.state_in:
            loaded = torch.load(args.state_in)
            if set(loaded) != set(sd) or any(loaded[k].shape != sd[k].shape for k in sd):
                raise SystemExit("state_dict keys/shapes differ between versions")
            same_init = all(torch.equal(loaded[k], sd[k]) for k in sd)
            model.load_state_dict(loaded)
        else:
            same_init = None
        if args.state_out and ctx.rank == 0:
            torch.save(model.state_dict(), args.state_out)
        wsum = float(sum(v.double().sum() for v in model.state_dict().values()))
        parts = eng.parts
        info = {
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "which": args.which,
            "api": "shoal.engines.base.dist_evaluate"
            if old_api
            else "shoal.distributed.dist_evaluate",
            "shoal_file": str(shoal_file),
            "store_num_parts": int(store.num_parts),
            "store_feature_dim": int(store.feature_dim),
            "parts": [
                {
                    "index": int(p.index),
                    "num_core": int(p.num_core),
                    "num_halo": int(p.num_halo),
                    "feature_bytes": int(p.num_core) * int(store.feature_dim) * 4,
                }
                for p in parts
            ],
            "weights_sum": wsum,
            "init_equal_to_loaded": same_init,
            "num_params": int(sum(v.numel() for v in model.parameters())),
            "batch_size": inspect.signature(dist_evaluate).parameters["batch_size"].default,
        }
        # the engine's training structures are not part of the evaluation's footprint but they
        # are in the RSS before; keep them (the engine holds them during a real run too)
        gc.collect()
        torch.distributed.barrier()
        before = proc_status()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        after_reset = proc_status()
        args.out.mkdir(parents=True, exist_ok=True)
        prog_path = args.out / f"rank{ctx.rank}.progress.json"
        rb0 = read_bytes()

        def progress(smp: Sampler) -> None:  # how far a slow (capped) run got
            prog_path.write_text(
                json.dumps(
                    {
                        "elapsed": time.perf_counter() - smp.t0,
                        "pulls": pulls[0],
                        "marks": [(round(m - smp.t0, 3), n) for m, n in marks],
                        "peak": smp.peak,
                        "read_bytes": read_bytes() - rb0,
                    }
                )
            )

        smp = Sampler(progress=progress)
        smp.start()
        t0 = time.perf_counter()
        acc = dist_evaluate(model, store, parts, eng.part_to_rank, ctx, eng.tables)
        secs = time.perf_counter() - t0
        smp.stop()
        end = proc_status()
        rb = read_bytes() - rb0
        # per-phase peaks from the timeline and the marks
        bounds = [(m - smp.t0, name) for m, name in marks]
        phases = []
        for i, (start, name) in enumerate(bounds):
            stop = bounds[i + 1][0] if i + 1 < len(bounds) else secs + 1.0
            pts = [x for x in smp.timeline if start <= x[0] < stop]
            phases.append(
                {
                    "start_s": round(start, 3),
                    "phase": name,
                    "peak_anon": max((x[1] for x in pts), default=0),
                    "peak_file": max((x[2] for x in pts), default=0),
                }
            )
        tl = smp.timeline
        step = max(1, len(tl) // 200)
        info.update(
            {
                "rss_before": before.get("VmRSS", 0),
                "anon_before": before.get("RssAnon", 0),
                "file_before": before.get("RssFile", 0),
                "shmem_before": before.get("RssShmem", 0),
                "hwm_after_reset": after_reset.get("VmHWM", 0),
                "peak_hwm": end.get("VmHWM", 0),
                "peak_increase": end.get("VmHWM", 0) - before.get("VmRSS", 0),
                "peak_anon": smp.peak["RssAnon"],
                "peak_file": smp.peak["RssFile"],
                "peak_shmem": smp.peak["RssShmem"],
                "peak_anon_increase": smp.peak["RssAnon"] - before.get("RssAnon", 0),
                "peak_file_increase": smp.peak["RssFile"] - before.get("RssFile", 0),
                "rss_end": end.get("VmRSS", 0),
                "seconds": secs,
                "accuracy": acc,
                "pulls": pulls[0],
                "read_bytes": rb,
                "phases": phases,
                "timeline": [(round(t, 3), a, f) for t, a, f in tl[::step]],
                "samples": len(tl),
                # every pull up to 100, then every k-th (and the last)
                "pull_log": [
                    (n, round(t - smp.t0, 3), a, f)
                    for i, (n, t, a, f) in enumerate(pull_log)
                    if i % max(1, len(pull_log) // 100) == 0 or i == len(pull_log) - 1
                ],
            }
        )
        (args.out / f"rank{ctx.rank}.json").write_text(json.dumps(info, indent=1))
        print(
            f"[{args.which} rank {ctx.rank}] {secs:.1f} s acc {acc} "
            f"increase {info['peak_increase'] / MiB:.0f} MiB",
            flush=True,
        )
        del eng


# --------------------------------------------------------------------------------------------
# run


def launch(
    args,
    which: str,
    tag: str,
    src: Path,
    *,
    store: Path | None = None,
    state_in=None,
    state_out=None,
    cgroup=None,
    timeout: float | None = None,
) -> dict:
    p = paths(args.work)
    out = p["runs"] / tag
    if out.exists():
        for f in out.glob("rank*.json"):
            f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    p["tmp"].mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["TMPDIR"] = str(p["tmp"])  # the old code's temporary memory maps go here, not /tmp
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(src)
    store = store or p["store"]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(NPROC),
        str(Path(__file__).resolve()),
        "worker",
        "--store",
        str(store),
        "--which",
        which,
        "--out",
        str(out),
        "--src",
        str(src),
    ]
    if state_in:
        cmd += ["--state-in", str(state_in)]
    if state_out:
        cmd += ["--state-out", str(state_out)]
    full = cmd
    if cgroup is not None:
        procs = cgroup.path / "cgroup.procs"
        full = ["sh", "-c", f"echo $$ > {shlex.quote(str(procs))} && exec {shlex.join(cmd)}"]
    evict(store)
    print(f"== {tag}: {shlex.join(full)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(full, cwd=ROOT, env=env, start_new_session=True)
    smp = Sampler(proc.pid, interval=0.2)  # the launcher's own RSS (it is in the cgroup too)
    smp.start()
    try:
        rc = proc.wait(timeout=timeout or args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # torch.distributed.run stops its workers
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        rc = f"stopped after {timeout or args.timeout:.0f} s"
    wall = time.perf_counter() - t0
    smp.stop()
    res = {
        "tag": tag,
        "which": which,
        "command": shlex.join(full),
        "env": {k: env[k] for k in ("PYTHONPATH", "TMPDIR", "OMP_NUM_THREADS") if k in env},
        "returncode": rc,
        "ok": rc == 0,
        "wall_seconds": wall,
        "launcher_peak_rss": smp.peak["VmRSS"],
        "ranks": [json.loads(f.read_text()) for f in sorted(out.glob("rank?.json"))],
        "progress": [json.loads(f.read_text()) for f in sorted(out.glob("rank?.progress.json"))],
    }
    if cgroup is not None:
        res["cgroup"] = cgroup.read()
    print(f"== {tag}: rc {rc}, {wall:.0f} s", flush=True)
    return res


def machine() -> dict:
    import torch

    def out(cmd: str) -> str:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.rstrip()

    return {
        **common.machine(),
        "free_g": out("free -g"),
        "torch": torch.__version__,
        "commit_after": out(f"git -C {ROOT} rev-parse --short HEAD"),
        "commit_before": BEFORE_COMMIT,
    }


def run(args) -> None:
    p = paths(args.work)
    for k in ("store", "warm_store", "before"):
        if not p[k].exists():
            raise SystemExit(f"{p[k]} missing: run `python bench/dist_eval_memory.py prepare`")
    log: list[str] = []
    versions = {"before": worktree(args.work, "before", BEFORE_COMMIT, log)}
    versions["after"] = worktree(args.work, "after", args.after_ref, log)
    for i, ref in enumerate(args.extra_ref):
        path, commit = worktree(args.work, f"extra{i}", ref, log)
        versions[f"after@{commit[:7]}"] = (path, commit)
    mach = machine()
    mach["commit_after"] = versions["after"][1][:7]
    mach["checkout_head"] = resolve("HEAD")[:7]
    mach["versions"] = {k: c for k, (_, c) in versions.items()}
    runs: dict[str, dict] = {}
    warm = {}
    for name, (path, _) in versions.items():  # unmeasured: numba caches, PyG templates
        warm[name] = launch(args, name, f"warm-{name}", path / "src", store=p["warm_store"])
        if not warm[name]["ok"]:
            raise SystemExit(f"the warm-up of {name!r} failed; see its output above")
    if p["state"].exists():
        p["state"].unlink()
    src = {name: path / "src" for name, (path, _) in versions.items()}
    runs["after"] = launch(args, "after", "after", src["after"], state_out=p["state"])
    if not runs["after"]["ok"]:
        raise SystemExit("the 'after' run failed; see its output above")
    runs["before"] = launch(args, "before", "before", src["before"], state_in=p["state"])
    for name in versions:
        if name.startswith("after@"):
            runs[name] = launch(args, name, name.replace("@", "-"), src[name], state_in=p["state"])
    ranks = runs["after"]["ranks"]
    part_bytes = max(q["feature_bytes"] for r in ranks for q in r["parts"])
    rank_rss = max(r["rss_before"] for r in ranks)
    launcher = max(runs["after"]["launcher_peak_rss"], runs["before"]["launcher_peak_rss"])
    caps = []
    for k in args.cap_parts:
        cap = int(launcher + NPROC * (rank_rss + k * part_bytes))
        caps.append({"parts": k, "bytes": cap})
        for which in ("after", "before"):
            tag = f"{which}_capped{k:g}"
            with Cgroup("shoal_bench", cap) as cg:
                runs[tag] = launch(
                    args,
                    which,
                    tag,
                    src[which],
                    state_in=p["state"],
                    cgroup=cg,
                    timeout=args.cap_timeout,
                )
                runs[tag]["cap_parts"] = k
    results = {
        "setting": {
            "graph": f"dcsbm, {NODES} nodes, {EDGES} undirected edges (x2 stored), "
            f"{FEATURES} features, default classes/splits",
            "partition": f"{ALGO}, {PARTS} parts",
            "ranks": NPROC,
            "model": f"sage, 2 layers, hidden {HIDDEN}, random init (seed 0), same weights "
            "in both versions (state_dict file)",
            "evaluation": "dist_evaluate(model, store, parts, part_to_rank, ctx, tables), "
            "splits val+test, batch_size the version's default (table)",
        },
        "machine": mach,
        "worktree_log": log,
        "warmup": {k: {"ok": v["ok"], "wall_seconds": v["wall_seconds"]} for k, v in warm.items()},
        "prepare_log": json.loads((args.work / "prepare_log.json").read_text())
        if (args.work / "prepare_log.json").exists()
        else [],
        "part_feature_bytes": part_bytes,
        "caps": caps,
        "cap_rule": "launcher peak RSS (uncapped runs) + 2 x (largest RSS of an 'after' rank "
        "just before the evaluation + k x one part's features)",
        "cap_timeout_s": args.cap_timeout,
        "runs": runs,
        "command": "python bench/dist_eval_memory.py prepare && python bench/dist_eval_memory.py "
        + shlex.join(sys.argv[1:]),
    }
    write_json(RESULTS / "dist_eval_memory.json", results)
    write_text_atomic(RESULTS / "dist_eval_memory.md", report(results))
    print((RESULTS / "dist_eval_memory.md").read_text())


def report_only(args) -> None:
    res = json.loads((RESULTS / "dist_eval_memory.json").read_text())
    write_text_atomic(RESULTS / "dist_eval_memory.md", report(res))


def mib(b: float) -> str:
    return f"{b / MiB:,.0f}"


def breakdown(r: dict) -> str:
    """Memory of an "after" rank phase by phase (peaks of the samples in each phase)."""
    a0, f0 = r["anon_before"], r["file_before"]
    bits = [
        (
            x["start_s"],
            f"{x['phase']} (from {x['start_s']:.1f} s) peak: anon {mib(x['peak_anon'])} "
            f"(+{mib(x['peak_anon'] - a0)}), file {mib(x['peak_file'])} "
            f"(+{mib(x['peak_file'] - f0)})",
        )
        for x in r["phases"]
    ]
    if r.get("pull_log"):
        n, t, a, f = r["pull_log"][0]
        bits.append(
            (t, f"just after the first halo pull ({t:.1f} s): anon {mib(a)} (+{mib(a - a0)})")
        )
    bits.sort(key=lambda b: b[0])
    return f"before: anon {mib(a0)}, file {mib(f0)}; " + "; ".join(b for _, b in bits) + "."


def report(res: dict) -> str:
    runs, pb = res["runs"], res["part_feature_bytes"]
    L = [
        "# Peak memory of one exact distributed evaluation, before and after the bounded rewrite",
        "",
        "Written by `bench/dist_eval_memory.py` (do not edit by hand). Command:",
        "",
        f"    {res['command']}",
        "",
        "Setting: " + "; ".join(f"{k}: {v}" for k, v in res["setting"].items()) + ".",
        f'"before": commit {res["machine"]["commit_before"]} (`shoal.engines.base.'
        'dist_evaluate`; it opened the same store); "after": commit '
        f"{res['machine']['commit_after']} (`shoal.distributed.dist_evaluate`, the checkout's "
        "HEAD when the run started)"
        + "".join(
            f"; {k}: an earlier commit of the rewrite"
            for k in res["machine"]["versions"]
            if k.startswith("after@")
        )
        + ". Each version is imported from its own git worktree (`PYTHONPATH=<worktree>/src`), "
        "evaluated a small store once (unmeasured, warms numba's kernel cache), and each "
        "measured run starts with the store's pages evicted from the page cache "
        "(`posix_fadvise DONTNEED`); `TMPDIR` points under bench/work (the old code's "
        "temporary memory maps).",
        "",
        "Per rank: RSS just before the evaluation (engine built, model loaded), then VmHWM reset "
        "(`echo 5 > /proc/self/clear_refs`) and RssAnon/RssFile sampled every 20 ms. *Peak "
        "increase* = VmHWM after the evaluation - VmRSS before it. MiB = 2^20 bytes.",
        "",
    ]
    parts = sorted(
        {q["index"]: q for r in runs["after"]["ranks"] for q in r["parts"]}.values(),
        key=lambda q: q["index"],
    )
    L.append(
        "Parts (core nodes, halo nodes, core feature bytes = num_core x 128 x 4): "
        + "; ".join(
            f"part {q['index']}: {q['num_core']:,} / {q['num_halo']:,} / {mib(q['feature_bytes'])} MiB"
            for q in parts
        )
        + f". **One part's features: {mib(pb)} MiB** (largest part)."
    )
    L += [
        "",
        "| version | batch | rank | RSS before (MiB) | peak increase (MiB) | peak anon (MiB) | "
        "anon increase (MiB) | peak file (MiB) | file increase (MiB) | seconds | val acc | "
        "test acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    uncapped = [t for t, r in runs.items() if "cap_parts" not in r]
    for tag in uncapped:
        for r in runs[tag]["ranks"]:
            L.append(
                f"| {tag} | {r.get('batch_size', '')} | {r['rank']} | {mib(r['rss_before'])} | {mib(r['peak_increase'])} | "
                f"{mib(r['peak_anon'])} | {mib(r['peak_anon_increase'])} | "
                f"{mib(r['peak_file'])} | {mib(r['peak_file_increase'])} | "
                f"{r['seconds']:.1f} | {r['accuracy']['val']:.4f} | {r['accuracy']['test']:.4f} |"
            )
    L.append("")
    ab, aa = runs["before"]["ranks"], runs["after"]["ranks"]
    every = [r for t in uncapped for r in runs[t]["ranks"]]
    if ab and aa:
        same = all(r["accuracy"] == aa[0]["accuracy"] for r in every)
        diff = max(
            abs(r["accuracy"][s] - aa[0]["accuracy"][s]) for r in every for s in ("val", "test")
        )
        w_same = all(r["weights_sum"] == aa[0]["weights_sum"] for r in every)
        init = ab[0].get("init_equal_to_loaded")
        L.append(
            f"Accuracies identical: **{same}** (largest difference {diff:.2g}); all versions "
            f"evaluated the same weights (weight sums equal: {w_same}; the old version's own "
            f"seed-0 initial weights were {'identical to' if init else 'different from'} the "
            "new version's)."
        )
        worst = max(r["peak_increase"] for r in aa)
        worst_anon = max(r["peak_anon_increase"] for r in aa)
        verdict = "below" if worst < pb else "NOT below"
        L.append(
            f'"after"\'s largest peak increase, {mib(worst)} MiB (anonymous part '
            f"{mib(worst_anon)} MiB), is **{verdict}** one part's features ({mib(pb)} MiB); "
            f'"before"\'s was {mib(max(r["peak_increase"] for r in ab))} MiB.'
        )
    L += ["", "Peaks per phase (rank 0; anon / file MiB at the phase's highest sample):", ""]
    for tag in uncapped:
        rs = [r for r in runs[tag]["ranks"] if r["rank"] == 0]
        if rs:
            ph = "; ".join(
                f"{x['phase']} at {x['start_s']:.1f} s: {mib(x['peak_anon'])} / {mib(x['peak_file'])}"
                for x in rs[0]["phases"]
            )
            L.append(f"- {tag}: {ph}")
    L += [
        "",
        'Where the "after" increase comes from (RssAnon / RssFile in MiB, from the 20 ms '
        "samples and a reading after every halo pull):",
        "",
    ]
    for r in runs["after"]["ranks"]:
        L.append(f"- rank {r['rank']}: " + breakdown(r))
    L += [
        "",
        "## Capped runs (cgroup v1 memory limit)",
        "",
        f"Limit = {res['cap_rule']}. The cgroup holds the launcher and both ranks and is "
        "charged their anonymous memory and the page cache they fault in (the store's pages "
        "are evicted first, so they are charged to it). It is a child of the bench process's "
        "own memory cgroup, removed afterwards. A run still going after "
        f"{res['cap_timeout_s']:.0f} s is stopped; *progress* is then the halo pulls done by "
        "the slower rank over those of the uncapped run, and the layer it was in. *read* = "
        "bytes the ranks read from disk (`/proc/<pid>/io` read_bytes, summed) during the "
        "evaluation.",
        "",
        "| version | k | limit (MiB) | completed | outcome | wall seconds (launcher) | "
        "eval seconds (max rank) | progress | read (GiB) | cgroup max usage (MiB) | OOM kills "
        "| val acc | test acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    full_pulls = {t: max((r["pulls"] for r in runs[t]["ranks"]), default=0) for t in uncapped}
    for r in runs.values():
        if "cap_parts" not in r:
            continue
        cg = r.get("cgroup", {})
        rk, pr = r["ranks"], r.get("progress", [])
        done = len(rk) == NPROC
        ev = f"{max(x['seconds'] for x in rk):.1f}" if done else "—"
        va = f"{rk[0]['accuracy']['val']:.4f}" if done else "—"
        te = f"{rk[0]['accuracy']['test']:.4f}" if done else "—"
        if done:
            prog = "done"
            rd = sum(x["read_bytes"] for x in rk)
        elif pr:
            slow = min(pr, key=lambda x: x["pulls"])
            layer = sum(1 for _, n in slow["marks"] if n.startswith(("layer", "halo")))
            where = f"in layer {layer - 1} (layers 0-1)" if layer else "before layer 0"
            prog = (
                f"{slow['pulls']}/{full_pulls[r['which']]} pulls, {where}, last seen at "
                f"{slow['elapsed']:.0f} s with {mib(max(x['peak']['RssAnon'] for x in pr))} "
                "MiB peak anon in a rank"
            )
            rd = sum(x["read_bytes"] for x in pr)
        else:
            prog, rd = "did not start evaluating", 0
        oom = cg.get("oom_kill", -1)
        outcome = (
            "completed"
            if r["ok"]
            else f"OOM-killed ({r['returncode']})"
            if oom and oom > 0
            else str(r["returncode"])
        )
        L.append(
            f"| {r['which']} | {r['cap_parts']:g} | {mib(cg.get('limit', 0))} | "
            f"{'yes' if r['ok'] else 'NO'} | {outcome} | {r['wall_seconds']:.0f} | {ev} | "
            f"{prog} | {rd / 2**30:.1f} | {mib(cg.get('max_usage', 0))} | {oom} | {va} | {te} |"
        )
    L += [
        "",
        "Disk reads of the uncapped evaluations (both ranks): "
        + ", ".join(
            f"{t} {sum(x['read_bytes'] for x in runs[t]['ranks']) / 2**30:.1f} GiB"
            for t in uncapped
        )
        + ".",
    ]
    L += [
        "",
        "Uncapped launcher wall seconds (start of torch.distributed.run to its exit): "
        + ", ".join(f"{t} {runs[t]['wall_seconds']:.0f}" for t in uncapped)
        + ".",
    ]
    m = res["machine"]
    L += [
        "",
        "## Machine",
        "",
        f"{machine_line(m)}; torch {m['torch']}.",
        "",
        "```",
        m["free_g"],
        "```",
        "",
        "Data preparation (seconds as logged by `prepare`):",
        "",
        "```",
        *res["prepare_log"],
        "```",
        "",
        "Commands of the runs:",
        "",
        "```",
        *(f"{t}: {r['command']}" + (f"  (env {r['env']})") for t, r in runs.items()),
        "```",
        "",
    ]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("prepare", "run"):
        s = sub.add_parser(name)
        s.add_argument("--work", type=Path, default=WORK)
        if name == "run":
            s.add_argument(
                "--cap-parts",
                type=float,
                nargs="+",
                default=[1.0, 2.0],
                help="capped runs: k in the limit launcher + 2 x (rank RSS + k x "
                "one part's features) (default 1 2)",
            )
            s.add_argument(
                "--cap-timeout",
                type=float,
                default=1800.0,
                help="seconds after which a capped run is stopped (default 1800)",
            )
            s.add_argument("--timeout", type=float, default=7200.0)
            s.add_argument("--after-ref", default="HEAD", help="the 'after' commit (HEAD)")
            s.add_argument(
                "--extra-ref",
                nargs="*",
                default=[],
                help="more commits measured uncapped (rows 'after@HASH')",
            )
    sub.add_parser("report", help="rewrite the .md from the .json")
    w = sub.add_parser("worker")
    w.add_argument("--store", type=Path, required=True)
    w.add_argument("--which", required=True, help="the version's label")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--src", type=Path, required=True, help="the version's src directory")
    w.add_argument("--state-in", type=Path, default=None)
    w.add_argument("--state-out", type=Path, default=None)
    args = ap.parse_args()
    if getattr(args, "work", None) is not None:
        args.work = args.work.resolve()
    {"prepare": prepare, "run": run, "worker": worker, "report": report_only}[args.cmd](args)


if __name__ == "__main__":
    main()
