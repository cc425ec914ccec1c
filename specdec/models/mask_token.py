"""A parallel draft's learned mask token, stored beside an ordinary Llama checkpoint.

    draft/  config.json  {..., "parallel_draft": {"mask_file": "mask_embedding.safetensors",
                                                  "max_k": 8}}
            model.safetensors            (the Llama weights, untouched: any loader reads them)
            mask_embedding.safetensors   ("mask_embedding": (hidden,), the mask's input embedding)

The mask token has no id in the vocabulary (the draft keeps the target's vocabulary, and a tied
output head would otherwise learn a logit for it): it is an input embedding alone, fed in place
of a token's (`LlamaModel.forward(..., embeds=)`). `max_k` is the longest draft it was trained
for: k - 1 masks follow the context (proposers/parallel.py, train/parallel.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError

CONFIG_KEY = "parallel_draft"            # config.json's field that marks a parallel draft
MASK_FILE = "mask_embedding.safetensors"  # the mask embedding's file, beside model.safetensors
MASK_TENSOR = "mask_embedding"            # its tensor's name inside that file


class MaskToken:
    """A parallel draft's mask: `embedding` (hidden,) and the longest draft trained, `max_k`."""

    def __init__(self, embedding: torch.Tensor, max_k: int):
        self.embedding, self.max_k = embedding, max_k


def read_mask(folder: str | Path, hidden_size: int) -> MaskToken | None:
    """The mask token of the checkpoint folder `folder`, or None where its config names none
    (a plain draft, or a GGUF file). CheckpointError where the config names one that is absent,
    corrupt or of another width than the model's `hidden_size`."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None                                   # the model loader has already said why
    meta = cfg.get(CONFIG_KEY) if isinstance(cfg, dict) else None
    if meta is None:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("max_k"), int) or meta["max_k"] < 1:
        raise CheckpointError(f"{folder / 'config.json'}: {CONFIG_KEY} must be "
                              f'{{"mask_file": ..., "max_k": a positive integer}}, got {meta!r}')
    path = folder / str(meta.get("mask_file", MASK_FILE))
    try:
        emb = load_file(str(path))[MASK_TENSOR]
    except (SafetensorError, OSError, KeyError) as e:
        raise CheckpointError(f"{folder.name} is a parallel draft, but its mask embedding ({path.name}) "
                              f"cannot be read: {e}") from e
    if emb.shape != (hidden_size,):
        raise CheckpointError(f"{path}: mask embedding of shape {tuple(emb.shape)}; the model's "
                              f"hidden size is {hidden_size}")
    return MaskToken(emb.to(torch.float32), meta["max_k"])


def write_mask(folder: str | Path, embedding: torch.Tensor, max_k: int, dtype=torch.float16) -> None:
    """Store `embedding` (hidden,) as the mask token of the checkpoint already saved in
    `folder` (models/loader.py save_checkpoint), and record it in its config.json."""
    folder = Path(folder)
    tmp = folder / (MASK_FILE + ".tmp")
    save_file({MASK_TENSOR: embedding.detach().to("cpu", dtype).contiguous()}, str(tmp), metadata={"format": "pt"})
    tmp.replace(folder / MASK_FILE)
    cfg = json.loads((folder / "config.json").read_text())
    cfg[CONFIG_KEY] = {"mask_file": MASK_FILE, "max_k": int(max_k)}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
