"""The ``shoal`` command.

Each stage owns its sub-commands: a module exposing ``register(subparsers)`` adds its parsers
and sets ``func`` (called with the parsed namespace, returns an exit code). This file only
assembles them and turns :class:`~shoal.errors.ShoalInputError` into exit code 2 and
:class:`~shoal.errors.ShoalDiskFullError` (a full disk) and
:class:`~shoal.errors.ShoalPeerLostError` (a lost peer) into one line and exit code 1 (the
traceback with ``-v``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from shoal import __version__
from shoal.errors import ShoalDiskFullError, ShoalInputError, ShoalPeerLostError

__all__ = ["build_parser", "main"]

#: Sub-command -> the module that registers it, in ``--help`` order. Only the module of the
#: command being run is imported (``shoal data ...`` never pays for importing torch); a module
#: that does not exist (a stage not built yet) is skipped.
COMMANDS = {
    "data": "shoal.cli.data",  # data import | synth | info | csr
    "partition": "shoal.cli.partition",
    "store": "shoal.cli.store",  # store build
    "inspect": "shoal.cli.store",
    "verify": "shoal.cli.store",
    "plan": "shoal.cli.plan",
    "train": "shoal.cli.train",
    "embed": "shoal.cli.embed",
    "report": "shoal.cli.report",
    "config": "shoal.cli.config",  # config show
    "demo": "shoal.cli.demo",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def _modules_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The modules needed to parse ``argv``: the command's own, or all of them for help."""
    for a in argv or ():
        if not a.startswith("-"):
            return (COMMANDS[a],) if a in COMMANDS else COMMAND_MODULES
    return COMMAND_MODULES


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``shoal`` parser; with ``argv``, only the sub-command it names is registered."""
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
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more logging (-v info, -vv debug); like --log-level and --quiet, before or "
        "after the command",
    )
    parser.add_argument("--log-level", choices=LEVELS, help="log level (default warning)")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="errors only, no progress bars (results are still printed)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if argv is None else _modules_for(argv):
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        mod.register(sub)
    return parser


LEVELS = ("debug", "info", "warning", "error")


def global_options(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """Take ``-v``/``-vv``/``--verbose``, ``--log-level L`` and ``-q``/``--quiet`` from
    anywhere in ``argv`` (before or after the command; not after ``--``). Returns the other
    arguments and the level asked for (None: the default)."""
    rest: list[str] = []
    level: str | None = None
    verbose = 0
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a == "--":
            rest += list(argv[i:])
            break
        if a in ("-q", "--quiet"):
            level = "error"
        elif a == "--verbose" or (a.startswith("-v") and set(a[1:]) == {"v"}):
            verbose += 1 if a == "--verbose" else len(a) - 1
        elif a == "--log-level" or a.startswith("--log-level="):
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            if "=" not in a:
                next(it, None)
            if value.lower() not in LEVELS:
                raise ShoalInputError(
                    f"--log-level {value!r} is not a level", fix=f"pass one of {', '.join(LEVELS)}"
                )
            level = value.lower()
        else:
            rest.append(a)
    if level is None and verbose:
        level = "info" if verbose == 1 else "debug"
    return rest, level


def _parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Parse ``argv`` with the stage's section of ``--config FILE`` as defaults
    (:mod:`shoal.cli.config`; ``shoal train`` reads its own sections)."""
    from shoal.cli.config import apply_config_file, take_config

    rest, cfg = take_config(argv)
    first = next((a for a in rest if not a.startswith("-")), None)
    if first == "train" and cfg is not None:
        rest = [*rest, "--config", cfg]
    parser = build_parser(rest)
    if cfg is not None and first not in ("train", "config"):
        apply_config_file(parser, rest, cfg)
    args = parser.parse_args(rest)
    if first == "config" and cfg is not None and getattr(args, "config_file", None) is None:
        args.config_file = cfg
    return parser, args


#: OpenMP threads sleep when a parallel region ends instead of spinning (``OMP_WAIT_POLICY``,
#: set before torch's and numba's OpenMP runtimes load; a value in the environment wins): a
#: training step shares the cores with the threads that sample and read ahead, which spinning
#: threads starve (docs/measurements.md#openmp-threads-beside-the-reading-thread)
OMP_WAIT_POLICY = "PASSIVE"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``shoal`` command; returns its exit code. ``argv`` None: this process's own command
    line, which ``shoal train --store ... --nproc N`` replaces with its launcher (the launcher's
    exit code is then the process's)."""
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    own_process = argv is None  # this process's command line: a launcher may take its place
    if argv is None:
        argv = sys.argv[1:]
    try:
        argv, level = global_options(argv)
    except ShoalInputError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    try:
        parser, args = _parse(argv)
    except ShoalInputError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    lvl = getattr(logging, (level or "warning").upper())
    logging.basicConfig(
        level=lvl, format="%(asctime)s %(name)s %(levelname)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger().setLevel(lvl)
    if level is not None:  # torchrun workers follow an explicit level (default: info)
        os.environ["SHOAL_LOG_LEVEL"] = logging.getLevelName(lvl)
    if level == "error":
        os.environ["SHOAL_QUIET"] = "1"  # no progress bars, here or in the workers
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.own_process = own_process
    try:
        return int(args.func(args) or 0)
    except ShoalInputError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    except (ShoalDiskFullError, ShoalPeerLostError) as e:
        if lvl <= logging.INFO:
            logging.getLogger("shoal").info("what failed", exc_info=e)
        print(f"shoal: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
