import argparse

import pytest

from shoal.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


def test_every_command_has_help(capsys):
    cmds = list(_commands(build_parser()))
    assert cmds, "no sub-commands registered"
    for path, sub in cmds:
        assert sub.description or sub.format_usage(), path
        with pytest.raises(SystemExit) as e:
            main([*path, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "usage: shoal" in out, path


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: shoal" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert "shoal" in capsys.readouterr().out
