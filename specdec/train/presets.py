"""Model sizes for the bundled pair (see models/README.md for why)."""
from ..models.config import ModelConfig

VOCAB = 8192


def preset(name: str) -> ModelConfig:
    common = dict(vocab_size=VOCAB, max_position_embeddings=2048, rms_norm_eps=1e-5,
                  rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1)
    if name == "target":   # ~27M parameters: memory-bound decode step on this CPU
        return ModelConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                           num_attention_heads=8, num_key_value_heads=4, **common)
    if name == "draft":    # ~2.5M parameters: wide and shallow, cheap per step
        return ModelConfig(hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                           num_attention_heads=6, num_key_value_heads=3, **common)
    if name == "tiny":     # for tests
        return ModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, **common)
    raise ValueError(f"unknown preset {name!r}; choose target, draft or tiny")
