"""--model-factory: a PyG model runs on shoal's blocks, in the trainer and in the engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from shoal.data.importers import import_graph
from shoal.distributed import DistContext
from shoal.engines.hec.engine import HecEngine
from shoal.engines.minibatch.engine import MinibatchEngine
from shoal.errors import ShoalInputError
from shoal.nn.adapter import EdgeIndexModel
from shoal.sample.sampler import NeighborSampler
from shoal.store import Store
from shoal.training import TrainConfig, TrainData, Trainer
from tests.distributed.helpers import run_world
from tests.loader.factories import pyg_sage

CORA = Path(__file__).resolve().parents[2] / "src/shoal/data/datasets/cora/graph.npz"
FACTORY = "tests.loader.factories:pyg_sage"


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    return import_graph(CORA, tmp_path_factory.mktemp("factory") / "cora")


def test_adapter_equals_the_pyg_model_on_the_whole_graph(cora):
    torch.manual_seed(0)
    m = pyg_sage(in_dim=cora.feature_dim, hidden=16, out_dim=7, num_layers=2, dropout=0.0).eval()
    data = TrainData.from_graph_dir(cora)
    seeds = np.array([5, 100, 2000, 7])
    mb = NeighborSampler(data.indptr, data.indices, (-1, -1)).sample(seeds, 0)
    x_all = torch.from_numpy(np.asarray(cora.features()))
    with torch.no_grad():
        got = EdgeIndexModel(m)(x_all[mb.n_id], mb.blocks)
        ei = torch.from_numpy(np.asarray(cora.edge_stream().memmap()).T.copy()).long()
        want = m(x_all, ei)[torch.from_numpy(seeds)]
    assert torch.allclose(got, want, atol=1e-5)


def test_trainer_with_a_pyg_factory_learns(cora):
    tc = TrainConfig.from_options(
        model_factory=FACTORY,
        fanouts=(10, 10),
        hidden=32,
        epochs=15,
        batch_size=70,
        lr=0.01,
        threads=1,
        progress=False,
    )
    tr = Trainer(tc, TrainData.from_graph_dir(cora))
    assert isinstance(tr.model, EdgeIndexModel) and tr.model.trims
    r = tr.fit()
    assert r.test_accuracy > 0.7 and r.config["model"]["factory"] == FACTORY


def test_factory_errors(cora):
    for spec, msg in (
        ("tests.loader.factories:nope", "cannot load"),
        ("tests.loader.factories:not_a_module", "not a torch.nn.Module"),
    ):
        with pytest.raises(ShoalInputError, match=msg):
            Trainer(
                TrainConfig.from_options(model_factory=spec, progress=False),
                TrainData.from_graph_dir(cora),
            )


def _engine(rank: int, world: int, store: str, engine: str):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = TrainConfig.from_options(
        model_factory=FACTORY,
        fanouts=(3, 3),
        hidden=8,
        epochs=2,
        batch_size=4,
        lr=0.05,
        progress=False,
    )
    from shoal.engines.averaging.engine import AveragingEngine
    from shoal.engines.disagg.engine import DisaggEngine

    cls = {
        "minibatch": MinibatchEngine,
        "hec": HecEngine,
        "averaging": AveragingEngine,
        "disagg": DisaggEngine,
    }[engine]
    try:
        eng = cls(Store.open(store), tc, ctx)
    except ShoalInputError as e:
        return str(e)
    return eng.fit().to_json()["epochs"]


def test_engines_run_factory_models_or_refuse(make_store):
    store = str(make_store(parts=2))
    for engine in ("minibatch", "averaging", "disagg"):
        assert run_world(_engine, 2, store, engine, timeout=120) == [2, 2], engine
    msgs = run_world(_engine, 2, store, "hec", timeout=120)
    assert all("cannot run a --model-factory model" in m for m in msgs)


def test_cli_model_factory(cora, tmp_path, run_cli):
    out = tmp_path / "r.json"
    opts = "--fanouts 5,5 --hidden 16 --epochs 2 --threads 1 --no-progress".split()
    code, _, err = run_cli(
        "train", "--graph", cora.path, "--model-factory", FACTORY, *opts, "--json", out
    )
    assert code == 0, err
    code, _, err = run_cli("train", "--graph", cora.path, "--model-factory", "nowhere:f")
    assert code == 2 and "cannot load the model factory" in err
