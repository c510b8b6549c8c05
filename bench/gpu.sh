#!/usr/bin/env bash
# The GPU run of issues 35 and 56, prepared to run in one go on a lent GPU machine (its image has
# torch with CUDA, torch-geometric, numba, numpy, scipy, psutil, tqdm, pytest and
# pytest-xdist, and reaches no package index):
#
#   1. installs shoal from this checkout with --no-deps (the image's torch stays as it is);
#   2. runs every CUDA test (and the files they live in) with pytest, JUnit XML to $OUT;
#   3. runs bench/gpu.py: GraphSAGE epochs on the GPU and on the same machine's CPU cores,
#      PyG's GraphSAGE through --model-factory, an out-of-core run under --memory; writes
#      gpu.json and gpu.md to $OUT (commit them as bench/results/gpu.{json,md}).
#
# Usage (repository root):  OUT=DIR bash bench/gpu.sh
# Rehearsal without a GPU:  REHEARSE=1 PYTHON=.venv/bin/python OUT=DIR bash bench/gpu.sh
# Smoke test (tests/bench):  bash bench/gpu.sh --smoke  (no install, no tests: bench/gpu.py
#   --smoke on the CPU, results in $SHOAL_BENCH_WORK/smoke/gpu.md)
# Scratch data (graphs, pack files) go to $GPU_WORK (default bench/work/gpu, on disk: the
# out-of-core run reads with direct I/O, which a RAM-backed /tmp does not take).
set -uo pipefail
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ "${1:-}" = "--smoke" ]; then
    exec $PY bench/gpu.py --smoke --command "bash bench/gpu.sh --smoke"
fi
OUT=${OUT:-bench/work/gpu-out}
WORK=${GPU_WORK:-bench/work/gpu}
mkdir -p "$OUT" "$WORK"
export NUMBA_CACHE_DIR="$(cd "$WORK" && pwd)/numba"  # compiled once, shared by every process
t0=$(date +%s)

if [ -z "${REHEARSE:-}" ]; then
    $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 ||
        echo "pip install failed (see install.log): using PYTHONPATH=src"
    nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
fi
$PY -c "import torch, shoal; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"

TESTS=(
    tests/sample/test_device.py
    tests/training/test_devicebatches.py
    tests/training/test_meter.py
    tests/nn/test_ondevice.py
    tests/training/test_device.py
    tests/training/test_inference.py
    tests/utils/test_device.py
    tests/distributed/test_runtime.py
    tests/engines/test_launch.py
    tests/loader/test_factory.py
)
PAR=()
$PY -c "import xdist" 2>/dev/null && PAR=(-n 8)
TEST_CMD="SHOAL_TEST_START=spawn pytest -q -rfEs ${PAR[*]} ${TESTS[*]}"
SHOAL_TEST_START=spawn timeout 200 $PY -m pytest -q -rfEs "${PAR[@]}" -p no:cacheprovider --junitxml="$OUT/tests.xml" \
    "${TESTS[@]}" 2>&1 | tee "$OUT/tests.log"
SUMMARY=$(grep -E "passed|failed" "$OUT/tests.log" | tail -1)
echo "tests done after $(($(date +%s) - t0)) s: $SUMMARY"

BENCH=(--work "$WORK" --out "$OUT" --tests-xml "$OUT/tests.xml")
[ -n "${REHEARSE:-}" ] && BENCH+=(--rehearse --epochs 2 --ooc-memory 256MiB) # 256MiB: the retry
timeout 340 $PY bench/gpu.py "${BENCH[@]}" --command "bash bench/gpu.sh" --tests-summary "$SUMMARY" \
    --tests-command "$TEST_CMD" ${GPU_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v "^|"
for f in "$WORK"/*.stderr; do echo "== $f"; tail -c 20000 "$f"; done >"$OUT/runs.log" 2>&1
echo "all done after $(($(date +%s) - t0)) s"
