"""A small draft for any target (`specdec train draft --like TARGET`): its shape, its start, its files.

The draft is a plain Llama with the target's tokenizer, so `--draft DIR` loads it like any draft
and every proposer path that takes a draft takes it. Its shape is chosen for cost: a draft step
must cost at most `COST_BOUND` of the target's step. On a small target the tied embedding / LM
head dominates (SmolLM2-135M: 49,152 x 576 of its 135M parameters), so the draft keeps the
whole vocabulary but a narrow hidden size: the head's cost scales with it. A few layers at that
width cost little beside the head (benchmarks/like_draft_cost.py measures the candidates).

Start: the draft's embedding (tied, so also its LM head) is the target's embedding projected
onto its first `hidden` principal directions (a truncated SVD): tokens the target embeds alike
start alike, and the output layer starts with the target's geometry instead of noise. The
layers start as the bundled models do (train/trainer.py `init_weights`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import ConfigError
from ..models.config import ModelConfig
from ..models.loader import load_tokenizer, save_checkpoint
from ..models.llama import LlamaModel

COST_BOUND = 0.15      # issue 58: a draft step costs at most this share of the target's step
DRAFT_HIDDEN = 128     # the width: the LM head (vocab x hidden) is most of a small draft's bytes. On
                       # SmolLM2 (Zen 4) a step measured 0.03 of the target's at 128, 0.07 at 192 and
                       # 0.09-0.11 at 256 (benchmarks/results/like-draft-2026-12-07-zen4/cost): every
                       # width meets the bound, and a k = 4 round's drafting costs 4c, so 128 leaves
                       # the round 0.25 of a step cheaper than 256; in int8 it stores in 8.6 MB
DRAFT_LAYERS = 4       # at width 128 a layer is 0.2M parameters, 3% of the head: depth is nearly free
HEAD_DIM = 64          # the attention head size of Llama-family models (SmolLM2's too)
KV_GROUPS = 2          # query heads per key/value head (grouped-query attention, as the target's);
                       # an odd head count shares one key/value head
FFN_MULT = 3           # intermediate = 3 x hidden (SmolLM2: 1536 / 576 = 2.67; Llama: ~2.7-3.5)


def check_like_target(path: Path) -> None:
    """`path` is a checkpoint (a folder with config.json and tokenizer.json, or a .gguf file);
    ConfigError naming what is missing otherwise."""
    if path.is_file() and path.suffix == ".gguf":
        return
    if not path.exists():
        raise ConfigError(f"--like {path}: no such file or folder (a checkpoint folder or a .gguf file)")
    if not (path.is_dir() and (path / "config.json").is_file()):
        raise ConfigError(f"--like {path}: not a checkpoint (a folder with config.json, or a .gguf file)")
    if not (path / "tokenizer.json").is_file():
        raise ConfigError(f"--like {path}: the checkpoint has no tokenizer.json; a draft shares the "
                          "target's tokenizer, so the target must carry one")


def like_config(target: ModelConfig, hidden: int = DRAFT_HIDDEN, layers: int = DRAFT_LAYERS) -> ModelConfig:
    """The draft's shape for `target`: its vocabulary, special tokens and RoPE; `hidden` wide
    (never wider than the target), `layers` deep, heads of HEAD_DIM, tied embeddings."""
    hidden = min(hidden, target.hidden_size)
    if hidden % HEAD_DIM or layers < 1:
        raise ConfigError(f"draft shape: hidden {hidden} must be a multiple of {HEAD_DIM}, "
                          f"layers ({layers}) at least 1")
    heads = hidden // HEAD_DIM
    kv = heads // KV_GROUPS if heads % KV_GROUPS == 0 else 1
    return ModelConfig(vocab_size=target.vocab_size, hidden_size=hidden, intermediate_size=FFN_MULT * hidden,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv, head_dim=HEAD_DIM,
                       max_position_embeddings=target.max_position_embeddings, rms_norm_eps=target.rms_norm_eps,
                       rope_theta=target.rope_theta, tie_word_embeddings=True,
                       bos_token_id=target.bos_token_id, eos_token_id=target.eos_token_id,
                       rope_scaling=target.rope_scaling)


@torch.no_grad()
def projected_embedding(target: LlamaModel, hidden: int) -> torch.Tensor:
    """(vocab, hidden): the target's token embeddings on their first `hidden` principal
    directions (E V_h of E's SVD, uncentred, so the mean direction is kept)."""
    emb = target.model.embed_tokens.weight.float()                            # (V, d)
    _, _, vh = torch.linalg.svd(emb, full_matrices=False)                     # vh: (d, d)
    return emb @ vh[:hidden].T                                                # (V, hidden)


def init_from_target(draft: LlamaModel, target: LlamaModel) -> None:
    """Give the draft's tied embedding the target's, projected (module docstring)."""
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(projected_embedding(target, draft.config.hidden_size))


def export_like(draft: LlamaModel, target_path: Path, out: Path, card: str | None) -> Path:
    """Write the draft as a checkpoint folder with the target's tokenizer: tokenizer.json, the
    special-token rules and chat template (tokenizer_config.json), and its end-of-turn ids."""
    tok = load_tokenizer(target_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(tok.tok.to_str())
    save_checkpoint(draft, out / "tokenizer.json", out, card=card)
    r = tok.rules
    tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", **r.special_tokens,
            "model_max_length": draft.config.max_position_embeddings}
    tcfg.update({k: v for k, v in (("add_bos_token", r.add_bos), ("add_eos_token", r.add_eos),
                                   ("chat_template", r.chat_template)) if v is not None})
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": draft.config.bos_token_id, "eos_token_id": draft.config.eos_token_id,
        "do_sample": False}, indent=2) + "\n")
    return out
