"""``python -m shoal.store build|inspect|verify|plan ...``: the store's sub-commands alone.

Same handlers as ``shoal store build`` etc., without assembling every stage's parser (some
stages import numba at registration, about 60 MB of resident memory that a store build does
not need; the store benchmark runs this entry point).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shoal.errors import ShoalInputError
from shoal.store.cli import register

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shoal.store")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    register(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "build":  # `python -m shoal.store build ...` = `shoal store build`
        argv = ["store", *argv]
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ShoalInputError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
