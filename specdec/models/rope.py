"""Rotary embedding frequencies, with the context-extension scalings checkpoints declare.

inv_freq_i = theta^(-2i / D), i < D/2, then by `rope_scaling["rope_type"]`:
  - "default": as is;
  - "linear": inv_freq / factor (positions interpolated);
  - "llama3" (Llama 3.1+): wavelengths 2*pi / inv_freq longer than original_context /
    low_freq_factor are divided by factor, shorter than original_context / high_freq_factor
    kept, and those between blended linearly in original_context / wavelength.
Other types (yarn, dynamic, longrope) change more than the frequencies; a checkpoint that
declares one is refused by ModelConfig rather than decoded wrongly.
"""
from __future__ import annotations

import math

import torch

ROPE_TYPES = ("default", "linear", "llama3")


def inv_freq(theta: float, head_dim: int, scaling: dict | None = None) -> torch.Tensor:
    """(head_dim / 2,) float32 inverse frequencies."""
    base = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = (scaling or {}).get("rope_type", "default")
    if kind == "default":
        return base
    factor = float(scaling["factor"])
    if kind == "linear":
        return base / factor
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / base
    scaled = torch.where(wavelen > old / low, base / factor, base)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, blended, scaled)
