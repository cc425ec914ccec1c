"""Prepared linears: a kernel's packed weight is derived data, never model state."""
from __future__ import annotations

import pytest
import torch

from specdec.models.linear import KERNELS
from specdec.models.llama import LlamaModel

from tests.conftest import make_model


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_prepared_model_keeps_its_state_dict_and_loads_into_a_fresh_one(name):
    kernel = KERNELS[name]()
    try:
        model = make_model(prepare=False).prepare(kernel)
    except RuntimeError:                       # oneDNN missing on this CPU
        pytest.skip(f"{name} unavailable")
    keys = set(model.state_dict())
    assert not any(k.endswith(".packed") for k in keys)
    assert keys == set(make_model(prepare=False).state_dict())
    fresh = LlamaModel(model.config)
    fresh.load_state_dict(model.state_dict())      # strict: what a checkpoint round trip needs
    model.prepare(kernel)                          # preparing twice is fine too
    x = torch.tensor([[3, 5, 7]])
    pos = torch.arange(3)[None]
    with torch.inference_mode():
        assert torch.allclose(model(x, pos), fresh.eval()(x, pos), atol=1e-4)
