"""Parallel drafts for tests: any model with a mask token attached (models/mask_token.py)."""
import torch

from specdec.models.mask_token import MaskToken


def with_mask(model, seed: int = 0, max_k: int = 8, scale: float = 1.0):
    """`model` made a parallel draft: a random mask embedding (hidden,) of norm ~ scale * sqrt(d)."""
    g = torch.Generator().manual_seed(seed)
    model.mask_token = MaskToken(scale * torch.randn(model.config.hidden_size, generator=g), max_k)
    return model
