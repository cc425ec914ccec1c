"""Build an Engine from checkpoint directories (what the CLI and the server call)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import EngineConfig, SpecConfig
from ..errors import CheckpointError, ConfigError
from ..models.loader import load_model, load_tokenizer
from ..models.llama import LlamaModel
from ..models.tokenizer import Tokenizer
from .engine import Engine


@dataclass
class Models:
    target: LlamaModel
    tokenizer: Tokenizer
    draft: LlamaModel | None = None
    target_path: Path | None = None
    draft_path: Path | None = None


def load_models(target: str | Path, draft: str | Path | None = None, device: str = "cpu",
                threads: int | None = None, compile: bool | None = None) -> Models:
    """Load the target (and draft); refuse a draft whose vocabulary differs from the target's.
    `compile`: use the compiled decoder (None: where it builds; see models/loader.py)."""
    if threads:
        torch.set_num_threads(threads)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but CUDA is not available")
    t = load_model(target, device=device, compile=compile)
    tok = load_tokenizer(target)
    d = None
    if draft is not None:
        d = load_model(draft, device=device, exact=False, compile=compile)  # a draft's numerics change no output
        if d.config.vocab_size != t.config.vocab_size:
            raise CheckpointError(f"draft vocabulary size {d.config.vocab_size} differs from the target's "
                                  f"{t.config.vocab_size}: speculative decoding needs the same vocabulary")
        dtok = load_tokenizer(draft)
        if dtok.tok.get_vocab() != tok.tok.get_vocab():
            raise CheckpointError("draft tokenizer differs from the target's: speculative decoding needs "
                                  "the same vocabulary")
    return Models(t, tok, d, Path(target), Path(draft) if draft else None)


def make_engine(models: Models, spec: SpecConfig, config: EngineConfig, cost_model=None) -> Engine:
    if config.max_model_len > models.target.config.max_position_embeddings:
        config = EngineConfig(max_batch=config.max_batch, device=config.device, threads=config.threads,
                              max_model_len=models.target.config.max_position_embeddings)
    return Engine(models.target, spec, config, draft=models.draft, cost_model=cost_model)
