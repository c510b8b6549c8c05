"""One TOML file for every stage: ``--config FILE`` on any command, and ``shoal config show``.

A section per stage holds that command's options under their flag names (dashes or
underscores), e.g.::

    [partition]
    algo = "spring"
    parts = 8
    option = { representative = "richest" }   # the --option KEY=VALUE pairs

    [store]
    halo-features = true

    [train]            # every option of shoal train by its flat name (TrainConfig.FLAT)
    model = "sage"
    fanouts = [15, 10, 5]

    [link]             # the link-prediction options (TrainConfig.link, LinkConfig)
    scorer = "mlp"

Sections: ``import``, ``synth.rmat``, ``synth.dcsbm``, ``split-edges``, ``partition``,
``store``, ``plan``, ``train`` (and ``link``), ``embed``, ``report``. Flags given on the
command line win over the file; the file wins over the defaults. A key that is not an option
of its command exits 2 naming the file, the section and the valid keys.
``shoal config show [--config FILE] [--stage NAME]`` prints the effective options of every
stage (the defaults with the file applied) as TOML.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from shoal.errors import ShoalInputError
from shoal.utils.io import load_toml

__all__ = ["SECTIONS", "apply_config_file", "register", "take_config"]

#: command path -> its section of the TOML file (``train`` reads its own sections)
SECTIONS: dict[tuple[str, ...], str] = {
    ("data", "import"): "import",
    ("data", "synth", "rmat"): "synth.rmat",
    ("data", "synth", "dcsbm"): "synth.dcsbm",
    ("data", "split-edges"): "split-edges",
    ("partition",): "partition",
    ("store", "build"): "store",
    ("plan",): "plan",
    ("embed",): "embed",
    ("report",): "report",
}
#: options that never come from a file (where results go is a command-line decision)
_NOT_FROM_FILE = {"help", "json", "config", "func"}


def take_config(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``--config FILE`` (or ``--config=FILE``) taken out of ``argv`` (not after ``--``)."""
    rest, path = [], None
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a == "--":
            rest += list(argv[i:])
            break
        if a == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
            next(it, None)
        elif a.startswith("--config="):
            path = a.split("=", 1)[1]
        else:
            rest.append(a)
    return rest, path


def _section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    cur: Any = doc
    for part in name.split("."):
        cur = cur.get(part, {}) if isinstance(cur, dict) else {}
    return cur if isinstance(cur, dict) else {}


def _subparser(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    for name in path:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or name not in subs[0].choices:
            return None
        parser = subs[0].choices[name]
    return parser


def command_path(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[str, ...]:
    """The sub-command names at the start of ``argv`` (e.g. ``("data", "import")``)."""
    path: list[str] = []
    cur = parser
    for a in argv:
        if a.startswith("-"):
            continue
        nxt = _subparser(cur, (a,))
        if nxt is None:
            break
        path.append(a)
        cur = nxt
    return tuple(path)


def _options(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in p._actions if a.option_strings and a.dest not in _NOT_FROM_FILE}


def _value(action: argparse.Action, v: Any) -> Any:
    if isinstance(action, argparse._AppendAction) and isinstance(v, dict):
        return [f"{k}={json.dumps(x) if not isinstance(x, str) else x}" for k, x in v.items()]
    if isinstance(v, list) and not isinstance(action, argparse._AppendAction):
        return ",".join(str(x) for x in v)  # e.g. fanouts = [15, 10, 5] -> "15,10,5"
    return v


def apply_section(
    p: argparse.ArgumentParser, table: dict[str, Any], *, path: str, section: str
) -> None:
    """Make ``table``'s values the defaults of parser ``p`` (its options only)."""
    opts = _options(p)
    for key, v in table.items():
        dest = key.replace("-", "_")
        if dest not in opts:
            valid = ", ".join(sorted(k.replace("_", "-") for k in opts))
            raise ShoalInputError(
                f"[{section}]: {key!r} is not an option of this command",
                path=path,
                fix=f"valid keys: {valid}",
            )
        action = opts[dest]
        action.default = _value(action, v)
        action.required = False


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str], path: str) -> None:
    """Apply the section of ``path`` that belongs to the command in ``argv`` (if any)."""
    cmd = command_path(parser, argv)
    section = SECTIONS.get(cmd)
    sub = _subparser(parser, cmd)
    if section is None or sub is None:
        return
    apply_section(sub, _section(load_toml(path), section), path=path, section=section)


# ---------------------------------------------------------------------------- config show
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _table(name: str, values: dict[str, Any]) -> list[str]:
    lines = [f"[{name}]"]
    for k, v in values.items():
        if v is None:
            lines.append(f"# {k} = (unset)")
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    return lines + [""]


def effective(path: str | None, stage: str | None = None) -> list[str]:
    """The effective options of every stage (or ``stage``) as TOML lines."""
    from shoal.cli import build_parser
    from shoal.engines.config import read_config_file
    from shoal.training.config import TrainConfig

    doc = load_toml(path) if path else {}
    parser = build_parser()
    out: list[str] = []
    for cmd, section in SECTIONS.items():
        if stage not in (None, section):
            continue
        sub = _subparser(parser, cmd)
        if sub is None:
            continue
        apply_section(sub, _section(doc, section), path=path or "-", section=section)
        vals = {
            d.replace("_", "-"): a.default
            for d, a in _options(sub).items()
            if a.default is not argparse.SUPPRESS
        }
        out += _table(section, vals)
    if stage in (None, "train", "link"):
        tc = read_config_file(path) if path else TrainConfig()
        if stage != "link":  # flat option names: the file reads back the same
            out += _table("train", tc.flat())
        if stage != "train":
            out += _table("link", dict(vars(tc.link)))
    return out


def _cmd_show(args: argparse.Namespace) -> int:
    print("\n".join(effective(args.config_file, args.stage)).rstrip())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    c = subparsers.add_parser(
        "config",
        help="print the effective options of every stage (defaults + a TOML file)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    csub = c.add_subparsers(dest="config_command", metavar="COMMAND")
    c.set_defaults(func=lambda a: (c.print_help(), 2)[1])
    s = csub.add_parser("show", help="print the effective configuration as TOML")
    s.add_argument(
        "--file",
        dest="config_file",
        metavar="FILE",
        help="the TOML file to apply (also accepted as --config FILE)",
    )
    stages = sorted({*SECTIONS.values(), "train", "link"})
    s.add_argument("--stage", choices=stages, help="only this stage's section")
    s.set_defaults(func=_cmd_show)
