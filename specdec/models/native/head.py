"""A feature head's drafting loop in one C call (decoder.c, `sd_head_draft`).

    proj = pack(native, w_feature)                       # the feature half of eh_proj, (d, d)
    tokens, q = head_draft(native, feed, feats, pos0, k, cache, tok_part, proj, hnorm, eps, vocab)

`native` is the NativeForward of the head's one-layer decoder (models/feature_head.py,
head_decoder). Greedy without `temperature`; with it, each step samples from softmax(logits /
temperature) over the head's vocabulary at the given uniforms, and q comes back over the full
vocabulary, zero outside the head's (verification's q).
"""
from __future__ import annotations

import ctypes

import torch

from ..kv_cache import KVCache

_P = ctypes.c_void_p


def pack(native, weight: torch.Tensor) -> torch.Tensor:
    """An (N, K) float weight in the decoder's panel layout."""
    w = weight.detach().to(torch.float32).contiguous()
    out = torch.empty(native.lib.sd_packed_floats(*w.shape))
    native.lib.sd_pack(_P(w.data_ptr()), w.shape[0], w.shape[1], _P(out.data_ptr()))
    return out


def head_draft(native, feed: torch.Tensor, feats: torch.Tensor, pos0: torch.Tensor, steps: int, cache: KVCache,
               tok_part: torch.Tensor, proj: torch.Tensor, hnorm: torch.Tensor, eps: float, vocab: torch.Tensor,
               temperature: torch.Tensor | None = None, uniforms: torch.Tensor | None = None,
               full_vocab: int = 0, n_feed: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Feed (B, T0) tokens with features feats (B, T0, d) at pos0 (B,) onwards, of which row b's
    first n_feed[b] are real (default: all; the rest right padding), and pick a token from each
    row's last real entry; then feed each picked token with the head's own output, `steps` picks
    in all -> (token ids (B, steps), q (B, steps, full_vocab) or None). tok_part (V, d), proj
    packed by `pack`, hnorm (d,): an entry's input x = tok_part[token] + proj · rmsnorm(f).
    temperature (B,) and uniforms (B, steps): sample instead of taking the argmax."""
    feed = (feed[:, None] if feed.dim() == 1 else feed).to(torch.long).contiguous()          # (B, T0)
    B, T0 = feed.shape
    d, N = native.model.config.hidden_size, native.model.config.vocab_size
    feats = feats.reshape(B, T0, d).to(torch.float32).contiguous()
    pos0 = pos0.to(torch.long).contiguous()
    lens = torch.tensor(n_feed if n_feed is not None else [T0] * B, dtype=torch.long)
    if int(lens.min()) < 1 or int(lens.max()) > T0:
        raise ValueError(f"n_feed must lie in 1..{T0}")
    out, logits = torch.empty(B, steps, dtype=torch.long), torch.empty(B * T0, N)
    work = torch.empty((2 * T0 + 1) * B * d + B * N)
    sampled = temperature is not None
    if sampled:
        temperature = temperature.to(torch.float32).contiguous()
        uniforms = uniforms.to(torch.float32).contiguous()
        q = torch.zeros(B, steps, full_vocab)
    threads, cs = torch.get_num_threads(), native._cache_struct(cache)
    with native._lock:
        scratch = native._prepare(B * T0, cache, threads)
        rc = native.lib.sd_head_draft(
            ctypes.byref(native.struct), ctypes.byref(cs), B, T0, _P(feed.data_ptr()), _P(feats.data_ptr()),
            _P(lens.data_ptr()), _P(pos0.data_ptr()), steps, _P(tok_part.data_ptr()), _P(proj.data_ptr()), _P(hnorm.data_ptr()),
            ctypes.c_float(eps), _P(vocab.data_ptr()), _P(temperature.data_ptr()) if sampled else None,
            _P(uniforms.data_ptr()) if sampled else None, full_vocab, _P(q.data_ptr()) if sampled else None,
            _P(out.data_ptr()), _P(logits.data_ptr()), _P(work.data_ptr()), scratch, threads)
    native._check(rc, cache)
    return out, (q if sampled else None)
