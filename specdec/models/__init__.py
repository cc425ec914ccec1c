"""Target and draft models: one forward for prefill, decode and verify."""
from .config import ModelConfig
from .kv_cache import KVCache
from .llama import LlamaModel
from .loader import load_model, load_tokenizer, save_checkpoint
from .tokenizer import Tokenizer

__all__ = ["ModelConfig", "KVCache", "LlamaModel", "load_model", "load_tokenizer",
           "save_checkpoint", "Tokenizer"]
