#!/usr/bin/env bash
# Create the separate virtual environment the benchmarks use to run DGL side by side with
# shoal: DGL 2.1.0 (the newest DGL with a Linux wheel on PyPI) on torch 2.2.1.
# DGL is not a shoal dependency; this venv lives in bench/work/ (git-ignored).
# Usage: bash bench/dgl_env.sh   -> prints the venv's python path
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/work/dgl-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import dgl, dgl.distributed, torch" >/dev/null 2>&1; then
  mkdir -p "$here/work"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet "torch==2.2.1" "dgl==2.1.0" "numpy<2" scipy psutil \
    pydantic pyyaml packaging requests tqdm "pandas<2.3" >&2
  # dgl.distributed / dgl.dataloading import torchdata's datapipes, removed in torchdata 0.8+
  "$venv/bin/python" -m pip install --quiet --no-deps "torchdata==0.7.1" >&2
fi
echo "$venv/bin/python"
