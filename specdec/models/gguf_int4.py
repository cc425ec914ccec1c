"""Q4_0 GGUF weights held exactly in specdec's int4 layout (models/quantize.py), not re-rounded.

A Q4_0 block holds 32 inputs of a row as w = d (q - 8): d an fp16 scale, then 16 bytes whose
low nibbles are inputs 0..15 and high nibbles inputs 16..31 (q in 0..15). specdec's int4 holds
a group of INT4_GROUP = 32 inputs as w = s q': s a float32 scale, q' in -8..7 packed two a byte
(input 2i low, 2i+1 high). So s = float32(d) and q' = q - 8 exactly, and q' s is the very float32
product gguf's dequantizer computes: a `--dtype int4` load of a Q4_0 file keeps the file's
weights bit for bit. Re-rounding the dequantized weights instead gives the same only where each
block holds a q of 0 (llama.cpp's reference rule); an importance-weighted Q4_0 (`--imatrix`)
chooses d otherwise, and re-rounding would move its weights.
"""
from __future__ import annotations

import numpy as np
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from .quantize import INT4_GROUP

BLOCK, BLOCK_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q4_0]   # 32 inputs in 18 bytes
SCALE_BYTES = 2                                                     # the fp16 d before the nibbles
Q4_0_ZERO = 8                                                       # q - 8: the stored offset
assert BLOCK == INT4_GROUP, "a Q4_0 block must be one int4 group"


def q4_0_to_int4(blocks: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_0 rows (N, K/32 x 18 bytes) uint8 -> (q (N, K/2) uint8, s (N, K/32) float32), the
    int4 weight and scales whose `quantize.dequantize` equals gguf's dequantization bitwise."""
    n = blocks.shape[0]
    b = np.ascontiguousarray(blocks).reshape(n, -1, BLOCK_BYTES)                # (N, G, 18)
    d = b[..., :SCALE_BYTES].copy().view(np.float16)[..., 0].astype(np.float32)  # (N, G)
    nibbles = b[..., SCALE_BYTES:]                                               # (N, G, 16)
    q = np.concatenate([nibbles & 15, nibbles >> 4], axis=2).astype(np.int8) - Q4_0_ZERO   # (N, G, 32) inputs in order
    two = q.reshape(n, -1).astype(np.uint8) & 15                                 # (N, K) two's complement nibbles
    packed = two[:, 0::2] | (two[:, 1::2] << 4)                                  # (N, K/2)
    return torch.from_numpy(np.ascontiguousarray(packed)), torch.from_numpy(d)


def rows(t: torch.Tensor, heads: int) -> torch.Tensor:
    """The rows of a q/k weight (or its scales) back in Hugging Face's order (gguf_file's
    `_unpermute`): int4 rows are whole output channels, so they move as float rows do."""
    n = t.shape[0]
    return t.reshape(heads, n // heads // 2, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape).contiguous()
