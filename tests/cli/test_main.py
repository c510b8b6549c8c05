import argparse
import os

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


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["--log-level", "debug", "data", "info", "X"], "debug"),
        (["data", "info", "X", "--log-level=info"], "info"),
        (["data", "info", "X", "-q"], "error"),
        (["--quiet", "data", "info", "X"], "error"),
        (["data", "-vv", "info", "X"], "debug"),
        (["data", "info", "X"], None),
        (["data", "info", "--", "-q"], None),  # after -- nothing is taken
    ],
)
def test_global_options_before_or_after_the_command(argv, level):
    from shoal.cli import global_options

    rest, got = global_options(argv)
    assert got == level
    assert rest[:2] == ["data", "info"] and "--log-level" not in " ".join(rest[:3])


def test_quiet_and_log_level_through_main(tmp_path, capsys, monkeypatch):
    import logging

    monkeypatch.delenv("SHOAL_QUIET", raising=False)
    monkeypatch.delenv("SHOAL_LOG_LEVEL", raising=False)
    assert main(["data", "info", str(tmp_path / "missing"), "--log-level", "loud"]) == 2
    assert "--log-level 'loud'" in capsys.readouterr().err
    main(["data", "info", str(tmp_path / "missing"), "--quiet"])  # exit 2: no graph there
    import os

    assert os.environ.get("SHOAL_QUIET") == "1"
    assert logging.getLogger().getEffectiveLevel() == logging.ERROR
    main(["--log-level", "debug", "data", "info", str(tmp_path / "missing")])
    assert logging.getLogger().getEffectiveLevel() == logging.DEBUG
    assert os.environ.get("SHOAL_LOG_LEVEL") == "DEBUG"
    logging.getLogger().setLevel(logging.WARNING)


def test_openmp_threads_sleep_unless_the_user_chose(monkeypatch, capsys):
    """``OMP_WAIT_POLICY`` defaults to PASSIVE for what the command starts (threads that
    sample and read ahead share the cores with the step); a value already set is kept."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    main([])
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    main([])
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    capsys.readouterr()
