"""examples/pyg_loop.py (a plain PyG loop on a shoal store) runs and learns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pyg_loop.py"


def test_pyg_loop_example(tmp_path):
    p = subprocess.run(
        [sys.executable, str(EXAMPLE), "--work", str(tmp_path), "--epochs", "8"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    acc = float(re.search(r"test accuracy ([0-9.]+)", p.stdout).group(1))
    assert acc > 0.6, p.stdout
    assert (tmp_path / "cora-store" / "meta.json").exists()
