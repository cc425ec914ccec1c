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
    if name == "onednn" and not linear._onednn_available(torch.device("cpu")):
        pytest.skip("oneDNN unavailable on this CPU")      # anything else that fails is a failure
    model = make_model(prepare=False).prepare(kernel)
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
    expected = "native" if linear._native_available(torch.device("cpu")) else "onednn"
    assert kernel.row_invariant and kernel.name == expected


def test_without_the_native_decoder_a_target_gets_onednn(unpinned):
    if not linear._onednn_available(torch.device("cpu")):
        pytest.skip("oneDNN unavailable: stock is the only kernel")
    unpinned.setattr(linear, "_native_available", lambda device: False)
    unpinned.setattr(linear, "_time", lambda fn, reps=20: pytest.fail("an exact choice is not timed"))
    assert linear.choose_kernel("cpu", 64, 128, exact=True).name == "onednn"


def test_the_native_decoder_serves_targets_and_drafts(unpinned):
    if not linear._native_available(torch.device("cpu")):
        pytest.skip("no C compiler: the native decoder is unavailable")
    unpinned.setattr(linear, "_time", lambda fn, reps=20: pytest.fail("the native choice is not timed"))
    for exact in (True, False):
        assert linear.choose_kernel("cpu", 64, 128, exact=exact).name == "native"


@pytest.mark.parametrize("timings,expected", [((1.0, 1.0, 5.0, 5.0), "stock"), ((5.0, 5.0, 1.0, 1.0), "onednn")])
def test_a_draft_gets_the_faster_kernel(unpinned, timings, expected):
    if not linear._onednn_available(torch.device("cpu")):
        pytest.skip("oneDNN unavailable: stock is the only kernel")
    unpinned.setattr(linear, "_native_available", lambda device: False)
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


def test_shapes_the_native_decoder_cannot_run_fall_back_to_a_row_invariant_kernel():
    if not linear._native_available(torch.device("cpu")):
        pytest.skip("no C compiler: the native decoder is unavailable")
    model = make_model(prepare=False, hidden_size=72, intermediate_size=120).prepare(KERNELS["native"]())
    assert model.runner.native is None and model.kernel.name in ("onednn", "stock")
    with torch.inference_mode():
        assert model(torch.tensor([[3, 5]]), torch.arange(2)[None], model.new_cache(1, 64)).shape == (1, 2, 8192)


def test_the_native_decoder_refuses_out_of_range_positions_and_tokens():
    model = make_model(prepare=False).prepare(KERNELS["native"]())
    if model.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    cache = model.new_cache(1, 64)
    with torch.inference_mode(), pytest.raises(ValueError, match="position"):
        model(torch.tensor([[3]]), torch.tensor([[64]]), cache)
    with torch.inference_mode(), pytest.raises(ValueError, match="token id"):
        model(torch.tensor([[8192]]), torch.tensor([[0]]), cache)
    with torch.inference_mode(), pytest.raises(ValueError, match="rows"):
        model(torch.tensor([[3], [4]]), torch.tensor([[0], [0]]), cache)


def test_no_compile_runs_eager_and_compile_refuses_what_it_cannot_run(tmp_path):
    from specdec.defaults import default_draft
    from specdec.errors import ConfigError
    from specdec.models.loader import load_model, save_checkpoint
    from tests.conftest import TOKENIZER
    eager = load_model(default_draft(), compile=False)
    assert eager.runner.native is None and eager.kernel.name != "native"
    odd = make_model(prepare=False, hidden_size=72, intermediate_size=120)
    save_checkpoint(odd, TOKENIZER, tmp_path / "odd")
    with pytest.raises(ConfigError, match="native decoder cannot run"):
        load_model(tmp_path / "odd", compile=True)
    if linear._native_available(torch.device("cpu")):
        assert load_model(default_draft(), compile=True).runner.native is not None


@pytest.mark.parametrize("kw", [dict(vocab=8190), dict(attention_bias=True), dict(num_key_value_heads=4)])
def test_the_native_decoder_matches_eager_pytorch(kw):
    """Odd output sizes (a partial last panel), q/k/v biases (Qwen2) and no GQA: the compiled
    decoder's logits agree with the eager oneDNN forward, and stay shape-invariant."""
    native = make_model(prepare=False, seed=2, std=0.1, **kw).prepare(KERNELS["native"]())
    if native.runner.native is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    if kw.get("attention_bias"):
        with torch.no_grad():
            for layer in native.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.5)
        native.prepare(KERNELS["native"]())
    eager = LlamaModel(native.config)
    eager.load_state_dict(native.state_dict())
    eager.prepare(linear.fallback_kernel(torch.device("cpu")))
    tokens = torch.randint(2, native.config.vocab_size, (2, 30))
    pos = torch.arange(30).expand(2, 30)
    with torch.inference_mode():
        a = native(tokens, pos, native.new_cache(2, 64))
        b = eager(tokens, pos, eager.new_cache(2, 64))
        c = native.new_cache(2, 64)
        steps = [native(tokens[:, i:i + 1], pos[:, i:i + 1], c) for i in range(30)]
        c1 = native.new_cache(1, 64)                    # one row, one position: the M = 1 tile
        solo = [native(tokens[1:, i:i + 1], pos[1:, i:i + 1], c1) for i in range(30)]
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    assert torch.equal(torch.cat(steps, 1), a)
    assert torch.equal(torch.cat(solo, 1)[0], a[1])
