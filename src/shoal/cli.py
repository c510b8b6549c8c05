"""The ``shoal`` command.

Each stage owns its sub-commands: a module exposing ``register(subparsers)`` adds its parsers
and sets ``func`` (called with the parsed namespace, returns an exit code). This file only
assembles them and turns :class:`~shoal.errors.ShoalInputError` into exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from shoal import __version__
from shoal.errors import ShoalInputError

__all__ = ["build_parser", "main"]

#: Modules that contribute sub-commands, in ``--help`` order. A module missing here (a stage
#: not built yet) is skipped.
COMMAND_MODULES = (
    "shoal.data.cli",  # data import | synth | info | csr
    "shoal.partition.cli",  # partition
    "shoal.store.cli",  # store build | inspect | verify | plan
    "shoal.train_cli",  # train
    "shoal.demo",  # demo
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shoal",
        description=(
            "Train graph neural networks on graphs larger than one machine's memory. "
            "Pipeline: data import/synth -> partition -> store build -> plan -> train."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shoal {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ShoalInputError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
