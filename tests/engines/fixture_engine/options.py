"""The trivial engine's flag."""

from __future__ import annotations

import argparse


def add_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--trivial-lr-scale", type=float, metavar="F", help="factor on --lr (default 1)")
