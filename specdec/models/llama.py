"""A lean Llama-family decoder (Llama, Mistral, Qwen2) with Hugging Face parameter names.

One entry point: `forward(tokens[B,T], positions[B,T], cache) -> logits[B,T,V]`.
Prefill, decode and multi-position verification are the same call with different T.
With a cache (inference) the call goes to the model's runner (models/runner.py), which
alone knows whether the compiled decoder, CUDA graphs or eager PyTorch runs it. With
`cache=None` it runs plain causal attention over the T tokens (training).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .kv_cache import KVCache
from .rope import inv_freq
from .tree import TreeAttention, visible
from .memory import cache_bytes
from .quantize import dequantize, weight_type
from .linear import LinearKernel
from .runner import ModelRunner, argmax_into

ATTN_MIN_ROWS = 4   # bmm on CPU is row-invariant from 4 query rows up; pad to that
S_BLOCK = 64        # caches are sized in whole blocks of this many keys


def padded(n: int) -> int:
    """n rounded up to whole attention blocks of S_BLOCK keys."""
    return -(-n // S_BLOCK) * S_BLOCK


class Linear(nn.Linear):
    """nn.Linear that switches to a prepacked kernel for inference (see linear.py). Its weight
    may be int8 or int4 with a `weight_scale` buffer (models/quantize.py)."""
    kernel: LinearKernel | None = None
    packed: torch.Tensor | None = None

    def dense_weight(self) -> torch.Tensor:
        """(N, K) the weight in floats: quantized weights times their scales."""
        if self.weight.dtype in (torch.int8, torch.uint8):
            return dequantize(self.weight, self.weight_scale)
        return self.weight

    def prepare(self, kernel: LinearKernel) -> None:
        # derived from the weight, not state: a plain tensor, out of parameters() and state_dict()
        # (the stock kernel "packs" to the weight Parameter itself, which would register anew).
        # The whole-model kernel packs nothing here: its cached forward has its own copy
        self._parameters.pop("packed", None)
        self.kernel = kernel
        self.packed = None if getattr(kernel, "whole_model", False) else kernel.pack(self.dense_weight()).detach()

    def forward(self, x):
        if self.packed is None or torch.is_grad_enabled():
            return F.linear(x, self.dense_weight(), self.bias)
        return self.kernel(x, self.packed, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.h, self.hkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.q_proj = Linear(d, self.h * hd, bias=cfg.attention_bias)
        self.k_proj = Linear(d, self.hkv * hd, bias=cfg.attention_bias)
        self.v_proj = Linear(d, self.hkv * hd, bias=cfg.attention_bias)
        self.o_proj = Linear(self.h * hd, d, bias=False)

    def forward(self, x, cos, sin, layer: int, cache: KVCache | None, positions, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)     # (B, H, T, D)
        k = self.k_proj(x).view(B, T, self.hkv, self.hd).transpose(1, 2)   # (B, Hkv, T, D)
        v = self.v_proj(x).view(B, T, self.hkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is None:          # training: causal, or `mask` (B, 1, T, T) True where a query may look
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                 enable_gqa=self.hkv != self.h)
        else:
            out = self._cached(q, k, v, layer, cache, positions, mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.h * self.hd))

    def _cached(self, q, k, v, layer, cache, positions, mask):
        B, H, T, D = q.shape
        S = mask.shape[-1]
        kc, vc = cache.k[layer], cache.v[layer]
        rows = torch.arange(B, device=q.device)[:, None, None]
        heads = torch.arange(self.hkv, device=q.device)[None, :, None]
        kc[rows, heads, positions[:, None, :]] = k                          # write (B, Hkv, T, D)
        vc[rows, heads, positions[:, None, :]] = v
        g = H // self.hkv
        qg = q.reshape(B, self.hkv, g * T, D)                               # (B, Hkv, G*T, D)
        m = g * T
        if m < ATTN_MIN_ROWS:
            qg = torch.cat([qg, qg.new_zeros(B, self.hkv, ATTN_MIN_ROWS - m, D)], dim=2)
        scores = qg @ kc[:B, :, :S].transpose(-1, -2) * (D ** -0.5)         # (B, Hkv, >=G*T, S)
        scores = scores[:, :, :m].view(B, self.hkv, g, T, S).masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(B, self.hkv, m, S)
        if m < ATTN_MIN_ROWS:
            probs = torch.cat([probs, probs.new_zeros(B, self.hkv, ATTN_MIN_ROWS - m, S)], dim=2)
        out = probs @ vc[:B, :, :S]                                         # (B, Hkv, >=G*T, D)
        return out[:, :, :m].reshape(B, H, T, D)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(d, f, bias=False)
        self.up_proj = Linear(d, f, bias=False)
        self.down_proj = Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, layer, cache, positions, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, layer, cache, positions, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaModel(nn.Module):
    """Decoder-only transformer. Parameter names match Hugging Face's `*ForCausalLM`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", torch.empty(cfg.head_dim // 2), persistent=False)
        self.reset_rope()
        self.kernel: LinearKernel | None = None
        self.runner = ModelRunner(self)   # eager until prepare(); the loader adds CUDA graphs
        self.provenance: dict | None = None   # the weights' file, stored types and how (loader.provenance)

    def reset_rope(self) -> None:
        """inv_freq (D/2,) from the config (again after a load into uninitialised storage)."""
        c = self.config
        if self.inv_freq.device.type != "meta":
            with torch.no_grad():
                self.inv_freq.copy_(inv_freq(c.rope_theta, c.head_dim, dict(c.rope_scaling or ())))

    @property
    def weight_dtype(self) -> str:
        """"int8" or "int4" when the linears hold quantized weights (models/quantize.py), else
        "float32"."""
        return weight_type(self.lm_head)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def prepare(self, kernel: LinearKernel) -> "LlamaModel":
        """Freeze for inference: pack every linear weight for `kernel`. The whole-model kernel
        builds the compiled decoder instead, or falls back to a row-invariant linear kernel
        where the model's shapes or the machine cannot run it. Packed weights are copies:
        prepare again after changing the weights."""
        self.eval()
        self.runner, kernel = ModelRunner.build(self, kernel)
        self.kernel = kernel
        for m in self.modules():
            if isinstance(m, Linear):
                m.prepare(kernel)
        return self

    def rope(self, positions):
        freqs = positions[..., None].float() * self.inv_freq                # (B, T, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]                    # (B, 1, T, D)
        return emb.cos(), emb.sin()

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None,
                num_layers: int | None = None, hidden_only: bool = False,
                argmax_out: torch.Tensor | None = None, tree: TreeAttention | None = None,
                hidden_out: torch.Tensor | None = None, embeds: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None):
        """tokens, positions: (B, T) int64 -> logits (B, T, V).

        With a cache, K/V are written at `positions` for rows [0, B) and each query attends to
        the cached keys at positions <= its own; with a `tree` (models/tree.py), at the tree's
        slots, and each query attends to the cache before its block and to its ancestors. `num_layers` runs only the first layers
        (layer-skip self-speculation uses it with a cache of its own). `argmax_out`, a (B, T)
        int64 tensor, receives each position's argmax (torch.argmax's answer); the compiled
        decoder computes it while the logits are in cache, which spares a greedy round its
        tensor ops after the forward. `hidden_out`, a (B, T, hidden) float tensor, receives the
        final normed hidden states the logits are read from (a feature-head proposer's input),
        copied from the same forward. `embeds`, a (B, T, hidden) float tensor, replaces the
        token embeddings as the first layer's input (a feature head's; `tokens` are then unread).
        `attn_mask`, without a cache only (training): a (B, T, T) bool tensor, True where query t
        may attend to key s, in place of the causal mask (a parallel draft's mask groups).
        """
        if attn_mask is not None and cache is not None:
            raise ValueError("attn_mask is for the uncached (training) forward")
        if cache is not None and not torch.is_grad_enabled():
            return self.runner.forward(tokens, positions, cache, num_layers, hidden_only, argmax_out, tree,
                                       hidden_out, embeds)
        logits = self.eager(tokens, positions, cache, num_layers, hidden_only, tree, hidden_out, embeds, attn_mask)
        return argmax_into(logits, argmax_out)

    def eager(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None,
              num_layers: int | None = None, hidden_only: bool = False, tree: TreeAttention | None = None,
              hidden_out: torch.Tensor | None = None, embeds: torch.Tensor | None = None,
              attn_mask: torch.Tensor | None = None):
        """The forward in eager PyTorch, op by op (what the CUDA graphs capture)."""
        B, T = tokens.shape
        x = self.model.embed_tokens(tokens) if embeds is None else embeds   # (B, T, d)
        cos, sin = self.rope(positions)
        mask, slots = (None if attn_mask is None else attn_mask[:, None]), positions   # (B, 1, T, T)
        if cache is not None and tree is not None:        # a tree: its slots and ancestors
            slots = tree.slots.to(tokens.device)
            mask = ~visible(tree, cache.max_len).to(tokens.device)[:, None, None]      # (B, 1, 1, T, S)
        elif cache is not None:
            # every row attends over the whole cache: a key length set by the longest row would
            # change the shape of the other rows' attention, and with it their rounding
            keys = torch.arange(cache.max_len, device=tokens.device)
            mask = (keys[None, None, :] > positions[:, :, None])[:, None, None]  # (B, 1, 1, T, S)
        layers = self.model.layers if num_layers is None else self.model.layers[:num_layers]
        for i, layer in enumerate(layers):
            x = layer(x, cos, sin, i, cache, slots, mask)
        x = self.model.norm(x)                                               # (B, T, d)
        if hidden_out is not None:
            hidden_out.copy_(x)
        return x if hidden_only else self.lm_head(x)                         # (B, T, V)

    def cache_bytes(self, rows: int, max_len: int, num_layers: int | None = None) -> int:
        """Bytes of `new_cache(rows, max_len, num_layers)`."""
        c = self.config
        return cache_bytes(num_layers or c.num_hidden_layers, rows, c.num_key_value_heads, max_len, c.head_dim,
                           self.model.norm.weight.dtype)

    def new_cache(self, rows: int, max_len: int, num_layers: int | None = None) -> KVCache:
        c = self.config
        return KVCache(num_layers or c.num_hidden_layers, rows, c.num_key_value_heads, max_len,
                       c.head_dim, dtype=self.model.norm.weight.dtype, device=self.device)

