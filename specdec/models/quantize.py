"""Weight-only int8: every linear weight rounded to int8 with one scale per output channel.

    W (N, K) -> q (N, K) int8, s (N,):  s_n = max_k |W_nk| / 127,  q_nk = round(W_nk / s_n)

Activations, norms and the KV cache stay fp32. The model's own parameters are replaced by the
values the int8 weights stand for, q * s in fp32, and each linear keeps its `weight_scale`:
the eager path, training and `state_dict` see the quantized model, and the compiled decoder
(models/native) recovers q exactly (`int8_weight`) and streams 1 byte per weight instead of 4,
computing y_n = s_n * sum_k x_k q_nk + b_n. Greedy speculation stays bitwise identical to
plain decoding under int8, since that kernel is shape-invariant as the fp32 one is.
A tied lm_head shares its embedding, so the embedding takes the rounded values too.
"""
from __future__ import annotations

import torch

from ..errors import ConfigError

WEIGHT_DTYPES = ("float32", "int8")
INT8_MAX = 127      # symmetric: -127..127, so that -q is representable for every q


def int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) float -> (q (N, K) int8, s (N,) float32), w ~ q * s[:, None]. An all-zero
    row gets scale 1 (q = 0), so that q is always recoverable from q * s."""
    w = w.detach().float()
    amax = w.abs().amax(dim=1)                                       # (N,)
    s = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, s


def quantized_linears(model) -> list:
    """The model's linears that int8 quantization rounds: attention, MLP and lm_head."""
    out = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    return out + [model.lm_head]


def quantize(model, weights: str) -> None:
    """Round `model`'s linear weights in place to `weights` ("float32": leave them)."""
    if weights not in WEIGHT_DTYPES:
        raise ConfigError(f"weights must be one of {', '.join(WEIGHT_DTYPES)}, not {weights!r}")
    model.weight_dtype = weights
    if weights == "float32":
        return
    with torch.no_grad():
        for linear in quantized_linears(model):
            q, s = int8_per_channel(linear.weight)
            linear.weight.copy_((q.float() * s[:, None]).to(linear.weight.dtype))
            linear.weight_scale = s.to(linear.weight.device)


def int8_weight(linear) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 (N, K), s (N,)) of a quantized linear: q = round(W / s) is exact, since W holds
    q * s rounded to fp32 (a relative error of 2^-24 against a rounding margin of 1/254)."""
    s = linear.weight_scale
    q = torch.round(linear.weight.detach().float() / s[:, None]).to(torch.int8)
    return q, s
