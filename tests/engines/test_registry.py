"""The engine registry: a new engine is one folder plus one registration line.

``tests/engines/fixture_engine/`` is an engine written outside ``shoal/engines`` (its spec,
configuration, flag and step); registered through ``SHOAL_ENGINES`` it trains through
``shoal train --engine trivial`` with its own flag, on one and on two processes, and nothing
else in shoal names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.engines.config import read_config
from shoal.engines.registry import ENGINES, engine_names, get_engine, get_spec
from shoal.errors import ShoalInputError
from tests.engines.conftest import community_graph

REPO = Path(__file__).resolve().parents[2]
REGISTER = "trivial=tests.engines.fixture_engine:SPEC"
ARGS = ["--fanouts", "3,3", "--hidden", "8", "--batch-size", "4", "--epochs", "2", "--lr", "0.05"]


def _shoal(*args: str, register: bool = True) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("SHOAL_ENGINES", None)
    if register:
        env["SHOAL_ENGINES"] = REGISTER
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def test_every_builtin_engine_is_a_folder_with_its_spec():
    src = REPO / "src" / "shoal" / "engines"
    for name in ENGINES:
        spec = get_spec(name)
        assert (src / name / "__init__.py").exists() and spec.name == name
        assert get_engine(name).name == name
    assert not (src / "hec.py").exists() and not (src / "linkmb.py").exists()


def test_unknown_engine_lists_the_valid_names(monkeypatch):
    monkeypatch.delenv("SHOAL_ENGINES", raising=False)
    with pytest.raises(ShoalInputError) as e:
        get_spec("nope")
    assert all(n in e.value.fix for n in ENGINES)
    monkeypatch.setenv("SHOAL_ENGINES", "broken")
    with pytest.raises(ShoalInputError, match="SHOAL_ENGINES"):
        engine_names()


def test_one_line_registers_the_fixture_engine_and_its_options(monkeypatch):
    monkeypatch.setenv("SHOAL_ENGINES", REGISTER)
    assert "trivial" in engine_names()
    c = read_config({"engine": "trivial", "trivial_lr_scale": 0.5, "nproc": 2}, origin="test")
    assert (c.engine.name, c.engine.trivial_lr_scale, c.engine.nproc) == ("trivial", 0.5, 2)
    with pytest.raises(ShoalInputError, match="trivial engine"):
        read_config({"engine": "hec", "trivial_lr_scale": 0.5})
    monkeypatch.delenv("SHOAL_ENGINES")
    assert "trivial" not in engine_names()


def test_the_fixture_engine_trains_through_shoal_train_with_its_own_flag(
    tmp_path, make_graph, make_store
):
    store = str(make_store(parts=2, graph=community_graph(make_graph)))
    assert "--trivial-lr-scale" in _shoal("train", "--help").stdout
    assert "--trivial-lr-scale" not in _shoal("train", "--help", register=False).stdout
    runs = {}
    for nproc, scale in (("1", "1"), ("2", "0.25")):
        out = tmp_path / f"run{nproc}.json"
        p = _shoal(
            "train",
            "--store",
            store,
            "--engine",
            "trivial",
            "--trivial-lr-scale",
            scale,
            "--nproc",
            nproc,
            "--no-progress",
            "--json",
            str(out),
            *ARGS,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        runs[nproc] = json.loads(out.read_text())
    for nproc, scale in (("1", 1.0), ("2", 0.25)):
        r = runs[nproc]
        assert r["engine"] == "trivial" and r["world_size"] == int(nproc)
        assert r["config"]["trivial_lr_scale"] == scale  # the engine's settings()
        assert r["config"]["engine"] == {
            "name": "trivial",
            "nproc": int(nproc),
            "plan": None,
            "dist_timeout": 300.0,
            "max_restarts": 0,
            "trivial_lr_scale": scale,
        }
    bad = _shoal("train", "--store", store, "--engine", "trivial", "--trivial-lr-scale", "0", *ARGS)
    assert bad.returncode == 2 and "trivial_lr_scale must be > 0" in bad.stderr


def test_auto_keeps_the_engine_options_given_until_the_engine_is_chosen():
    from shoal.engines.config import AutoConfig, resolve_auto
    from shoal.engines.hec.config import HecConfig

    c = read_config({"engine": "auto", "hec_size": 7, "nproc": 2, "lr": 0.1})
    assert isinstance(c.engine, AutoConfig) and c.engine.given == {"hec_size": 7}
    assert read_config(c.to_dict()).to_dict() == c.to_dict()  # a launch spec's round trip
    hec = resolve_auto(c, "hec")
    assert isinstance(hec.engine, HecConfig) and (hec.engine.hec_size, hec.engine.nproc) == (7, 2)
    mb = resolve_auto(c, "minibatch")
    assert mb.engine.name == "minibatch" and mb.engine.nproc == 2 and mb.optim.lr == 0.1
    with pytest.raises(ShoalInputError, match="unknown option 'no_such_option'"):
        read_config({"engine": "auto", "no_such_option": 1})
