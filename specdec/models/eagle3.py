"""Published EAGLE-3 heads: the `LlamaForCausalLMEagle3` layout that vLLM and SGLang load, read
and checked against specdec's feature head (models/feature_head.py).

An EAGLE-3 folder holds config.json (architectures ["LlamaForCausalLMEagle3"], hidden_size,
vocab_size, draft_vocab_size, the layer's shape; target_hidden_size where it differs) and
safetensors weights:

    fc.weight                       (d, n*d_t)  fuses n of the target's layers' hidden states
    midlayer.input_layernorm.weight (d,)        the token embedding's norm
    midlayer.hidden_norm.weight     (d,)        the fused feature's norm
    midlayer.self_attn.{q,k,v,o}_proj.weight    q/k/v read [embedding, feature]: (., 2d)
    midlayer.post_attention_layernorm.weight, midlayer.mlp.{gate,up,down}_proj.weight
    norm.weight                     (d,)
    lm_head.weight                  (N, d)      its own output head over the draft vocabulary
    d2t                             (N,) int    draft id i is target token i + d2t[i]
    t2d                             (V,) bool   the target tokens the draft vocabulary holds
    embed_tokens.weight             (V, d)      optional: else the target's

specdec's head (DeepSeek-V3's MTP layout) reads one feature, the target's final normed hidden
state, projects [enorm(embedding), hnorm(feature)] to d before an ordinary decoder layer, and
scores with the target's own lm_head rows. The two layers compute different functions (an
EAGLE-3 attention reads the 2d concatenation, and its residual is the fused feature, not the
projection), so no renaming of weights turns one into the other. `read_eagle3` reads and checks
the folder; `refuse_eagle3` (what `--head` on such a folder gives) names every difference from
specdec's head on this target, so a user sees what running it would take.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import CheckpointError, ConfigError
from .config import ModelConfig

EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")   # vLLM's and SGLang's names
REQUIRED = ("fc.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
            "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
            "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",
            "midlayer.post_attention_layernorm.weight", "midlayer.mlp.gate_proj.weight",
            "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d")


@dataclass
class Eagle3Head:
    """A checked EAGLE-3 folder: its config, weights, and draft vocabulary as target ids."""
    config: dict
    weights: dict
    draft_vocab: torch.Tensor          # (N,) target token id of each draft id (i + d2t[i])
    hidden_size: int                   # the head's d
    target_hidden_size: int            # the target's d_t, as the head expects it
    fused_layers: int                  # n: target layers fc fuses


def is_eagle3(config: dict) -> bool:
    """Whether a config.json object declares an EAGLE-3 head."""
    return any(a in EAGLE3_ARCHITECTURES for a in config.get("architectures") or ())


def read_eagle3(path: str | Path) -> Eagle3Head:
    """Read and check an EAGLE-3 folder: its keys, their shapes, and that d2t and t2d describe one
    draft vocabulary (CheckpointError naming what is wrong)."""
    path = Path(path)
    cfg = json.loads((path / "config.json").read_text())
    files = [path / "model.safetensors"] if (path / "model.safetensors").exists() else sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"EAGLE-3 head in {path}: no safetensors weights (a pytorch_model.bin is not read)")
    sd: dict = {}
    try:
        for f in files:
            sd.update(load_file(str(f)))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"corrupt weights in {path}: {e}") from e
    missing = [k for k in REQUIRED if k not in sd]
    if missing:
        raise CheckpointError(f"EAGLE-3 head in {path} lacks {', '.join(missing)}")
    d = int(cfg.get("hidden_size", 0))
    d_t = int(cfg.get("target_hidden_size") or d)
    fc_in = sd["fc.weight"].shape[1]
    if sd["fc.weight"].shape[0] != d or fc_in % d_t:
        raise CheckpointError(f"EAGLE-3 head in {path}: fc.weight is {tuple(sd['fc.weight'].shape)}, not "
                              f"({d}, n x {d_t}) for hidden_size {d}, target_hidden_size {d_t}")
    q_in = sd["midlayer.self_attn.q_proj.weight"].shape[1]
    if q_in != 2 * d:
        raise CheckpointError(f"EAGLE-3 head in {path}: q_proj reads {q_in} inputs, not 2 x hidden_size {2 * d}")
    d2t, t2d = sd["d2t"].long(), sd["t2d"].bool()
    n, v = sd["lm_head.weight"].shape[0], int(cfg.get("vocab_size", t2d.numel()))
    if d2t.shape != (n,) or t2d.shape != (v,) or int(t2d.sum()) != n:
        raise CheckpointError(f"EAGLE-3 head in {path}: d2t {tuple(d2t.shape)}, t2d {tuple(t2d.shape)} with "
                              f"{int(t2d.sum())} set, lm_head {n} rows: they must describe one draft vocabulary")
    vocab = torch.arange(n) + d2t                                                      # (N,) target ids
    if not torch.equal(vocab, t2d.nonzero().flatten()):
        raise CheckpointError(f"EAGLE-3 head in {path}: d2t and t2d name different target tokens")
    return Eagle3Head(cfg, sd, vocab, d, d_t, fc_in // d_t)


def differences(head: Eagle3Head, target: ModelConfig, target_lm_head: torch.Tensor | None = None) -> list[str]:
    """How `head` differs from specdec's feature head on `target` (never empty: the layer differs)."""
    out = []
    if head.target_hidden_size != target.hidden_size:
        out.append(f"it was made for a target of hidden size {head.target_hidden_size}; this target's is "
                   f"{target.hidden_size}")
    if int(head.config.get("vocab_size", target.vocab_size)) != target.vocab_size:
        out.append(f"its vocabulary is {head.config.get('vocab_size')} tokens; this target's {target.vocab_size}")
    if head.fused_layers != 1:
        out.append(f"fc fuses {head.fused_layers} target layers' hidden states (fc.weight "
                   f"{tuple(head.weights['fc.weight'].shape)}); specdec's head reads only the final one")
    out.append(f"its attention reads [embedding, feature] concatenated (q_proj input {2 * head.hidden_size}) "
               f"with the feature as its residual; specdec's layer reads their projection to "
               f"{head.hidden_size} (eh_proj)")
    rows = head.weights["lm_head.weight"]
    if target_lm_head is None or rows.shape[1] != target_lm_head.shape[1] or not torch.allclose(
            rows.float(), target_lm_head[head.draft_vocab].float(), atol=1e-3):
        out.append("it scores with its own lm_head; specdec's head uses the target's lm_head rows")
    return out


def refuse_eagle3(path: str | Path, target) -> NoReturn:
    """Read and check the EAGLE-3 head in `path`, then raise a ConfigError naming how it differs
    from specdec's feature head on `target` (a LlamaModel)."""
    head = read_eagle3(path)
    lm = target.lm_head.dense_weight().detach() if hasattr(target.lm_head, "dense_weight") else None
    raise ConfigError(f"the EAGLE-3 head in {path} ({head.draft_vocab.numel()}-token draft vocabulary) cannot "
                      f"run as specdec's feature head: " + "; ".join(differences(head, target.config, lm))
                      + ". specdec trains its own for this target: specdec train eagle --target TARGET --out DIR")
