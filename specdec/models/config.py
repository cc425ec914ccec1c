"""Model hyper-parameters read from a Hugging Face `config.json`."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import CheckpointError
from .rope import ROPE_TYPES

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")


def _rope_scaling(d: dict) -> tuple | None:
    """config.json's rope scaling (`rope_scaling`, or transformers 5's `rope_parameters`) as
    sorted (key, value) pairs, "rope_type" normalised; None when there is none."""
    raw = d.get("rope_scaling") or d.get("rope_parameters") or {}
    items = {k: v for k, v in raw.items() if k not in ("rope_theta", "type")}
    items["rope_type"] = raw.get("rope_type", raw.get("type", "default"))
    return None if items == {"rope_type": "default"} else tuple(sorted(items.items()))


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2 uses q/k/v bias
    head_dim: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    architecture: str = "LlamaForCausalLM"
    rope_scaling: tuple | None = None   # ((key, value), ...) of config.json's rope_scaling; models/rope.py
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        kind = dict(self.rope_scaling or ()).get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise CheckpointError(f"rope scaling {kind!r} is not supported; specdec decodes {', '.join(ROPE_TYPES)}")
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError("num_attention_heads must be a multiple of num_key_value_heads")

    @property
    def eos_ids(self) -> tuple[int, ...]:
        e = self.eos_token_id
        if e is None:
            return ()
        return tuple(e) if isinstance(e, (list, tuple)) else (int(e),)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        archs = d.get("architectures") or [d.get("model_type", "unknown")]
        arch = archs[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise CheckpointError(
                f"unsupported architecture {arch!r}; specdec loads {', '.join(SUPPORTED_ARCHITECTURES)}")
        try:
            bias = d.get("attention_bias", arch == "Qwen2ForCausalLM")
            return cls(
                vocab_size=int(d["vocab_size"]),
                hidden_size=int(d["hidden_size"]),
                intermediate_size=int(d["intermediate_size"]),
                num_hidden_layers=int(d["num_hidden_layers"]),
                num_attention_heads=int(d["num_attention_heads"]),
                num_key_value_heads=int(d.get("num_key_value_heads") or d["num_attention_heads"]),
                max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                rope_theta=float(d.get("rope_theta", (d.get("rope_parameters") or {}).get("rope_theta", 10000.0))),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                attention_bias=bool(bias),
                head_dim=d.get("head_dim"),
                bos_token_id=d.get("bos_token_id"),
                eos_token_id=d.get("eos_token_id"),
                architecture=arch,
                rope_scaling=_rope_scaling(d),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"config.json is missing or has a bad field: {e}") from e

    @classmethod
    def from_file(cls, path: Path) -> "ModelConfig":
        try:
            d = json.loads(Path(path).read_text())
        except FileNotFoundError as e:
            raise CheckpointError(f"no config.json in {Path(path).parent}") from e
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"corrupt config.json in {Path(path).parent}: {e}") from e
        if not isinstance(d, dict):
            raise CheckpointError(f"corrupt config.json in {Path(path).parent}: not an object")
        return cls.from_dict({**d, **_generation_eos(Path(path).parent)})

    def to_hf_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        d["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling else None
        arch = d.pop("architecture")
        d["architectures"] = [arch]
        d["model_type"] = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                           "MistralForCausalLM": "mistral"}[arch]
        d["hidden_act"] = "silu"
        d["torch_dtype"] = "float32"
        return d

    @property
    def num_params(self) -> int:
        d, f, L = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        hd = self.head_dim
        attn = d * hd * self.num_attention_heads * 2 + d * hd * self.num_key_value_heads * 2
        per_layer = attn + 3 * d * f + 2 * d
        emb = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return per_layer * L + emb + d


def _generation_eos(folder: Path) -> dict:
    """generation_config.json's EOS ids, which end generation in transformers (a chat model
    lists its end-of-turn token there, often beside config.json's EOS): {} where it has none."""
    try:
        gen = json.loads((folder / "generation_config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}                # absent or unreadable: config.json's EOS stands
    eos = gen.get("eos_token_id") if isinstance(gen, dict) else None
    return {"eos_token_id": eos} if isinstance(eos, (int, list)) and eos != [] else {}
