"""Weight-only int8 and int4 (models/quantize.py): the rounding, the compiled decoder's
quantized linears, and the guarantees that must survive them: bitwise shape invariance,
greedy identity, exact law."""
from __future__ import annotations

import ctypes
import json

import pytest
import torch

from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import default_draft, default_target
from specdec.errors import ConfigError
from specdec.models.linear import KERNELS
from specdec.models.loader import load_model
from specdec.models.native import load
from specdec.models.quantize import (INT4_GROUP, ROUND, dequantize, int4_groupwise, int8_per_channel,
                                     quantize, quantized_weight, unpack_int4)
from tests.conftest import make_model, perturbed, random_prompts
from tests.engine.test_invariance import test_forward_is_bitwise_shape_invariant as invariance_grid
from tests.proposers import test_exact_law as law

P = ctypes.c_void_p


def _native_lib():
    lib = load()
    if lib is None:
        pytest.skip("no C compiler: the native decoder is unavailable")
    return lib


def test_rounding_is_per_channel_symmetric_and_recoverable():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(40, 24, generator=g) * torch.logspace(-3, 1, 40)[:, None]   # rows of any scale
    w[7] = 0.0
    q, s = int8_per_channel(w)
    assert q.dtype == torch.int8 and q.abs().max() == 127 and s[7] == 1.0 and not q[7].any()
    assert ((q.float() * s[:, None] - w).abs() <= s[:, None] / 2 * (1 + 1e-6)).all()


def test_int4_rounding_is_q4_0s_groupwise_rule_and_recoverable():
    """Groups of 32 inputs, s = (the group's largest-|w| weight) / -8, q in -8..7 two a byte
    (low nibble first): that weight is exactly -8 s, every other within |s|/2 but those past
    7.5 s, clamped to 7 s (within |s|); a zero group gets s = 1."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 96, generator=g) * torch.logspace(-3, 1, 6)[:, None]
    w[2, 32:64] = 0.0
    w[4, 5] = 50.0                                                # a positive extreme: s < 0
    q, s = int4_groupwise(w)
    assert q.dtype == torch.uint8 and q.shape == (6, 48) and s.shape == (6, 96 // INT4_GROUP)
    full = unpack_int4(q)
    assert full.min() >= -8 and full.max() <= 7 and s[2, 1] == 1.0 and not full[2, 32:64].any()
    assert full[4, 5] == -8 and s[4, 0] == -50.0 / 8
    assert torch.equal(full[:, 0::2], ((q & 15).to(torch.int8) ^ 8) - 8)            # low nibble: even inputs
    err = (dequantize(q, s) - w).abs().view(6, -1, INT4_GROUP)
    ratio = (w.view(6, -1, INT4_GROUP) / s[..., None])                 # where w lies, in steps of s
    tol = torch.where(ratio <= 7.5, 0.5, 1.0) * s.abs()[..., None] * (1 + 1e-6)    # past 7.5: clamped to 7
    assert (err <= tol).all() and (ratio > 7.5).any()


@pytest.mark.parametrize("weights,storage", [("int8", torch.int8), ("int4", torch.uint8)])
def test_a_quantized_model_stores_its_type_and_keeps_its_embedding(weights, storage):
    """int8: 1 byte a weight plus a scale per row; int4: half a byte plus a scale per group;
    in the state dict. A tied embedding is untied and keeps its fp32 rows; the eager forward
    uses the dequantized weight."""
    model = make_model(0, prepare=False, tie_word_embeddings=True)
    embed = model.model.embed_tokens.weight.detach().clone()
    head = model.lm_head.weight.detach().clone()
    quantize(model, weights)
    sd = model.state_dict()
    assert sd["lm_head.weight"].dtype == storage and "lm_head.weight_scale" in sd
    assert sd["model.layers.0.mlp.down_proj.weight"].dtype == storage and model.weight_dtype == weights
    assert torch.equal(model.model.embed_tokens.weight, embed)
    q, s = quantized_weight(model.lm_head)
    want_q, want_s = ROUND[weights](head)
    assert torch.equal(q, want_q) and torch.equal(s, want_s)
    assert torch.equal(model.lm_head.dense_weight(), dequantize(q, s))
    with pytest.raises(ConfigError, match="already"):
        quantize(model, {"int8": "int4", "int4": "int8"}[weights])


def test_int4_needs_whole_groups_of_inputs():
    """An intermediate size of 80 is not whole groups of 32: refused by name, before rounding."""
    with pytest.raises(ConfigError, match="intermediate_size is 80"):
        quantize(make_model(0, prepare=False, intermediate_size=80), "int4")


def test_an_unknown_weight_type_is_refused():
    with pytest.raises(ConfigError, match="int8"):
        quantize(make_model(0, prepare=False), "int4x")


def _pack(lib, weights, w):
    """w (N, K) -> (its rounding, the packed panels, the scales the kernel reads)."""
    N, K = w.shape
    q, s = ROUND[weights](w)
    if weights == "int8":
        packed = torch.empty(lib.sd_packed_floats(N, K), dtype=torch.int8)
        lib.sd_pack_i8(P(q.data_ptr()), N, K, P(packed.data_ptr()))
        return (q, s), packed, s
    packed = torch.empty(lib.sd_packed_floats(N, K) // 2, dtype=torch.uint8)
    groups = torch.empty(lib.sd_packed_groups(N, K))
    lib.sd_pack_i4(P(q.data_ptr()), P(s.data_ptr()), N, K, P(packed.data_ptr()), P(groups.data_ptr()))
    return (q, s), packed, groups


@pytest.mark.parametrize("weights", ["int8", "int4"])
@pytest.mark.parametrize("K,N", [(64, 96), (512, 1000)])
def test_native_quantized_linear_is_row_invariant_and_right(weights, K, N):
    """y = x @ dequant(q)^T, each row bit-identical whatever rows share the call (1..17)."""
    lib = _native_lib()
    g = torch.Generator().manual_seed(1)
    (q, s), packed, scales = _pack(lib, weights, torch.randn(N, K, generator=g))
    x = torch.randn(17, K, generator=g)
    fn = lib.sd_linear_i8 if weights == "int8" else lib.sd_linear_i4

    def run(rows):
        y = torch.empty(rows.shape[0], N)
        fn(P(rows.data_ptr()), rows.shape[0], K, P(packed.data_ptr()), P(scales.data_ptr()), N, P(y.data_ptr()), 2)
        return y
    alone = torch.cat([run(x[i:i + 1].contiguous()) for i in range(17)])
    ref = x.double() @ dequantize(q, s).double().T
    assert torch.allclose(alone.double(), ref, rtol=1e-5, atol=1e-4)
    for m in (2, 3, 4, 5, 7, 9, 13, 17):
        assert torch.equal(run(x[:m].contiguous()), alone[:m]), m


def _native_quantized(weights, seed=0, **kw):
    model = make_model(seed, prepare=False, **kw)
    quantize(model, weights)
    model.prepare(KERNELS["native"]())
    assert model.runner.native is not None and model.runner.native.weights == weights
    return model


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_the_compiled_decoder_runs_quantized_weights_as_the_eager_path_does(weights):
    """Native logits against the eager forward of the same rounded weights."""
    _native_lib()
    model = _native_quantized(weights)
    toks = torch.randint(2, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(12).expand(2, 12)
    with torch.inference_mode():
        native = model(toks, pos, model.new_cache(2, 64))
        eager = model.eager(toks, pos, model.new_cache(2, 64))
    assert torch.allclose(native, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_a_quantized_forward_is_bitwise_shape_invariant(monkeypatch, weights):
    """The fp32 invariance grid (batches to 16, chunks to 17, ragged rows), on quantized weights."""
    import tests.engine.test_invariance as grid
    monkeypatch.setattr(grid, "_model", lambda name, kernel: _native_quantized(weights))
    _native_lib()
    invariance_grid("tiny", "native")


@pytest.fixture(scope="module", params=["int8", "int4"])
def bundled_quantized(request):
    _native_lib()
    target = load_model(default_target(), weights=request.param)
    draft = load_model(default_draft(), exact=False, weights=request.param)
    assert target.runner.native.weights == draft.runner.native.weights == request.param
    return target, draft


def test_greedy_speculation_is_identical_to_plain_on_the_bundled_quantized_pair(bundled_quantized):
    target, draft = bundled_quantized
    # 100 prompts x 12 tokens, 1,200 verified positions per dtype (the 200-prompt identity runs on
    # the fp32 tiny pair in tests/engine/test_exactness.py); 200 here took 16 s a dtype on a 2-core Zen 3
    prompts = random_prompts(100, seed=4, vocab=target.config.vocab_size)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)

    def run(spec, d=None):
        eng = make_engine(Models(target, None, d), spec, EngineConfig(max_batch=16, max_model_len=128))
        return [s.output_ids for s in eng.generate(prompts, params)], eng.metrics
    plain, _ = run(SpecConfig(method="none", k=0))
    spec, m = run(SpecConfig(method="draft", k=4), draft)
    assert spec == plain
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_speculative_sampling_follows_the_exact_law(weights):
    """The exact-law chi^2 test, with the target and the draft both quantized: the law is the
    quantized target's own, enumerated from its forwards."""
    target = make_model(3, std=0.5, vocab=law.V, prepare=False)
    draft = perturbed(target, 1.0)
    for m in (target, draft):
        quantize(m, weights)
        m.prepare(KERNELS["native"]())
    pair = (target, draft)
    assert law.p_value(law.sampled(pair, "draft"), law.exact_law(target)) > law.P_MIN


@pytest.mark.parametrize("weights,draft_weights", [("int8", "float32"), ("int4", "int8")])
def test_the_command_line_decodes_quantized_and_speculation_keeps_its_text(capsys, tiny_dirs, weights,
                                                                           draft_weights):
    """--dtype for the target, another --draft-dtype for the draft: the greedy text equals
    the quantized target's plain text."""
    from specdec.cli import main
    t, d = tiny_dirs
    base = ["generate", "--target", str(t), "--prompt", "def f(x):", "--max-new-tokens", "12", "--ignore-eos",
            "--json", "--dtype", weights]
    outs = []
    for extra in ([], ["--draft", str(d), "--draft-dtype", draft_weights, "--k", "3"]):
        assert main(base + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[1]["token_ids"] == outs[0]["token_ids"] and outs[1]["stats"]["drafts"] > 0


def test_an_unknown_dtype_is_refused_before_loading(tiny_dirs):
    from specdec import LLM
    with pytest.raises(ConfigError, match="float32, int8, int4"):
        LLM(*tiny_dirs, dtype="int2")


@pytest.mark.parametrize("weights,other", [("int8", "int4"), ("int4", "int8")])
def test_a_quantized_folder_loads_as_the_rounding_at_load_does(tiny_dirs, tmp_path, capsys, weights, other):
    """`specdec quantize` writes quantized weights and their scales; loading the folder gives
    the same model, bit for bit, as rounding the original at load; it refuses float32 and
    the other type."""
    from specdec.cli import main
    t, _ = tiny_dirs
    out = tmp_path / weights
    assert main(["quantize", "--model", str(t), "--out", str(out), "--dtype", weights]) == 0
    assert f"{weights} weights" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["quantization_config"]["quant_method"] == f"specdec-{weights}"
    a, b = load_model(t, weights=weights), load_model(out)
    assert b.weight_dtype == weights
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    toks = torch.randint(2, a.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(5))
    pos = torch.arange(9)[None]
    with torch.inference_mode():
        assert torch.equal(a(toks, pos, a.new_cache(1, 16)), b(toks, pos, b.new_cache(1, 16)))
    for wrong in ("float32", other):
        with pytest.raises(ConfigError, match=f"stores {weights}"):
            load_model(out, weights=wrong)
    assert main(["quantize", "--model", str(t), "--out", str(out)]) == 2           # not empty: refused
    assert "not an empty directory" in capsys.readouterr().err
