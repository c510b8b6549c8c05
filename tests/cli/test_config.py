"""One TOML file for every stage (``--config``) and ``shoal config show``."""

from __future__ import annotations

import json

import numpy as np

from shoal.partition.io import read_assignment
from shoal.store import Store

TOML = """
[partition]
algo = "spring"
parts = 3
option = { representative = "richest" }

[store]
halo-features = true

[train]
model = "gcn"
fanouts = [10, 5]

[link]
scorer = "mlp"
"""


def _graph(make_graph):
    rng = np.random.default_rng(0)
    e = rng.integers(0, 40, (120, 2))
    return make_graph(
        np.concatenate([e, e[:, ::-1]]),
        40,
        directed=False,
        train=range(10),
        x=rng.normal(size=(40, 3)),
        y=np.arange(40) % 2,
    )


def test_stage_sections_fill_options_and_flags_win(make_graph, run_cli, tmp_path):
    g = _graph(make_graph)
    cfg = tmp_path / "c.toml"
    cfg.write_text(TOML)
    out, js = tmp_path / "a", tmp_path / "m.json"
    # --parts is required on the command line, but the file gives it
    code, _, err = run_cli("partition", g.path, "--config", cfg, "--out", out, "--json", js)
    assert code == 0, err
    m = json.loads(js.read_text())
    assert m["algorithm"] == "spring" and m["num_parts"] == 3
    meta = json.loads((out / "meta.json").read_text())
    assert meta["params"]["representative"] == "richest"  # the table became --option pairs
    assert read_assignment(out)[0].num_parts == 3
    code, _, err = run_cli(
        "--config", cfg, "partition", g.path, "--parts", 2, "--out", tmp_path / "b", "--json", js
    )
    assert code == 0, err
    assert json.loads(js.read_text())["num_parts"] == 2  # the flag wins over the file
    code, _, err = run_cli("store", "build", g.path, out, "--out", tmp_path / "s", "--config", cfg)
    assert code == 0, err
    assert Store.open(tmp_path / "s").halo_features  # [store] halo-features = true


def test_unknown_key_exits_2_naming_section_and_valid_keys(make_graph, run_cli, tmp_path):
    g = _graph(make_graph)
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[partition]\nparts = 2\nalgorithm = 'spring'\n")
    code, _, err = run_cli("partition", g.path, "--config", cfg)
    assert code == 2 and "[partition]" in err and "'algorithm'" in err and "algo" in err
    assert str(cfg) in err
    code, _, err = run_cli("partition", g.path, "--parts", 2, "--config", tmp_path / "none.toml")
    assert code == 2 and "not found" in err


def test_config_show_prints_the_effective_configuration(run_cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TOML)
    code, out, err = run_cli("config", "show", "--config", cfg)
    assert code == 0, err
    sections = [line for line in out.splitlines() if line.startswith("[")]
    assert sections[:1] == ["[import]"] and {
        "[partition]",
        "[store]",
        "[train]",
        "[link]",
        "[split-edges]",
    } <= set(sections)
    train = out[out.index("[train]") : out.index("[link]")]
    assert 'model = "gcn"' in train and "fanouts = [10, 5]" in train
    assert 'scorer = "mlp"' in out[out.index("[link]") :]
    part = out[out.index("[partition]") : out.index("[store]")]
    assert 'algo = "spring"' in part and "parts = 3" in part
    assert 'option = ["representative=richest"]' in part
    code, out, _ = run_cli("config", "show", "--stage", "store")
    assert code == 0 and out.startswith("[store]") and "halo-features = false" in out
    assert "[train]" not in out
