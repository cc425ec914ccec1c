"""Drafter-invariant sampling: noise keyed by (seed, position), shared by target and draft.

With the Gumbel-max trick the token at absolute position t is

    x_t = argmax_v ( log p_t(v) + g_t(v) ),   g_t(v) = -log(-log u_t(v))

where p_t is the processed (temperature, top-k, top-p) target distribution and u_t is a
vector of uniforms that depends on nothing but the request's seed and the position t.
Each x_t is an exact draw from p_t and draws at different positions are independent, so
the law of the text is the target's. A draft model proposes argmax(log q_t + g_t) with the
same g_t, and a draft token is accepted exactly when it equals x_t: verification is the
greedy prefix match on these scores. The text is then a function of (prompt, seed) alone,
whatever the proposer, k or batch; plain decoding gives the same tokens.

The price is acceptance: the chance that the two argmaxes agree is at least
(1 - TV) / (1 + TV), below rejection sampling's 1 - TV (TV the total variation between p
and q). Rolling back needs no generator state: the noise of a position never changes.

u_t is drawn on the host from a generator seeded with a 64-bit hash of (seed, t)
(SplitMix64's finaliser), so the text is the same on every device. A request computes
each position's noise once: the draft and the target, and every round that revisits a
position after a rejection, read it from `CoupledNoise`'s small cache.
"""
from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1
CACHE_POSITIONS = 64      # positions kept per request: > K_MAX + 1, the widest round


def splitmix64(x: int) -> int:
    """SplitMix64's finaliser: a bijective 64-bit hash with full avalanche."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def position_seed(seed: int, position: int) -> int:
    """The generator seed for one (request seed, absolute position): below 2^63."""
    return splitmix64((seed & MASK64) ^ splitmix64(position)) >> 1


def gumbel(seed: int, position: int, vocab: int) -> torch.Tensor:
    """(V,) float32 Gumbel noise -log(-log u) for one position (u = 0 gives -inf: never chosen)."""
    u = torch.rand(vocab, generator=torch.Generator().manual_seed(position_seed(seed, position)))
    return -torch.log(-torch.log(u))


class CoupledNoise:
    """One request's noise by position, computed once and cached for the positions a round
    can revisit."""

    def __init__(self, seed: int, vocab: int):
        self.seed, self.vocab = seed, vocab
        self._cache: dict[int, torch.Tensor] = {}

    def at(self, positions: list[int]) -> torch.Tensor:
        """(T,) absolute positions -> (T, V) noise."""
        out = []
        for t in positions:
            g = self._cache.get(t)
            if g is None:
                if len(self._cache) >= CACHE_POSITIONS:
                    del self._cache[min(self._cache)]          # the oldest position: committed
                g = self._cache[t] = gumbel(self.seed, t, self.vocab)
            out.append(g)
        return torch.stack(out)


def coupled_scores(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """probs (..., V) processed distribution, noise (..., V) -> scores whose argmax is the
    coupled sample. Tokens of zero probability (filtered by top-k/top-p) score -inf."""
    return torch.log(probs) + noise
