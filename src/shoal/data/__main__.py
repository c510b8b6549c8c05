"""``python -m shoal.data ...``: the ``shoal data`` commands alone.

Same commands and options as ``shoal data``, without loading the other stages' modules (torch,
PyG): useful to measure the memory of data preparation on its own, and on machines that only
prepare data.
"""

from __future__ import annotations

import argparse
import sys

from shoal.data.cli import register
from shoal.errors import ShoalInputError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shoal.data")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    register(sub)
    args = parser.parse_args(["data", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except ShoalInputError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
