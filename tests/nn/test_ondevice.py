"""Models on a device behind host calls (on_device / HostCalls), and the device-side mean."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.graph import full_graph_block
from shoal.nn import build_model
from shoal.nn.base import mean_aggregate, mean_by_counts
from shoal.nn.ondevice import HostCalls, on_device
from shoal.training import TrainData, layerwise_inference

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


def _graph(make_graph, n=40, m=160, seed=0):
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, (m, 2))
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = rng.integers(0, 3, n)
    return TrainData.from_graph_dir(
        make_graph(
            e, n, x=x, y=y, train=np.arange(10), val=np.arange(10, 20), test=np.arange(20, 30)
        )
    )


def test_mean_by_counts_equals_the_cpu_mean_with_an_isolated_target():
    # targets 0..3; target 2 has no in-edge; target 3 has a duplicated edge
    indptr = np.array([0, 2, 3, 3, 5])
    indices = np.array([1, 3, 0, 1, 1])
    blk = full_graph_block(indptr, indices)
    x = torch.randn(4, 3, requires_grad=True)
    ref = mean_aggregate(x, blk)
    got = mean_by_counts(x, full_graph_block(indptr, indices))
    assert torch.allclose(got, ref, atol=1e-6)
    assert torch.equal(got[2], torch.zeros(3))
    assert torch.allclose(got[3], x[1].detach(), atol=1e-6)
    g1 = torch.autograd.grad(ref.sum(), x)[0]
    g2 = torch.autograd.grad(mean_by_counts(x, blk).sum(), x)[0]
    assert torch.allclose(g1, g2, atol=1e-6)


def test_on_device_is_the_model_itself_on_the_cpu():
    m = build_model("sage", in_dim=4, hidden=8, out_dim=2, num_layers=2, dropout=0.0)
    assert on_device(m, "cpu") is m


def test_host_calls_expose_only_what_the_model_has():
    class Plain(torch.nn.Module):
        num_layers = 2

        def forward(self, x, blocks):
            return x

    w = HostCalls(Plain(), torch.device("cpu"))
    assert not hasattr(w, "layer_forward") and not hasattr(w, "sum_layer")
    assert w.num_layers == 2
    sage = HostCalls(
        build_model("sage", in_dim=4, hidden=8, out_dim=2, num_layers=2, dropout=0.0), "cpu"
    )
    assert hasattr(sage, "layer_forward") and hasattr(sage, "sum_layer")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_layerwise_inference_through_host_calls_equals_the_bare_model(make_graph, name, device):
    """Every path of the inference (sum layers blocked by range, GAT batched) through the
    wrapper gives the bare CPU model's outputs (on a GPU: to float tolerance)."""
    data = _graph(make_graph)
    torch.manual_seed(0)
    model = build_model(name, in_dim=6, hidden=8, out_dim=3, num_layers=2, dropout=0.0)
    nodes = np.arange(data.num_nodes)
    ref = layerwise_inference(model, data, nodes, batch_size=7)
    moved = build_model(name, in_dim=6, hidden=8, out_dim=3, num_layers=2, dropout=0.0)
    moved.load_state_dict(model.state_dict())
    moved = moved.to(device)
    got = layerwise_inference(HostCalls(moved, torch.device(device)), data, nodes, batch_size=7)
    tol = 1e-6 if device == "cpu" else 1e-4
    np.testing.assert_allclose(got, ref, atol=tol, rtol=tol)


def test_dropout_takes_torchs_path_off_the_cpu():
    """The numba masks read host memory; a tensor elsewhere (here torch's meta device, which
    has no memory at all) must go through torch's own dropout."""
    from shoal.nn.dropout import dropout, relu_dropout

    x = torch.ones(8, 4, device="meta")
    assert dropout(x, 0.5, True).device.type == "meta"
    assert relu_dropout(x, 0.5, True).device.type == "meta"


def test_host_calls_start_in_the_models_mode():
    m = build_model("sage", in_dim=4, hidden=8, out_dim=2, num_layers=2, dropout=0.0).eval()
    assert HostCalls(m, torch.device("cpu")).training is False
