#!/usr/bin/env bash
# The separate virtual environment in which bench/train.py and bench/store.py run DGL beside
# shoal: DGL 2.1.0 (the newest DGL with a Linux wheel on PyPI) on torch 2.2.1, in
# bench/work/dgl-venv (git-ignored; DGL is not a shoal dependency). Prints the venv's python.
#
# Usage: bash bench/dgl_env.sh           create the venv if needed (PyPI), print its python
#        bash bench/dgl_env.sh --smoke   install nothing: print the plan and the path, exit 0
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/work/dgl-venv"
pkgs=("torch==2.2.1" "dgl==2.1.0" "numpy<2" scipy psutil pydantic pyyaml packaging requests tqdm
  "pandas<2.3")
# dgl.distributed / dgl.dataloading import torchdata's datapipes, removed in torchdata 0.8+
late=("torchdata==0.7.1")
ready() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import dgl, dgl.distributed, torch" >/dev/null 2>&1; }
if [ "${1:-}" = "--smoke" ]; then
  if ready; then state="present"; else state="absent: would run python3 -m venv, then pip install ${pkgs[*]}; pip install --no-deps ${late[*]}"; fi
  echo "dgl venv $venv: $state" >&2
  echo "$venv/bin/python"
  exit 0
fi
if ! ready; then
  mkdir -p "$here/work"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet "${pkgs[@]}" >&2
  "$venv/bin/python" -m pip install --quiet --no-deps "${late[@]}" >&2
fi
echo "$venv/bin/python"
