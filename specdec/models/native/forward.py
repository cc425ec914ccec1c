"""`NativeForward`: a LlamaModel's cached forward run by the compiled decoder (decoder.c).

    native = NativeForward(model, lib)         # packs the weights; builds the rope table
    logits = native(tokens, positions, cache)  # (B, T) int64 each -> (B, T, V), one C call

At load every linear weight is copied into the decoder's packed panel layout (decoder.c,
`sd_pack`), with q/k/v and gate/up concatenated into one matrix per layer. The Hugging Face
parameters are left as they are (state_dict, the eager path and training see no change);
the packed copy is derived data, like oneDNN's prepacked weights. A model rounded to int8
(models/quantize.py) is packed as int8 panels with one scale per output (1 byte a weight),
one rounded to int4 as int4 panels with their group scales (linear.h, `sd_pack_i4`).
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import torch

from ..kv_cache import KVCache
from ..quantize import quantized_weight
from . import abi

_P, _PP = abi.P, abi.PP


def _ptrs(tensors) -> ctypes.Array:
    return (_P * len(tensors))(*[t.data_ptr() if t is not None else None for t in tensors])


def supported(model) -> str | None:
    """None if the native decoder can run `model`, else why not."""
    c = model.config
    if model.device.type != "cpu" or model.model.norm.weight.dtype != torch.float32:
        return "the native decoder runs fp32 on the CPU"
    for name, n in (("hidden_size", c.hidden_size), ("head_dim", c.head_dim),
                    ("intermediate_size", c.intermediate_size)):
        if n % 8:
            return f"{name} {n} is not a multiple of 8"
    if c.head_dim > 256:
        return f"head_dim {c.head_dim} is over the native decoder's 256"
    if c.num_attention_heads % c.num_key_value_heads:
        return "attention heads are not a multiple of the key/value heads"
    return None


class NativeForward:
    """Holds the packed weights, the rope table and the C structs for one model. The packed
    weights are a copy: after changing the model's weights, prepare the model again."""

    def __init__(self, model, lib):
        self.model, self.lib, c = model, lib, model.config
        self.build_id = Path(lib._name).stem                 # decoder-<hash of source, flags, CPU>
        layers = model.model.layers
        attn = [(l.self_attn.q_proj, l.self_attn.k_proj, l.self_attn.v_proj) for l in layers]
        self.weights = model.weight_dtype                          # float32, int8 or int4 (models/quantize.py)
        self._qkv, self._qkv_s = self._pack_all(attn)
        self._qkv_bias = [torch.cat([m.bias.detach() for m in qkv]).contiguous() if c.attention_bias else None
                          for qkv in attn]
        self._gate_up, self._gate_up_s = self._pack_all([(l.mlp.gate_proj, l.mlp.up_proj) for l in layers])
        self._o, self._o_s = self._pack_all([(l.self_attn.o_proj,) for l in layers])
        self._down, self._down_s = self._pack_all([(l.mlp.down_proj,) for l in layers])
        keep = lambda ts: [t.detach().contiguous() for t in ts]  # noqa: E731
        self._in_norm = keep(l.input_layernorm.weight for l in layers)
        self._post_norm = keep(l.post_attention_layernorm.weight for l in layers)
        self._embed = model.model.embed_tokens.weight.detach().contiguous()   # gathered by row
        self._norm = model.model.norm.weight.detach().contiguous()
        (self._head,), (head_s,) = self._pack_all([(model.lm_head,)])
        self.struct = abi.Model(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                             c.intermediate_size, c.vocab_size, c.num_hidden_layers, 0, c.rms_norm_eps,
                             self._embed.data_ptr(), self._norm.data_ptr(), self._head.data_ptr(), None, None)
        self.struct.int4 = int(self.weights == "int4")
        self._arrays = {}
        for name in ("in_norm", "qkv", "qkv_bias", "o", "post_norm", "gate_up", "down") + \
                (("qkv_s", "o_s", "gate_up_s", "down_s") if self.weights != "float32" else ()):
            self._arrays[name] = _ptrs(getattr(self, "_" + name))
            setattr(self.struct, name, ctypes.cast(self._arrays[name], _PP))
        self._head_s = head_s
        self.struct.head_s = head_s.data_ptr() if head_s is not None else None
        self._rope(c.max_position_embeddings)
        self._scratch = torch.empty(0)
        self._verify_scratch = torch.empty(0)       # verify_sample's p rows, grown as needed
        self._scratch_need: dict[tuple, int] = {}           # (rows, max_len, threads) -> floats
        self._lock = threading.Lock()   # the scratch buffer is shared: one forward at a time

    def _pack_all(self, groups) -> tuple[list, list]:
        """Each group of linears (their outputs concatenated) -> its packed panels, and its
        scales (int8: (N,); int4: packed per panel and group; None for fp32 weights): two
        lists, one entry per group."""
        packed, scales = [], []
        for group in groups:
            if self.weights == "float32":
                w, s = torch.cat([m.weight.detach() for m in group]).contiguous(), None
            else:
                qs = [quantized_weight(m) for m in group]
                w, s = torch.cat([q for q, _ in qs]).contiguous(), torch.cat([s for _, s in qs]).float().contiguous()
            n = w.shape[0]
            k = w.shape[1] * (2 if self.weights == "int4" else 1)                  # (N, K) inputs
            numel = self.lib.sd_packed_floats(n, k)
            if self.weights == "int4":
                out = torch.empty(numel // 2, dtype=torch.uint8)
                ps = torch.empty(self.lib.sd_packed_groups(n, k))
                self.lib.sd_pack_i4(_P(w.data_ptr()), _P(s.data_ptr()), n, k, _P(out.data_ptr()), _P(ps.data_ptr()))
                s = ps
            else:
                out = torch.empty(numel, dtype=w.dtype)
                pack = self.lib.sd_pack_i8 if self.weights == "int8" else self.lib.sd_pack
                pack(_P(w.data_ptr()), n, k, _P(out.data_ptr()))
            packed.append(out)
            scales.append(s)
        return packed, scales

    def _rope(self, length: int) -> None:
        """cos/sin (length, D/2) computed exactly as the eager path computes them."""
        pos = torch.arange(length)[:, None].float()
        freqs = pos * self.model.inv_freq.cpu()                              # (L, D/2)
        self._cos, self._sin = freqs.cos().contiguous(), freqs.sin().contiguous()
        self.struct.rope_len = length
        self.struct.rope_cos, self.struct.rope_sin = self._cos.data_ptr(), self._sin.data_ptr()

    @staticmethod
    def _cache_struct(cache: KVCache) -> abi.Cache:
        s = getattr(cache, "_native", None)
        if s is None:
            keep = (_ptrs(cache.k), _ptrs(cache.v))
            s = abi.Cache(ctypes.cast(keep[0], _PP), ctypes.cast(keep[1], _PP), cache.num_rows, cache.max_len)
            s._keep = keep
            cache._native = s
        return s

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                 num_layers: int | None = None, hidden_only: bool = False,
                 argmax_out: torch.Tensor | None = None, tree=None,
                 hidden_out: torch.Tensor | None = None, embeds: torch.Tensor | None = None) -> torch.Tensor:
        """tree: None (a chain), or a models.tree.TreeAttention (slots and ancestor masks).
        hidden_out: None, or (B, T, hidden) receiving the final normed hidden states, copied
        from the scratch rows the head read them from (decoder.c: h follows x). embeds: None,
        or (B, T, hidden) floats read instead of the token embeddings."""
        B, T = tokens.shape
        c = self.model.config
        if B > cache.num_rows:
            raise ValueError(f"batch of {B} rows exceeds the cache's {cache.num_rows}")
        tokens = tokens.to(torch.long).contiguous()
        positions = positions.to(torch.long).contiguous()
        if embeds is not None:
            embeds = embeds.to(torch.float32).contiguous()
            if embeds.shape != (B, T, c.hidden_size):
                raise ValueError(f"embeds of shape {tuple(embeds.shape)}; expected {(B, T, c.hidden_size)}")
        if tree is not None:
            slots, anc, base = (t.to(torch.long).contiguous() for t in (tree.slots, tree.ancestors, tree.base))
        width = c.hidden_size if hidden_only else c.vocab_size
        out = torch.empty(B, T, width)
        threads = torch.get_num_threads()
        cs = self._cache_struct(cache)
        with self._lock:
            scratch = self._prepare(B * T, cache, threads)
            call = abi.Call(B, T, tokens.data_ptr(), embeds.data_ptr() if embeds is not None else None,
                            positions.data_ptr(), slots.data_ptr() if tree is not None else None,
                            anc.data_ptr() if tree is not None else None,
                            base.data_ptr() if tree is not None else None, 0, num_layers or c.num_hidden_layers,
                            int(not hidden_only), out.data_ptr(),
                            argmax_out.data_ptr() if argmax_out is not None else None, scratch, threads)
            rc = self.lib.sd_forward(ctypes.byref(self.struct), ctypes.byref(cs), ctypes.byref(call))
            if hidden_out is not None and rc == 0:
                src = out if hidden_only else self._scratch[B * T * c.hidden_size:2 * B * T * c.hidden_size]
                hidden_out.copy_(src.view(B, T, c.hidden_size))
        self._check(rc, cache)
        return out

    def draft_argmax(self, first: torch.Tensor, pos0: torch.Tensor, steps: int, cache: KVCache,
                     num_layers: int | None = None) -> torch.Tensor:
        """Greedy drafting in one C call: feed first (B,) at pos0 (B,), then each step's argmax
        at the next position, `steps` times -> the argmaxes (B, steps). The same tokens as
        `steps` calls of this forward each followed by torch.argmax."""
        B = first.shape[0]
        c = self.model.config
        tokens = first.to(torch.long).contiguous().clone()
        pos0 = pos0.to(torch.long).contiguous()
        out = torch.empty(B, steps, dtype=torch.long)
        logits = torch.empty(B, c.vocab_size)
        threads = torch.get_num_threads()
        cs = self._cache_struct(cache)
        with self._lock:
            scratch = self._prepare(B, cache, threads)
            rc = self.lib.sd_draft_argmax(
                ctypes.byref(self.struct), ctypes.byref(cs), B, _P(tokens.data_ptr()), _P(pos0.data_ptr()),
                steps, num_layers or c.num_hidden_layers, _P(out.data_ptr()), _P(logits.data_ptr()),
                scratch, threads)
        self._check(rc, cache)
        return out

    def draft_sample(self, feed: torch.Tensor, pos0: torch.Tensor, steps: int, cache: KVCache,
                     temperature: torch.Tensor, uniforms: torch.Tensor, num_layers: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled drafting in one C call: feed (B,) or (B, T0) at pos0 (B,) onwards, then each
        step's sample at the next position, `steps` times; step s of row b samples from
        q = softmax(logits / temperature[b]) (of the last fed position) at uniforms[b, s]
        (inverse CDF, as verify.sampling.sample) -> (tokens (B, steps), q (B, steps, V))."""
        feed = (feed[:, None] if feed.dim() == 1 else feed).to(torch.long).contiguous()    # (B, T0)
        B, T0 = feed.shape
        c = self.model.config
        pos0 = pos0.to(torch.long).contiguous()
        temperature = temperature.to(torch.float32).contiguous()
        uniforms = uniforms.to(torch.float32).contiguous()                     # (B, steps)
        out = torch.empty(B, steps, dtype=torch.long)
        q = torch.empty(B, steps, c.vocab_size)
        logits = torch.empty(B * T0, c.vocab_size)
        threads = torch.get_num_threads()
        cs = self._cache_struct(cache)
        with self._lock:
            scratch = self._prepare(B * T0, cache, threads)
            rc = self.lib.sd_draft_sample(
                ctypes.byref(self.struct), ctypes.byref(cs), B, T0, _P(feed.data_ptr()), _P(pos0.data_ptr()),
                steps, num_layers or c.num_hidden_layers, _P(temperature.data_ptr()), _P(uniforms.data_ptr()),
                _P(out.data_ptr()), _P(q.data_ptr()), _P(logits.data_ptr()), scratch, threads)
        self._check(rc, cache)
        return out, q

    def verify_sample(self, logits: torch.Tensor, temperature: torch.Tensor, drafts: torch.Tensor,
                      q: torch.Tensor | None, num_draft: list[int], uniforms: torch.Tensor,
                      want_beta: bool) -> tuple[list[int], list[int], list[list[float]] | None]:
        """One round's rejection-sampling verification in one C call, for temperature-only
        rows: logits (B, k+1, V), temperature (B,), drafts (B, k), q (B, k, V) or None
        (one-hot), uniforms (B, k+1) -> (num_accepted (B,), next_token (B,), beta (B, k) or
        None) as host lists; verify.rejection.rejection_verify's rule and draws, with p =
        softmax(logits / temperature) computed while the logits are in cache."""
        B, T, V = logits.shape
        f32 = lambda t: t.to(torch.float32).contiguous()                                 # noqa: E731
        logits, temperature, uniforms = f32(logits), f32(temperature), f32(uniforms)
        drafts = drafts.to(torch.long).contiguous()
        q = f32(q) if q is not None else None
        nd = torch.tensor(num_draft, dtype=torch.long)
        n_acc, nxt = torch.empty(B, dtype=torch.long), torch.empty(B, dtype=torch.long)
        beta = torch.empty(B, T - 1) if want_beta and T > 1 else None
        with self._lock:                                 # the scratch is shared, as the forward's
            if self._verify_scratch.numel() < B * (T + 1) * V:                         # (B, T+1, V)
                self._verify_scratch = torch.empty(B * (T + 1) * V)
            scratch = self._verify_scratch
            self.lib.sd_verify_sample(
                _P(logits.data_ptr()), B, T, V, _P(temperature.data_ptr()), _P(drafts.data_ptr()),
                _P(q.data_ptr()) if q is not None else None, _P(nd.data_ptr()), _P(uniforms.data_ptr()),
                _P(n_acc.data_ptr()), _P(nxt.data_ptr()), _P(beta.data_ptr()) if beta is not None else None,
                _P(scratch.data_ptr()), torch.get_num_threads())
        return n_acc.tolist(), nxt.tolist(), beta.tolist() if beta is not None else None

    def _prepare(self, rows: int, cache: KVCache, threads: int) -> ctypes.c_void_p:
        """Under the lock: the rope table long enough for the cache, and scratch for `rows`."""
        if cache.max_len > self.struct.rope_len:
            self._rope(cache.max_len)
        shape = (rows, cache.max_len, threads)
        need = self._scratch_need.get(shape)
        if need is None:
            need = self._scratch_need[shape] = self.lib.sd_scratch_floats(ctypes.byref(self.struct), *shape)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need)
        return _P(self._scratch.data_ptr())

    def _check(self, rc: int, cache: KVCache) -> None:
        c = self.model.config
        if rc == -1:
            raise ValueError(f"a position is outside [0, {min(cache.max_len, self.struct.rope_len)})")
        if rc == -2:
            raise ValueError(f"a token id is outside [0, {c.vocab_size})")
        if rc == -4:
            raise ValueError("a token tree's slots must lie within 64 of its base")
