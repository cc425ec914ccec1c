"""A feature head: one decoder layer that drafts from the target's own hidden states.

EAGLE trains it after the fact on a frozen target; DeepSeek-V3 ships it inside the checkpoint
as a multi-token-prediction (MTP) layer. Both are this module, in DeepSeek-V3's layout:

    x = eh_proj([enorm(embed(token_j)), hnorm(feature_{j-1})])     (B, T, d)
    g = decoder_layer(x)                                             Llama layer names
    out = shared_head.norm(g)                                        (B, T, d)
    logits = lm_head(out)                                            the target's head

feature_{j-1} is the target's final normed hidden state at position j-1 (the one its logits
for token j are read from), or the head's own `out` at j-1 while drafting past the verified
tokens. `out` predicts the target's feature at j, so lm_head(out) scores token j+1. The head
reuses the target's `embed_tokens` and `lm_head`; with a draft vocabulary (FR-Spec) it scores
only the `draft_vocab_size` most frequent tokens, and q is zero outside them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch
import torch.nn as nn

from ..errors import CheckpointError
from .config import ModelConfig
from .llama import DecoderLayer, Linear, LlamaModel, RMSNorm

HEAD_ARCHITECTURE = "SpecdecFeatureHead"


@dataclass(frozen=True)
class HeadConfig:
    """A head's shape and the target it was trained for."""
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int                     # the target's vocabulary
    draft_vocab_size: int               # tokens the head scores (FR-Spec); vocab_size: all
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    target_architecture: str = "LlamaForCausalLM"
    target_sha256: str = ""             # of the target's weights file ("" for MTP: the same file)
    target_bytes: int = 0               # that file's size (0: not recorded): looking a head up for a
                                        # target hashes only a file of this size

    def __post_init__(self):
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "head_dim", "vocab_size", "draft_vocab_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise CheckpointError(f"head config: {name} must be a positive integer")
        if not isinstance(self.target_bytes, int) or self.target_bytes < 0:
            raise CheckpointError("head config: target_bytes must be a non-negative integer")
        if self.draft_vocab_size > self.vocab_size:
            raise CheckpointError(f"head config: draft_vocab_size {self.draft_vocab_size} exceeds the "
                                  f"vocabulary's {self.vocab_size}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError("head config: num_attention_heads must be a multiple of num_key_value_heads")

    @classmethod
    def for_target(cls, cfg: ModelConfig, draft_vocab_size: int | None = None, sha256: str = "",
                   nbytes: int = 0) -> "HeadConfig":
        """A head shaped like one layer of `cfg`'s target (whose weights hash `sha256` and
        take `nbytes`, where known)."""
        return cls(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                   cfg.head_dim, cfg.vocab_size, draft_vocab_size or cfg.vocab_size, cfg.rms_norm_eps,
                   cfg.rope_theta, cfg.max_position_embeddings, cfg.architecture, sha256, nbytes)

    @classmethod
    def from_dict(cls, d: dict) -> "HeadConfig":
        if d.get("architectures") != [HEAD_ARCHITECTURE]:
            raise CheckpointError(f"not a specdec feature head (architectures should be [{HEAD_ARCHITECTURE!r}])")
        names = cls.__dataclass_fields__
        try:
            return cls(**{k: v for k, v in d.items() if k in names})
        except TypeError as e:
            raise CheckpointError(f"head config.json is missing a field: {e}") from e

    def to_dict(self) -> dict:
        return {"architectures": [HEAD_ARCHITECTURE], **asdict(self)}

    def layer_config(self) -> ModelConfig:
        """The one-layer decoder the head runs as (its vocabulary: the draft vocabulary)."""
        return ModelConfig(vocab_size=self.draft_vocab_size, hidden_size=self.hidden_size,
                           intermediate_size=self.intermediate_size, num_hidden_layers=1,
                           num_attention_heads=self.num_attention_heads,
                           num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
                           max_position_embeddings=self.max_position_embeddings,
                           rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta, tie_word_embeddings=True)


class SharedHead(nn.Module):
    """DeepSeek-V3's `shared_head`: the norm before the (target's, shared) output head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class FeatureHead(DecoderLayer):
    """The head's own weights: a decoder layer plus DeepSeek-V3's MTP input projection and
    output norm. `draft_vocab` (N,) lists the target token ids the head scores, most frequent
    first; `forward` is the layer (DecoderLayer's), `embed_features` its input."""

    def __init__(self, cfg: HeadConfig):
        lc = cfg.layer_config()
        super().__init__(lc)
        d = cfg.hidden_size
        self.config = cfg
        self.enorm = RMSNorm(d, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(d, cfg.rms_norm_eps)
        self.eh_proj = Linear(2 * d, d, bias=False)
        self.shared_head = SharedHead(lc)
        self.register_buffer("draft_vocab", torch.arange(cfg.draft_vocab_size))
        self.source = "eagle"         # "mtp" when read from a checkpoint's MTP layers (head_loader.py)

    def embed_features(self, embeds: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """embeds (B, T, d) of tokens j, features (B, T, d) of positions j-1 -> layer input (B, T, d)."""
        return self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(features)], dim=-1))

    def weights(self) -> dict[str, torch.Tensor]:
        """Its state dict without the draft vocabulary (the MTP layout's keys)."""
        return {k: v for k, v in self.state_dict().items() if k != "draft_vocab"}


def head_decoder(head: FeatureHead, lm_head_weight: torch.Tensor, vocab: torch.Tensor | None = None) -> LlamaModel:
    """A one-layer LlamaModel sharing the head's layer and output norm, with the target's
    lm_head rows of the draft vocabulary (or of `vocab`, token ids) as its output: what
    inference runs (through the compiled decoder where it builds) with `embeds=` the head's input."""
    vocab = head.draft_vocab if vocab is None else vocab
    cfg = replace(head.config.layer_config(), vocab_size=len(vocab))
    with torch.device("meta"):
        model = LlamaModel(replace(cfg, tie_word_embeddings=False))
    model.model.layers[0] = head
    model.model.norm = head.shared_head.norm
    rows = lm_head_weight.detach()[vocab.to(lm_head_weight.device)]                         # (N, d)
    model.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device=rows.device)
    model.lm_head.weight = nn.Parameter(rows.contiguous(), requires_grad=False)
    model.model.embed_tokens = nn.Embedding.from_pretrained(rows, freeze=True)  # unused: inputs are embeds
    model.inv_freq = torch.empty(cfg.head_dim // 2, device=rows.device)
    model.reset_rope()
    return model


def check_compatible(cfg: HeadConfig, target: ModelConfig, sha256: str | None, where: str) -> None:
    """Refuse (CheckpointError) a head made for another target."""
    for name, mine, theirs in (("hidden size", cfg.hidden_size, target.hidden_size),
                               ("vocabulary", cfg.vocab_size, target.vocab_size)):
        if mine != theirs:
            raise CheckpointError(f"{where} was made for a target with {name} {mine}; this target's is {theirs}")
    if cfg.target_sha256 and sha256 and cfg.target_sha256 != sha256:
        raise CheckpointError(f"{where} was trained on another target (weights hash {cfg.target_sha256[:12]}, "
                              f"this target's {sha256[:12]})")
