"""Published EAGLE-3 heads (`LlamaForCausalLMEagle3`): read and checked, and refused with every
difference from specdec's feature head named; and the lookup of a shipped head by its target's
weights hash."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from specdec.errors import CheckpointError, ConfigError
from specdec.models.eagle3 import read_eagle3
from specdec.models.feature_head import FeatureHead, HeadConfig
from specdec.models.head_loader import load_head, save_head, shipped_head, weights_sha256
from tests.conftest import make_model


def write_eagle3(path, d: int, vocab: int, draft: int, layers: int = 3, d_t: int | None = None, **edit):
    """A synthetic EAGLE-3 folder in vLLM's key names: draft id i is target token 2i."""
    d_t = d_t or d
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.02          # noqa: E731
    heads, kv, hd, inter = 4, 2, d // 4, 2 * d
    sd = {"fc.weight": r(d, layers * d_t), "midlayer.input_layernorm.weight": torch.ones(d),
          "midlayer.hidden_norm.weight": torch.ones(d),
          "midlayer.self_attn.q_proj.weight": r(heads * hd, 2 * d), "midlayer.self_attn.k_proj.weight": r(kv * hd, 2 * d),
          "midlayer.self_attn.v_proj.weight": r(kv * hd, 2 * d), "midlayer.self_attn.o_proj.weight": r(d, heads * hd),
          "midlayer.post_attention_layernorm.weight": torch.ones(d), "midlayer.mlp.gate_proj.weight": r(inter, d),
          "midlayer.mlp.up_proj.weight": r(inter, d), "midlayer.mlp.down_proj.weight": r(d, inter),
          "norm.weight": torch.ones(d), "lm_head.weight": r(draft, d),
          "d2t": torch.arange(draft), "t2d": torch.zeros(vocab, dtype=torch.bool)}
    sd["t2d"][::2][:draft] = True
    sd.update(edit)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path / "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": d, "vocab_size": vocab,
           "draft_vocab_size": draft, "num_attention_heads": heads, "num_key_value_heads": kv,
           "intermediate_size": inter, "num_hidden_layers": 1}
    if d_t != d:
        cfg["target_hidden_size"] = d_t
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def target():
    return make_model(0, vocab=64)


def test_the_vocabulary_maps_read_as_target_ids(tmp_path, target):
    head = read_eagle3(write_eagle3(tmp_path / "e3", target.config.hidden_size, 64, 16))
    assert head.draft_vocab.tolist() == list(range(0, 32, 2))
    assert head.fused_layers == 3


def test_head_names_each_difference_from_specdecs_head(tmp_path, target):
    path = write_eagle3(tmp_path / "e3", target.config.hidden_size, 64, 16)
    with pytest.raises(ConfigError) as e:
        load_head(path, target)
    msg = str(e.value)
    assert "fc fuses 3 target layers" in msg and "q_proj input" in msg and "own lm_head" in msg
    assert "hidden size" not in msg                              # this target's size is the head's
    other = write_eagle3(tmp_path / "e3-big", target.config.hidden_size * 2, 100, 16)
    with pytest.raises(ConfigError, match="hidden size .*; this target's is .*vocabulary is 100 tokens"):
        load_head(other, target)


@pytest.mark.parametrize("edit, match", [
    ({"d2t": torch.arange(16) + 1}, "different target tokens"),
    ({"t2d": torch.ones(64, dtype=torch.bool)}, "one draft vocabulary"),
    ({"fc.weight": torch.zeros(5, 3)}, "fc.weight"),
])
def test_inconsistent_files_are_refused_as_corrupt(tmp_path, target, edit, match):
    path = write_eagle3(tmp_path / "e3", target.config.hidden_size, 64, 16, **edit)
    with pytest.raises(CheckpointError, match=match):
        load_head(path, target)


def test_a_missing_tensor_is_named(tmp_path, target):
    path = write_eagle3(tmp_path / "e3", target.config.hidden_size, 64, 16)
    from safetensors.torch import load_file
    sd = load_file(str(path / "model.safetensors"))
    del sd["d2t"]
    save_file(sd, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="lacks d2t"):
        load_head(path, target)


def test_a_shipped_head_is_found_by_its_targets_hash(tmp_path, target):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"weights" * 100)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"other!!" * 100)                          # the same size, another hash
    heads = []
    for name, sha, size in (("stale", "0" * 64, 0), ("sized", weights_sha256(gguf), 1),
                            ("mine", weights_sha256(gguf), 700)):
        cfg = HeadConfig.for_target(target.config, sha256=sha, nbytes=size)
        heads.append(save_head(FeatureHead(cfg), tmp_path / name))
    assert shipped_head(gguf, heads) == tmp_path / "mine"        # "sized" names another file size
    assert shipped_head(other, heads) is None
    assert shipped_head(tmp_path / "absent.gguf", heads) is None
