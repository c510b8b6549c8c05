"""A/B of the engines' exact evaluation (``shoal.engines.base.dist_evaluate``): the version of
commit 70b9c74 (layer_forward on gathered wide inputs) against the current one (the model's
``inference_split`` node-wise part first, then the halo pull), world size 1, same weights.

Usage::

    python bench/distributed_eval_ab.py bench/work/distributed/coauthor_physics-store2

Historical: it loads the old version from git, whose imports (``shoal.dist``, ``shoal.train``)
no longer exist since the restructure of issue 10; run it from a checkout of commit a8fe23e.

Prints the median seconds of 3 alternating runs of each and both accuracies (they must match).
Measured 2026-11-22 on the 2-core VM (load ~1): Coauthor-Physics 2-part store, GraphSAGE
hidden 64: before 11.5 s, after 0.88 s (bench/results/distributed.md, Notes).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from shoal.distributed import DistConfig, process_group
from shoal.distributed import evaluate as new
from shoal.engines import EngineConfig, get_engine
from shoal.store import Store
from shoal.training import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "70b9c74"


def load_before():
    src = subprocess.run(
        ["git", "show", f"{BEFORE}:src/shoal/engines/base.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "base_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("base_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["base_before"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    store = Store.open(sys.argv[1])
    torch.set_num_threads(2)
    old = load_before()
    with process_group(DistConfig(backend="gloo")) as ctx:
        tc = TrainConfig(model="sage", fanouts=(10, 5), hidden=64, epochs=1, progress=False)
        eng = get_engine("minibatch")(store, EngineConfig(train=tc), ctx)
        times: dict[str, list[float]] = {"before": [], "after": []}
        accs = {}
        for _ in range(3):
            for name, mod in (("before", old), ("after", new)):
                t0 = time.perf_counter()
                accs[name] = mod.dist_evaluate(
                    eng.model, store, eng.parts, eng.part_to_rank, ctx, eng.tables
                )
                times[name].append(time.perf_counter() - t0)
        del eng
    out = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"seconds": out, "accuracy": accs, "store": sys.argv[1]}))


if __name__ == "__main__":
    main()
