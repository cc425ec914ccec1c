"""Weight-only int8 (models/quantize.py): the rounding, the compiled decoder's int8 linear, and
the guarantees that must survive it: bitwise shape invariance, greedy identity, exact law."""
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
from specdec.models.quantize import int8_per_channel, int8_weight, quantize
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


def test_a_quantized_model_stores_int8_and_keeps_its_embedding():
    """1 byte a weight plus a scale per row, in the state dict; a tied embedding is untied
    and keeps its fp32 rows; the eager forward uses q * s."""
    model = make_model(0, prepare=False, tie_word_embeddings=True)
    embed = model.model.embed_tokens.weight.detach().clone()
    head = model.lm_head.weight.detach().clone()
    quantize(model, "int8")
    sd = model.state_dict()
    assert sd["lm_head.weight"].dtype == torch.int8 and "lm_head.weight_scale" in sd
    assert sd["model.layers.0.mlp.down_proj.weight"].dtype == torch.int8
    assert torch.equal(model.model.embed_tokens.weight, embed)
    q, s = int8_weight(model.lm_head)
    assert torch.equal((q, s)[0], int8_per_channel(head)[0]) and torch.equal(s, int8_per_channel(head)[1])
    assert torch.equal(model.lm_head.dense_weight(), q.float() * s[:, None])


def test_an_unknown_weight_type_is_refused():
    with pytest.raises(ConfigError, match="int8"):
        quantize(make_model(0, prepare=False), "int4x")


@pytest.mark.parametrize("K,N", [(64, 96), (512, 1000)])
def test_native_int8_linear_is_row_invariant_and_right(K, N):
    """y = (x @ q^T) * s, each row bit-identical whatever rows share the call (1..17)."""
    lib = _native_lib()
    g = torch.Generator().manual_seed(1)
    q, s = int8_per_channel(torch.randn(N, K, generator=g))
    packed = torch.empty(lib.sd_packed_floats(N, K), dtype=torch.int8)
    lib.sd_pack_i8(P(q.data_ptr()), N, K, P(packed.data_ptr()))
    x = torch.randn(17, K, generator=g)

    def run(rows):
        y = torch.empty(rows.shape[0], N)
        lib.sd_linear_i8(P(rows.data_ptr()), rows.shape[0], K, P(packed.data_ptr()), P(s.data_ptr()), N,
                         P(y.data_ptr()), 2)
        return y
    alone = torch.cat([run(x[i:i + 1].contiguous()) for i in range(17)])
    ref = (x.double() @ q.double().T) * s.double()
    assert torch.allclose(alone.double(), ref, rtol=1e-5, atol=1e-4)
    for m in (2, 3, 4, 5, 7, 9, 13, 17):
        assert torch.equal(run(x[:m].contiguous()), alone[:m]), m


def test_the_compiled_decoder_runs_int8_weights_as_the_eager_path_does():
    """Native int8 logits against the eager forward of the same rounded weights."""
    _native_lib()
    model = make_model(0, prepare=False)
    quantize(model, "int8")
    model.prepare(KERNELS["native"]())
    assert model.native is not None and model.native.int8
    toks = torch.randint(2, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(12).expand(2, 12)
    with torch.inference_mode():
        native = model(toks, pos, model.new_cache(2, 64))
        eager = model.eager(toks, pos, model.new_cache(2, 64))
    assert torch.allclose(native, eager, rtol=1e-4, atol=1e-4)


def test_an_int8_forward_is_bitwise_shape_invariant(monkeypatch):
    """The fp32 invariance grid (batches to 16, chunks to 17, ragged rows), on int8 weights."""
    import tests.engine.test_invariance as grid

    def int8_model(name, kernel):
        model = make_model(0, prepare=False)
        quantize(model, "int8")
        model.prepare(KERNELS[kernel]())
        assert model.native is not None and model.native.int8
        return model
    monkeypatch.setattr(grid, "_model", int8_model)
    _native_lib()
    invariance_grid("tiny", "native")


@pytest.fixture(scope="module")
def bundled_int8():
    _native_lib()
    target = load_model(default_target(), weights="int8")
    draft = load_model(default_draft(), exact=False, weights="int8")
    assert target.native.int8 and draft.native.int8
    return target, draft


def test_greedy_speculation_is_identical_to_plain_on_the_bundled_int8_pair(bundled_int8):
    target, draft = bundled_int8
    prompts = random_prompts(200, seed=4, vocab=target.config.vocab_size)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)

    def run(spec, d=None):
        eng = make_engine(Models(target, None, d), spec, EngineConfig(max_batch=16, max_model_len=128))
        return [s.output_ids for s in eng.generate(prompts, params)], eng.metrics
    plain, _ = run(SpecConfig(method="none", k=0))
    spec, m = run(SpecConfig(method="draft", k=4), draft)
    assert spec == plain
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens


def test_int8_speculative_sampling_follows_the_exact_law():
    """The exact-law chi^2 test, with the target and the draft both int8: the law is the
    int8 target's own, enumerated from its forwards."""
    target = make_model(3, std=0.5, vocab=law.V, prepare=False)
    draft = perturbed(target, 1.0)
    for m in (target, draft):
        quantize(m, "int8")
        m.prepare(KERNELS["native"]())
    pair = (target, draft)
    assert law.p_value(law.sampled(pair, "draft"), law.exact_law(target)) > law.P_MIN


def test_the_command_line_decodes_int8_and_speculation_keeps_its_text(capsys, tiny_dirs):
    """--dtype int8 for the target, --draft-dtype float32 for the draft: the greedy text
    equals the int8 target's plain text."""
    from specdec.cli import main
    t, d = tiny_dirs
    base = ["generate", "--target", str(t), "--prompt", "def f(x):", "--max-new-tokens", "12", "--ignore-eos",
            "--json", "--dtype", "int8"]
    outs = []
    for extra in ([], ["--draft", str(d), "--draft-dtype", "float32", "--k", "3"]):
        assert main(base + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[1]["token_ids"] == outs[0]["token_ids"] and outs[1]["stats"]["drafts"] > 0


def test_an_unknown_dtype_is_refused_before_loading(tiny_dirs):
    from specdec import LLM
    with pytest.raises(ConfigError, match="float32, int8"):
        LLM(*tiny_dirs, dtype="int4")


def test_a_quantized_folder_loads_as_the_rounding_at_load_does(tiny_dirs, tmp_path, capsys):
    """`specdec quantize` writes int8 weights and their scales; loading the folder gives the
    same model, bit for bit, as rounding the original at load; it refuses float32."""
    from specdec.cli import main
    t, _ = tiny_dirs
    out = tmp_path / "q8"
    assert main(["quantize", "--model", str(t), "--out", str(out)]) == 0
    assert "int8 weights" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["quantization_config"]["quant_method"] == "specdec-int8"
    a, b = load_model(t, weights="int8"), load_model(out)
    assert b.weight_dtype == "int8" and b.lm_head.weight.dtype == torch.int8
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    toks = torch.randint(2, a.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(5))
    pos = torch.arange(9)[None]
    with torch.inference_mode():
        assert torch.equal(a(toks, pos, a.new_cache(1, 16)), b(toks, pos, b.new_cache(1, 16)))
    with pytest.raises(ConfigError, match="stores int8"):
        load_model(out, weights="float32")
    assert main(["quantize", "--model", str(t), "--out", str(out)]) == 2           # not empty: refused
    assert "not an empty directory" in capsys.readouterr().err
