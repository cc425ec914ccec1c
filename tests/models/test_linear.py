"""Prepared linears: a kernel's packed weight is derived data, never model state."""
from __future__ import annotations

import pytest
import torch

from specdec.models import linear
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


@pytest.fixture
def unpinned(monkeypatch):
    """choose_kernel as a user gets it: no SPECDEC_LINEAR, no cached choice."""
    monkeypatch.delenv("SPECDEC_LINEAR", raising=False)
    linear.choose_kernel.cache_clear()
    yield monkeypatch
    linear.choose_kernel.cache_clear()


def test_a_target_gets_the_row_invariant_kernel_whatever_the_timing(unpinned):
    if not linear._onednn_available(torch.device("cpu")):
        pytest.skip("oneDNN unavailable: stock is the only kernel")
    unpinned.setattr(linear, "_time", lambda fn, reps=20: pytest.fail("an exact choice is not timed"))
    kernel = linear.choose_kernel("cpu", 64, 128, exact=True)
    assert kernel.row_invariant and kernel.name == "onednn"


@pytest.mark.parametrize("timings,expected", [((1.0, 1.0, 5.0, 5.0), "stock"), ((5.0, 5.0, 1.0, 1.0), "onednn")])
def test_a_draft_gets_the_faster_kernel(unpinned, timings, expected):
    if not linear._onednn_available(torch.device("cpu")):
        pytest.skip("oneDNN unavailable: stock is the only kernel")
    seen = iter(timings)                     # stock at M = 1, 5, then oneDNN at M = 1, 5
    unpinned.setattr(linear, "_time", lambda fn, reps=20: (fn(), next(seen))[1])
    assert linear.choose_kernel("cpu", 64, 128, exact=False).name == expected


def test_the_environment_overrides_both_choices(unpinned):
    unpinned.setenv("SPECDEC_LINEAR", "stock")
    assert linear.choose_kernel("cpu", 64, 128, exact=True).name == "stock"
    unpinned.setenv("SPECDEC_LINEAR", "bogus")
    linear.choose_kernel.cache_clear()
    with pytest.raises(ValueError, match="SPECDEC_LINEAR"):
        linear.choose_kernel("cpu", 64, 128, exact=False)
