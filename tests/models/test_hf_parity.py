"""Checkpoints saved by transformers load into specdec and give the same logits."""
import json

import pytest
import torch
import transformers

from specdec.errors import CheckpointError
from specdec.models.loader import load_model

COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, rope_theta=5000.0)


# context-extension scalings (Llama 3.1+, linear interpolation), with the original context
# short enough that 17 positions and the head dimension reach all three llama3 bands
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
LINEAR = {"rope_type": "linear", "factor": 4.0}


def _hf(arch: str, tied: bool = False):
    torch.manual_seed(0)
    if arch.startswith("llama"):
        scaling = {"llama": None, "llama-llama3": LLAMA3, "llama-linear": LINEAR}[arch]
        cfg = transformers.LlamaConfig(**COMMON, tie_word_embeddings=tied, rope_scaling=scaling)
        return transformers.LlamaForCausalLM(cfg)
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(**COMMON, tie_word_embeddings=tied)
        return transformers.Qwen2ForCausalLM(cfg)
    cfg = transformers.MistralConfig(**COMMON, tie_word_embeddings=tied, sliding_window=None)
    return transformers.MistralForCausalLM(cfg)


@pytest.mark.parametrize("arch,tied,shard", [("llama", False, False), ("llama", True, False),
                                             ("qwen2", False, False), ("mistral", False, True),
                                             ("llama-llama3", False, False), ("llama-linear", False, False)])
def test_logits_match_transformers(tmp_path, arch, tied, shard):
    hf = _hf(arch, tied).eval()
    with torch.no_grad():  # make biases non-zero so Qwen2's q/k/v bias is exercised
        for n, p in hf.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.5)
    hf.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="50KB" if shard else "5GB")
    if shard:
        assert (tmp_path / "model.safetensors.index.json").exists()
    ours = load_model(tmp_path)
    tokens = torch.randint(0, 300, (2, 17))
    with torch.no_grad():
        ref = hf(tokens).logits
    pos = torch.arange(17).expand(2, 17)
    full = ours(tokens, pos)                        # no cache: training-style attention
    assert torch.allclose(full, ref, atol=1e-4), (full - ref).abs().max()
    # cached path: prefill 10 tokens, then decode the rest in chunks of 1 and 3
    cache = ours.new_cache(2, 64)
    with torch.inference_mode():
        out = [ours(tokens[:, :10], pos[:, :10], cache)]
        cache.lengths[:2] = [10, 10]
        for a, b in [(10, 11), (11, 14), (14, 17)]:
            out.append(ours(tokens[:, a:b], pos[:, a:b], cache))
            cache.lengths[:2] = [b, b]
    assert torch.allclose(torch.cat(out, 1), ref, atol=1e-4)


def test_the_llama3_scaling_changes_the_frequencies():
    """Guards the parity test above: the scaling is not a no-op on its frequencies."""
    from specdec.models.rope import inv_freq
    plain, scaled = inv_freq(5000.0, 16), inv_freq(5000.0, 16, LLAMA3)
    assert scaled[0] == plain[0] and scaled[-1] == plain[-1] / 8          # high kept, low divided by factor
    assert plain[1] / 8 < scaled[1] < plain[1]                             # a band between: blended


def test_an_unsupported_rope_scaling_is_refused(tmp_path):
    hf = _hf("llama")
    hf.save_pretrained(tmp_path, safe_serialization=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    cfg.pop("rope_parameters", None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="yarn"):
        load_model(tmp_path)


def test_unsupported_architecture_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(CheckpointError, match="GPT2LMHeadModel"):
        load_model(tmp_path)


def test_missing_and_corrupt_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "nope")
    hf = _hf("llama")
    hf.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_model(tmp_path)


def test_weights_not_matching_config(tmp_path):
    _hf("llama").save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["hidden_size"] = 128
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="do not match"):
        load_model(tmp_path)
