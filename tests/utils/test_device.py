"""--device: spellings, a missing GPU is an input error naming the fix, random states."""

from __future__ import annotations

import pytest
import torch

from shoal.errors import ShoalInputError
from shoal.utils.device import check_device_spec, get_rng_states, resolve_device, set_rng_states

CUDA = torch.cuda.is_available()


@pytest.mark.parametrize("spec", ["cpu", "cuda", "cuda:0", "cuda:12"])
def test_valid_spellings(spec):
    assert check_device_spec(spec) == spec


@pytest.mark.parametrize("spec", ["gpu", "CUDA", "cuda:", "cuda:x", "cpu:0", "", "mps"])
def test_invalid_spellings_name_the_choices(spec):
    with pytest.raises(ValueError, match="'cpu', 'cuda' or 'cuda:<index>'"):
        check_device_spec(spec)


def test_cpu_resolves_to_the_cpu():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cpu", local_rank=3) == torch.device("cpu")


@pytest.mark.skipif(CUDA, reason="this machine has a GPU: the error is for machines without")
@pytest.mark.parametrize("spec", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_an_input_error(spec):
    with pytest.raises(ShoalInputError, match="torch.cuda.is_available") as e:
        resolve_device(spec)
    assert "--device cpu" in e.value.fix


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_takes_the_local_ranks_gpu():
    n = torch.cuda.device_count()
    assert resolve_device("cuda", local_rank=n + 1) == torch.device("cuda", (n + 1) % n)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(ShoalInputError, match="GPU"):
        resolve_device(f"cuda:{n}")


def test_rng_states_round_trip_on_the_cpu():
    torch.manual_seed(5)
    st = get_rng_states("cpu")
    assert set(st) == {"cpu"}
    a = torch.rand(4)
    set_rng_states(st, "cpu")
    assert torch.equal(torch.rand(4), a)
    set_rng_states(st["cpu"])  # a bare CPU state, as checkpoints before --device hold
    assert torch.equal(torch.rand(4), a)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_rng_states_carry_the_cuda_generator():
    dev = torch.device("cuda", 0)
    torch.manual_seed(5)
    st = get_rng_states(dev)
    assert set(st) == {"cpu", "cuda"}
    a = torch.rand(4, device=dev)
    set_rng_states(st, dev)
    assert torch.equal(torch.rand(4, device=dev), a)
