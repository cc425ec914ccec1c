"""Weight-only int8: every linear weight rounded to int8 with one scale per output channel.

    W (N, K) -> q (N, K) int8, s (N,):  s_n = max_k |W_nk| / 127,  q_nk = round(W_nk / s_n)

Each quantized linear's `weight` becomes the int8 q (a frozen Parameter, 1 byte a weight) and
its `weight_scale` buffer holds s, so `state_dict` carries both. Activations, norms, the token
embedding and the KV cache stay fp32. The compiled decoder (models/native) streams q and
computes y_n = s_n * sum_k x_k q_nk + b_n; the eager path multiplies q by s into a float
weight per call (`Linear.dense_weight`). Greedy speculation stays bitwise identical to plain
decoding under int8, since the compiled kernel is shape-invariant as the fp32 one is. A tied
lm_head is untied first: the embedding keeps its fp32 rows, the output projection is rounded.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..errors import ConfigError

WEIGHT_DTYPES = ("float32", "int8")
INT8_MAX = 127      # symmetric: -127..127, so that -q is representable for every q
# config.json's entry in a folder written by `specdec quantize`: its linears hold int8 weights
# and their "<name>.weight_scale" float32 tensors (transformers does not read this format)
QUANT_METHOD = "specdec-int8"
QUANT_CONFIG = {"quant_method": QUANT_METHOD, "bits": 8, "symmetric": True, "granularity": "per_output_channel"}


def stored_weights(config: dict) -> str:
    """The weight type a checkpoint's config.json says its linears are stored in."""
    q = config.get("quantization_config") or {}
    return "int8" if q.get("quant_method") == QUANT_METHOD else "float32"


def int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) float -> (q (N, K) int8, s (N,) float32), w ~ q * s[:, None]. An all-zero
    row gets scale 1 (q = 0)."""
    w = w.detach().to(torch.float32, copy=True)                      # the one temporary, rounded in place
    amax = torch.linalg.vector_norm(w, ord=float("inf"), dim=1)      # (N,) max |w|
    s = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    return w.div_(s[:, None]).round_().clamp_(-INT8_MAX, INT8_MAX).to(torch.int8), s


def quantized_linears(model) -> list:
    """The model's linears that int8 quantization rounds: attention, MLP and lm_head."""
    out = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        out += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    return out + [model.lm_head]


def quantized_names(model) -> list[str]:
    """Module paths of `quantized_linears(model)` ("model.layers.0.self_attn.q_proj", ...)."""
    chosen = {id(m) for m in quantized_linears(model)}
    return [name for name, m in model.named_modules() if id(m) in chosen]


def int8_layout(model) -> None:
    """Give `model` int8 weights and scale buffers of the right shapes, values unset: the
    layout a state dict rounded by `round_state_dict` loads into (on the meta device, so that
    no fp32 copy of those weights ever exists)."""
    if model.lm_head.weight is model.model.embed_tokens.weight:
        model.lm_head.weight = nn.Parameter(torch.empty_like(model.lm_head.weight))         # untie
    for linear in quantized_linears(model):
        w = linear.weight
        linear.weight = nn.Parameter(torch.empty(w.shape, dtype=torch.int8, device=w.device), requires_grad=False)
        linear.register_buffer("weight_scale", torch.empty(w.shape[0], device=w.device))


def round_state_dict(sd: dict, names: list[str]) -> None:
    """Round the weights of the linears `names` in state dict `sd` in place, one at a time:
    "<name>.weight" becomes int8 and "<name>.weight_scale" is added."""
    for name in names:
        w = sd.pop(name + ".weight", None)
        if w is not None and w.dim() == 2:
            sd[name + ".weight"], sd[name + ".weight_scale"] = int8_per_channel(w)
        elif w is not None:
            sd[name + ".weight"] = w                       # the wrong shape: load_state_dict says so


def check_weights(weights: str | None) -> None:
    """`weights` is a weight type, or None (as the checkpoint stores them)."""
    if weights is not None and weights not in WEIGHT_DTYPES:
        raise ConfigError(f"weights must be one of {', '.join(WEIGHT_DTYPES)}, not {weights!r}")


def quantize(model, weights: str) -> None:
    """Round `model`'s linear weights in place to `weights` ("float32": leave them). Call
    before `prepare`: the kernels pack what they find."""
    check_weights(weights)
    if weights == "float32":
        return
    if model.lm_head.weight is model.model.embed_tokens.weight:
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())   # untie
    with torch.no_grad():
        for linear in quantized_linears(model):
            if linear.weight.dtype == torch.int8:
                continue                                                 # already rounded
            q, s = int8_per_channel(linear.weight)
            device = linear.weight.device
            linear.weight = nn.Parameter(q.to(device), requires_grad=False)
            linear.register_buffer("weight_scale", s.to(device))


def int8_weight(linear) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 (N, K), s (N,) float32) of a quantized linear."""
    return linear.weight.detach(), linear.weight_scale
