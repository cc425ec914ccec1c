"""Weight-only quantization: every linear weight rounded to int8 or int4, activations fp32.

    int8, one scale per output channel:   W (N, K) -> q (N, K) int8, s (N,)
        s_n = max_k |W_nk| / 127,   q_nk = round(W_nk / s_n)
    int4, one scale per group of INT4_GROUP inputs (llama.cpp's Q4_0 rule):
        W (N, K) -> q (N, K/2) uint8 (two nibbles a byte), s (N, K/INT4_GROUP)
        s_ng = m_ng / -8, with m_ng the group's weight of largest |w|;  q = clamp(round(W/s), -8, 7)

Each quantized linear's `weight` becomes q (a frozen Parameter) and its `weight_scale` buffer
holds s, so `state_dict` carries both. An int4 byte holds input 2i in its low nibble and
2i+1 in its high one, each a 4-bit two's complement. Norms, the token embedding and the KV
cache stay fp32. The compiled decoder (models/native) streams q: int8 computes y_n = s_n *
sum_k x_k q_nk + b_n, int4 dequantizes each weight (q s_g, one rounding) before its FMA. The
eager path builds the float weight per call (`dense_weight`). Greedy speculation stays
bitwise identical to plain decoding under either, since both kernels are shape-invariant as
the fp32 one is. A tied lm_head is untied first: the embedding keeps its fp32 rows.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..errors import ConfigError

WEIGHT_DTYPES = ("float32", "int8", "int4")
INT8_MAX = 127      # symmetric: -127..127, so that -q is representable for every q
INT4_GROUP = 32     # inputs per int4 scale: llama.cpp Q4_0's block, so that the two compare
                    # like for like (benchmarks/real_size.py); the native kernel's I4_GROUP
# config.json's entry in a folder written by `specdec quantize`: its linears hold quantized
# weights and their "<name>.weight_scale" float32 tensors (transformers does not read these)
QUANT_CONFIGS = {
    "int8": {"quant_method": "specdec-int8", "bits": 8, "symmetric": True, "granularity": "per_output_channel"},
    "int4": {"quant_method": "specdec-int4", "bits": 4, "symmetric": True, "granularity": "group",
             "group_size": INT4_GROUP, "packing": "two per uint8, low nibble first"},
}
STORAGE = {"int8": torch.int8, "int4": torch.uint8}       # the weight Parameter's dtype


def stored_weights(config: dict) -> str:
    """The weight type a checkpoint's config.json says its linears are stored in."""
    method = (config.get("quantization_config") or {}).get("quant_method")
    return next((w for w, q in QUANT_CONFIGS.items() if q["quant_method"] == method), "float32")


def int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) float -> (q (N, K) int8, s (N,) float32), w ~ q * s[:, None]. An all-zero
    row gets scale 1 (q = 0)."""
    w = w.detach().to(torch.float32, copy=True)                      # the one temporary, rounded in place
    amax = torch.linalg.vector_norm(w, ord=float("inf"), dim=1)      # (N,) max |w|
    s = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    return w.div_(s[:, None]).round_().clamp_(-INT8_MAX, INT8_MAX).to(torch.int8), s


def int4_groupwise(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) float -> (q (N, K/2) uint8, s (N, K/INT4_GROUP) float32), w ~ unpacked q * s
    per group. An all-zero group gets scale 1 (q = 0)."""
    N, K = w.shape
    g = w.detach().to(torch.float32, copy=True).view(N, K // INT4_GROUP, INT4_GROUP)
    at = g.abs().argmax(dim=2, keepdim=True)
    m = g.gather(2, at).squeeze(2)                                   # (N, G) the largest-|w| weight
    s = torch.where(m != 0, m / -8, torch.ones_like(m))
    q = g.div_(s[..., None]).round_().clamp_(-8, 7).to(torch.int8).view(N, K)
    nib = q.to(torch.uint8) & 15                                     # two's complement nibbles
    return nib[:, 0::2] | (nib[:, 1::2] << 4), s


def unpack_int4(q: torch.Tensor) -> torch.Tensor:
    """q (N, K/2) uint8 -> (N, K) int8 in -8..7."""
    lo, hi = (q & 15).to(torch.int8), (q >> 4).to(torch.int8)
    both = torch.stack([lo, hi], dim=2).view(q.shape[0], -1)         # (N, K) inputs in order
    return torch.where(both >= 8, both - 16, both)


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """(N, K) float weights of a quantized linear's (weight, weight_scale)."""
    if q.dtype == torch.uint8:
        full = unpack_int4(q).float()
        return (full.view(q.shape[0], -1, INT4_GROUP) * s[..., None]).view(q.shape[0], -1)
    return q.float() * s[:, None]


ROUND = {"int8": int8_per_channel, "int4": int4_groupwise}


def quantized_linears(model) -> list:
    """The model's linears that quantization rounds: attention, MLP and lm_head."""
    out = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    return out + [model.lm_head]


def quantized_names(model) -> list[str]:
    """Module paths of `quantized_linears(model)` ("model.layers.0.self_attn.q_proj", ...)."""
    chosen = {id(m) for m in quantized_linears(model)}
    return [name for name, m in model.named_modules() if id(m) in chosen]


def check_weights(weights: str | None, model_config=None) -> None:
    """`weights` is a weight type, or None (as the checkpoint stores them); int4 also needs
    every linear's input size (of `model_config`, if given) to be whole groups."""
    if weights is not None and weights not in WEIGHT_DTYPES:
        raise ConfigError(f"weights must be one of {', '.join(WEIGHT_DTYPES)}, not {weights!r}")
    if weights == "int4" and model_config is not None:
        c = model_config
        for name, k in (("hidden_size", c.hidden_size), ("intermediate_size", c.intermediate_size),
                        ("heads x head_dim", c.num_attention_heads * c.head_dim)):
            if k % INT4_GROUP:
                raise ConfigError(f"int4 weights need linear inputs in groups of {INT4_GROUP}: "
                                  f"{name} is {k}; use --dtype int8")


def _shapes(weights: str, w: torch.Tensor) -> tuple[tuple, tuple]:
    N, K = w.shape
    return ((N, K), (N,)) if weights == "int8" else ((N, K // 2), (N, K // INT4_GROUP))


def quant_layout(model, weights: str) -> None:
    """Give `model` quantized weights and scale buffers of the right shapes, values unset: the
    layout a state dict rounded by `round_state_dict` loads into (on the meta device, so that
    no fp32 copy of those weights ever exists)."""
    check_weights(weights, model.config)
    if model.lm_head.weight is model.model.embed_tokens.weight:
        model.lm_head.weight = nn.Parameter(torch.empty_like(model.lm_head.weight))         # untie
    for linear in quantized_linears(model):
        w = linear.weight
        qs, ss = _shapes(weights, w)
        linear.weight = nn.Parameter(torch.empty(qs, dtype=STORAGE[weights], device=w.device), requires_grad=False)
        linear.register_buffer("weight_scale", torch.empty(ss, device=w.device))


def round_state_dict(sd: dict, names: list[str], weights: str = "int8") -> None:
    """Round the weights of the linears `names` in state dict `sd` in place, one at a time:
    "<name>.weight" becomes `weights` and "<name>.weight_scale" is added."""
    for name in names:
        w = sd.pop(name + ".weight", None)
        if w is not None and w.dim() == 2 and (weights == "int8" or w.shape[1] % INT4_GROUP == 0):
            sd[name + ".weight"], sd[name + ".weight_scale"] = ROUND[weights](w)
        elif w is not None:
            sd[name + ".weight"] = w                       # the wrong shape: load_state_dict says so


def quantize(model, weights: str) -> None:
    """Round `model`'s linear weights in place to `weights` ("float32": leave them). Call
    before `prepare`: the kernels pack what they find."""
    check_weights(weights, model.config)
    if weights == "float32":
        return
    if model.weight_dtype not in ("float32", weights):
        raise ConfigError(f"the model's weights are already {model.weight_dtype}, not {weights}")
    if model.lm_head.weight is model.model.embed_tokens.weight:
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())   # untie
    with torch.no_grad():
        for linear in quantized_linears(model):
            if linear.weight.dtype == STORAGE[weights]:
                continue                                                 # already rounded
            q, s = ROUND[weights](linear.weight)
            device = linear.weight.device
            linear.weight = nn.Parameter(q.to(device), requires_grad=False)
            linear.register_buffer("weight_scale", s.to(device))


def weight_type(linear) -> str:
    """"int8", "int4" or "float32": what `linear`'s weight holds."""
    return {torch.int8: "int8", torch.uint8: "int4"}.get(linear.weight.dtype, "float32")


def quantized_weight(linear) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, s) of a quantized linear: int8 (N, K) and (N,), or int4 (N, K/2) and (N, K/32)."""
    return linear.weight.detach(), linear.weight_scale
