"""The engine registry: a new engine is one folder plus one registration line.

``tests/engines/fixture_engine/`` is an engine written outside ``shoal/engines`` (its spec,
configuration, flag and step); registered through ``SHOAL_ENGINES`` it trains through
``shoal train --engine trivial`` with its own flag, on one and on two processes, and nothing
else in shoal names it. Its spec is the whole truth about it: its configuration class, what it
supports (the new fields' defaults: node classification, untyped stores, every device, factory
models) and what is refused, in one place (``get_engine``), naming the engines that can.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.engines.config import read_config
from shoal.engines.registry import ENGINES, engine_names, get_engine, get_spec, supporting
from shoal.engines.spec import EngineSpec
from shoal.errors import ShoalInputError
from tests.engines.conftest import community_graph
from tests.engines.fixture_engine import SPEC as TRIVIAL

REPO = Path(__file__).resolve().parents[2]
REGISTER = "trivial=tests.engines.fixture_engine:SPEC"
#: the fixture engine as one computing on the CPU only (registered in a test)
CPU_ONLY = dataclasses.replace(TRIVIAL, name="cpuonly", devices=("cpu",))
#: the fixture engine with every support field at its default (node task, untyped stores)
NODE_ONLY = EngineSpec(name="nodeonly", summary="x", engine=TRIVIAL.engine, config=TRIVIAL.config)
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
    out = tmp_path / "run.json"
    p = _shoal(
        "train",
        "--store",
        store,
        "--engine",
        "trivial",
        "--trivial-lr-scale",
        "0.25",
        "--nproc",
        "2",
        "--no-progress",
        "--json",
        str(out),
        *ARGS,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["engine"] == "trivial" and r["world_size"] == 2
    assert r["config"]["trivial_lr_scale"] == 0.25  # the engine's settings()
    assert r["config"]["engine"] == {
        "name": "trivial",
        "nproc": 2,
        "plan": None,
        "dist_timeout": 300.0,
        "max_restarts": 0,
        "trivial_lr_scale": 0.25,
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


def test_the_spec_holds_the_config_and_the_support_flags(monkeypatch):
    from shoal.engines.minibatch.config import MinibatchConfig
    from shoal.training import TrainConfig
    from tests.engines.fixture_engine.config import TrivialConfig
    from tests.engines.fixture_engine.engine import TrivialEngine

    monkeypatch.setenv("SHOAL_ENGINES", REGISTER)
    spec = get_spec("trivial")  # the fixture's spec: both tasks, typed stores, else defaults
    assert (spec.tasks, spec.typed, spec.factory_models) == (("node", "link"), True, True)
    assert (spec.devices, spec.report_fields, spec.demo) == (("cpu", "cuda"), (), None)
    assert TrivialEngine.spec() is spec
    assert (NODE_ONLY.tasks, NODE_ONLY.typed, NODE_ONLY.factory_models) == (("node",), False, True)
    assert isinstance(TrivialEngine.options_of(TrainConfig()), TrivialConfig)  # spec.config
    assert get_engine("minibatch").spec().config is MinibatchConfig
    for name in engine_names():  # no second copy of the spec on the classes
        cls = get_engine(name)
        assert cls.spec() is get_spec(name)
        attrs = ("options_class", "accepts_factory_models", "reads_typed", "typed_engine")
        assert not any(hasattr(cls, a) for a in attrs)
    with pytest.raises(ValueError, match="tasks must be"):
        EngineSpec(name="x", summary="x", engine="m:C", tasks=("graph",))


def test_refusals_come_from_the_spec_and_name_the_engines_that_can(monkeypatch):
    own = "tests.engines.test_registry"
    monkeypatch.setenv(
        "SHOAL_ENGINES", f"{REGISTER},cpuonly={own}:CPU_ONLY,nodeonly={own}:NODE_ONLY"
    )
    typed = supporting(typed=True)
    assert "nodeonly" not in typed and "trivial" in typed
    assert set(typed) == {n for n in engine_names() if get_spec(n).typed}
    with pytest.raises(ShoalInputError, match="nodeonly engine does not train a typed") as e:
        get_engine("nodeonly", typed=True)
    assert f"--engine {' or '.join(typed)} (node classification)" in e.value.fix
    links = supporting("link")
    assert links == [n for n in engine_names() if "link" in get_spec(n).tasks]
    with pytest.raises(ShoalInputError, match="does not support --task link") as e:
        get_engine("nodeonly", "link")
    assert f"--engine {' or '.join(links)}," in e.value.fix
    own = [n for n in engine_names() if not get_spec(n).factory_models]
    for name in own:
        with pytest.raises(ShoalInputError, match="cannot run a --model-factory model") as e:
            get_engine(name, factory=True)
        assert e.value.fix.endswith(", ".join(supporting(factory=True)))
    assert "trivial" in supporting(factory=True) and not set(own) & set(supporting(factory=True))
    assert get_engine("cpuonly", device="cpu") is get_engine("trivial")
    with pytest.raises(ShoalInputError, match="does not compute on --device cuda:1") as e:
        get_engine("cpuonly", device="cuda:1")
    assert "cpuonly" not in e.value.fix and "--engine minibatch or" in e.value.fix
