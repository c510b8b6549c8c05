"""shoal demo: its steps train every engine the registry gives a demo step (each built-in
one) on the 2-process store, with the flags its spec says, and end with the report of the runs;
the demo prints a result line per run, a table and the report's files.

The demo itself trains six runs (about two minutes on two cores): here its commands are
checked with the real parser and run with a stand-in for training, the report drawn for real.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from shoal.cli import build_parser, main
from shoal.cli import demo as demo_mod
from shoal.cli.train import config_from_args
from shoal.engines.registry import ENGINES as BUILTIN
from shoal.engines.registry import get_spec
from tests.engines.fixture_engine import SPEC as TRIVIAL
from tests.report.runs import run_result, write_run

#: the fixture engine with a demo step (registered in a test)
DEMOED = dataclasses.replace(
    TRIVIAL, name="demoed", demo="an engine from outside", demo_flags=("--trivial-lr-scale", "0.5")
)


def _engines() -> list[str]:
    """The engines the demo trains: every built-in one, in the registry's order."""
    names = [name for name, _, _ in demo_mod.demo_engines()]
    assert names == list(BUILTIN)  # the demo shows every engine shoal has
    return names


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_steps_train_every_engine_on_the_store_then_report(tmp_path):
    steps = demo_mod.demo_steps(tmp_path, parts=4, epochs=50)
    engines = _engines()
    trains = [s for s in steps if s.argv[0] == "train"]
    assert [_flag(s.argv, "--engine") for s in trains if "--store" in s.argv] == engines
    for name, step in zip(engines, trains[1:], strict=True):  # each spec's step and flags
        spec = get_spec(name)
        assert step.what == f"engine {name}: {spec.demo}"
        flags = list(spec.demo_flags)
        at = step.argv.index("--json") - len(flags)
        assert step.argv[at : at + len(flags)] == flags
    assert "--graph" in trains[0].argv  # the single-process baseline first
    store = {_flag(s.argv, "--store") for s in trains[1:]}
    assert store == {str(tmp_path / "cora-store")}
    built = next(s for s in steps if s.argv[:2] == ["store", "build"])
    assert _flag(built.argv, "--out") == store.pop()
    for s in trains:
        assert s.result is not None and _flag(s.argv, "--json") == str(s.result)
        assert _flag(s.argv, "--epochs") == "50"
        if "--store" in s.argv:
            assert _flag(s.argv, "--nproc") == "2"
    *_, last = steps
    assert last.argv[0] == "report" and last.report == tmp_path / "report"
    assert last.argv[1:-2] == [str(s.result) for s in trains]
    assert last.argv[-2:] == ["--out", str(tmp_path / "report")]


def test_every_step_parses_and_the_training_settings_are_valid(tmp_path):
    for step in demo_mod.demo_steps(tmp_path):
        args = build_parser(step.argv).parse_args(step.argv)
        if step.argv[0] != "train":
            continue
        cfg = config_from_args(args)
        assert cfg.run.threads == 1 and cfg.optim.epochs == 50
        engine = getattr(args, "engine", None)
        if engine in ("hec", "disagg"):  # several steps per Cora epoch (module docstring)
            assert cfg.sampling.batch_size == 16
        if engine == "disagg":  # 2 processes: one batch worker, one compute worker
            assert cfg.engine.batch_workers == 1


def _fake_main(argv: list[str]) -> int:
    """``shoal.cli.main`` with training replaced by writing a hand-built run result."""
    if argv[0] == "train":
        engine = _flag(argv, "--engine") if "--engine" in argv else "single"
        procs = int(_flag(argv, "--nproc")) if "--nproc" in argv else 1
        write_run(Path(_flag(argv, "--json")), run_result(engine, world_size=procs, comm=True))
        return 0
    if argv[0] == "report":
        return main(argv)
    return 0  # data preparation: nothing a report needs


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="the report draws with matplotlib"
)
def test_demo_prints_a_result_line_per_engine_a_table_and_the_report(tmp_path, monkeypatch, capsys):
    import shoal.cli

    monkeypatch.setattr(shoal.cli, "main", _fake_main)
    work = tmp_path / "demo"
    assert demo_mod.run_demo(work, epochs=3) == 0
    out = capsys.readouterr().out
    line = r"^    => (\w+): 2 processes, test accuracy 0\.650, median epoch 1\.500 s$"
    lines = re.findall(line, out, flags=re.M)
    engines = _engines()
    assert lines == engines
    assert "    => single: 1 process, test accuracy 0.650" in out
    runs = len(engines) + 1
    table = out[out.index(f"shoal demo: the {runs} runs") :].splitlines()[1 : runs + 2]
    assert table[0].split() == ["engine", "processes", "test", "accuracy", "median", "epoch", "s"]
    assert [row.split()[0] for row in table[1:]] == ["single", *engines]
    report = work / "report"
    pngs = {p.name for p in report.glob("*.png")}
    assert {"loss.png", "validation.png", "time_split.png", "bytes.png"} <= pngs
    for name in ("report.md", *pngs):
        assert f"  {report / name}\n" in out
    steps = 8 + len(engines)  # 6 to prepare, the baseline, each engine, the report
    assert out.index(f"[{steps}] compare the runs") > out.index(f"=> {engines[-1]}")
    assert f"{steps} steps done" in out


def test_an_engine_registered_with_a_demo_step_is_trained_by_the_demo(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(
        "SHOAL_ENGINES",
        "trivial=tests.engines.fixture_engine:SPEC,demoed=tests.cli.test_demo:DEMOED",
    )
    names = [name for name, _, _ in demo_mod.demo_engines()]
    assert names == [*BUILTIN, "demoed"]  # the fixture has no demo step: left out
    *_, last, _report = demo_mod.demo_steps(tmp_path)
    assert last.what == "engine demoed: an engine from outside"
    assert (
        _flag(last.argv, "--engine") == "demoed" and _flag(last.argv, "--trivial-lr-scale") == "0.5"
    )
    with pytest.raises(SystemExit):
        build_parser(["demo"]).parse_args(["demo", "--help"])
    assert "disagg, demoed)" in capsys.readouterr().out.replace("\n", " ")
