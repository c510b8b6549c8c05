"""Every benchmark script still runs: ``python bench/<script> --smoke`` on a tiny graph.

Nothing else runs the benchmarks between their (rare) full runs, so an API change that breaks
one (a renamed config field, a removed flag) would otherwise be found only by the next person
who needs its numbers. Each script's ``--smoke`` runs every part of it in seconds on
``common.GRAPHS["smoke"]`` or the bundled Cora; all of them share one work folder
(``SHOAL_BENCH_WORK``), so the tiny graphs and stores are built once. A smoke run must exit 0,
write its results (``.md`` and ``.json``, naming the command that wrote them) under
``WORK/smoke`` and leave ``bench/results`` untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: scripts that are tools for the others, not experiments: they write no results file
TOOLS = {"cgroup.py", "netshape.py", "dgl_env.sh"}
#: scripts whose smoke run is another's (``bash bench/gpu.sh --smoke`` runs
#: ``bench/gpu.py --smoke``)
COVERED_BY = {"gpu.py": "gpu.sh"}
ALL = sorted(p.name for p in (*BENCH.glob("*.py"), *BENCH.glob("*.sh")) if p.name != "common.py")
SCRIPTS = [s for s in ALL if s not in COVERED_BY]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("bench_work")


def _results_files() -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (BENCH / "results").iterdir()}


def test_every_script_is_covered():
    assert "distributed.py" in SCRIPTS and "gpu.sh" in SCRIPTS  # the glob found the folder
    for script, by in COVERED_BY.items():
        assert script in (BENCH / by).read_text(), f"{by} no longer runs {script}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke(script: str, work: Path):
    before = _results_files()
    runner = ["bash"] if script.endswith(".sh") else [sys.executable]
    env = {
        **os.environ,
        "SHOAL_BENCH_WORK": str(work),
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [*runner, str(BENCH / script), "--smoke"],
        cwd=BENCH.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"python bench/{script} --smoke exited {proc.returncode}:\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    assert _results_files() == before, "a smoke run wrote to bench/results"
    if script in TOOLS:
        return
    stem = Path(script).stem
    written = sorted((work / "smoke").glob(f"{stem}*.md"))
    assert written, f"bench/{script} --smoke wrote no {stem}*.md under WORK/smoke"
    for md in written:
        assert md.with_suffix(".json").exists(), f"{md.name} has no JSON beside it"
        assert f"bench/{script}" in md.read_text(), f"{md.name} does not name its command"
