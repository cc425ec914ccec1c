"""Predicting the speed-up of speculative decoding from acceptance and measured costs.

Leviathan et al. (2023): if each draft token is accepted independently with probability
alpha, a round that drafts k tokens yields on average

    E[tokens per round] = (1 - alpha^(k+1)) / (1 - alpha)

target tokens. Their per-round cost k*c + 1 (in units of one target step) is replaced here
by measured times: t_target(b, k+1) + k * t_draft(b), so

    speed-up(b, k) = E[tokens per round] * t_target(b, 1) / (t_target(b, k+1) + k * t_draft(b)).

The i.i.d. assumption fails when acceptance falls with draft position or differs between
prompts; `expected_tokens_positional` and `expected_tokens_mixture` are the better estimates.

Requests are finite: the last round of a row is cut at its max_new_tokens, and in a batch the
rows finish at different rounds, so the batch shrinks while the slowest rows catch up.
`simulate_speedup` follows that round by round (Monte Carlo over acceptance draws) with
the measured cost of a round at each batch size. Everything here is pure arithmetic on
numbers measured elsewhere.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def expected_tokens(alpha: float, k: int) -> float:
    """Leviathan's expected tokens per round: (1 - alpha^(k+1)) / (1 - alpha), in [1, k+1]."""
    if k <= 0:
        return 1.0
    alpha = min(max(alpha, 0.0), 1.0)
    if alpha >= 1.0 - 1e-12:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_positional(cond_alphas: Sequence[float], k: int) -> float:
    """1 + sum_j prod_{i<=j} alpha_i: the expectation when acceptance depends on position.

    `cond_alphas[j]` is P(draft j+1 accepted | drafts 1..j accepted). Only the first k count;
    asking for more positions than were measured raises ValueError.
    """
    if k > len(cond_alphas):
        raise ValueError(f"only {len(cond_alphas)} positions measured, asked for k={k}")
    total, reach = 1.0, 1.0
    for a in cond_alphas[:k]:
        reach *= a
        total += reach
    return total


def expected_tokens_mixture(alphas: Sequence[float], k: int, weights: Sequence[float] | None = None) -> float:
    """The i.i.d. formula averaged over prompts, each with its own alpha (Jensen-aware)."""
    if not alphas:
        raise ValueError("no per-prompt alphas")
    w = list(weights) if weights is not None else [1.0] * len(alphas)
    return sum(wi * expected_tokens(a, k) for a, wi in zip(alphas, w)) / sum(w)


def expected_tokens_empirical(accepted_lengths: Sequence[int], k: int) -> float:
    """E[min(L, k)] + 1 over measured accepted lengths L (from rounds that drafted >= k)."""
    if not accepted_lengths:
        raise ValueError("no accepted lengths")
    return 1.0 + sum(min(n, k) for n in accepted_lengths) / len(accepted_lengths)


def fit_alpha(accepted_lengths: Sequence[int], k: int, draft_lengths: Sequence[int] | None = None) -> float:
    """Maximum-likelihood i.i.d. alpha from accepted counts of rounds that drafted k tokens.

    Each round is a truncated geometric: n accepts, then one rejection unless n == k, so
    alpha = accepted / (accepted + rejections). This is not vLLM's acceptance rate
    (accepted / drafted), which is biased low because positions after a rejection are
    never tried. `draft_lengths` gives each round's proposed count when it was below k
    (draft-free proposers).
    """
    drafted = draft_lengths if draft_lengths is not None else [k] * len(accepted_lengths)
    acc = sum(accepted_lengths)
    rej = sum(1 for n, d in zip(accepted_lengths, drafted) if n < d)  # a round ends early only on a rejection
    return acc / (acc + rej) if acc + rej else 0.0


def conditional_alphas(accepted_per_pos: Sequence[int], drafts: int) -> list[float]:
    """Per-position acceptance P(j accepted | 1..j-1 accepted) from vLLM's per-position counts."""
    out, prev = [], drafts
    for a in accepted_per_pos:
        out.append(a / prev if prev else 0.0)
        prev = a
    return out


def round_cost(t_target: Callable[[int, int], float], t_draft: Callable[[int], float], b: int, k: int) -> float:
    """Seconds for one round at batch b: one verify forward over k+1 positions plus k draft steps."""
    return t_target(b, k + 1) + k * t_draft(b)


def cost_ratio(t_target, t_draft, b: int, k: int) -> float:
    """Round cost in units of one plain decoding step at the same batch size."""
    return round_cost(t_target, t_draft, b, k) / t_target(b, 1)


def speedup(tokens_per_round: float, ratio: float) -> float:
    """Speed-up over plain decoding: tokens per round divided by the round's relative cost."""
    return tokens_per_round / ratio


def predicted_speedup(alpha: float, k: int, ratio: float) -> float:
    return speedup(expected_tokens(alpha, k), ratio)


def break_even_alpha(k: int, ratio: float, tol: float = 1e-9) -> float | None:
    """Smallest alpha at which speculation with k drafts pays (speed-up >= 1).

    Returns 0.0 when even alpha = 0 pays (ratio <= 1), None when nothing pays (ratio > k+1,
    the most a round can yield). Bisection: expected_tokens is increasing in alpha.
    """
    if ratio <= 1.0:
        return 0.0
    if ratio > k + 1:
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) >= ratio:
            hi = mid
        else:
            lo = mid
    return hi


def best_k(tokens_for_k: Callable[[int], float], ratio_for_k: Callable[[int], float],
           ks: Sequence[int]) -> tuple[int, float]:
    """(k, speed-up) maximising predicted speed-up over `ks`; k = 0 (plain, 1.0x) if none beats it."""
    best = (0, 1.0)
    for k in ks:
        s = speedup(tokens_for_k(k), ratio_for_k(k))
        if s > best[1]:
            best = (k, s)
    return best


def crossover(xs: Sequence[float], ys: Sequence[float], level: float = 1.0) -> float | None:
    """First x where the piecewise-linear curve (xs, ys) falls below `level`, interpolated.

    None if it never does. If it starts below, returns xs[0].
    """
    pts = sorted(zip(xs, ys))
    if not pts:
        return None
    if pts[0][1] < level:
        return pts[0][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if y1 < level <= y0:
            return x0 + (y0 - level) / (y0 - y1) * (x1 - x0)
    return None


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    return (predicted - measured) / measured if measured else float("inf")


def simulate_speedup(alpha: float | Sequence[float], k: int, b: int, new_tokens: int,
                     t_round: Callable[[int, int], float], trials: int = 400, seed: int = 0,
                     draft_rate: float | Sequence[float] = 1.0) -> float:
    """Expected speed-up of decoding `new_tokens` per row for a batch of b rows, k drafts per
    round each accepted i.i.d. with probability alpha (one for all rows, or one per row),
    over plain decoding of the same.

    t_round(a, k) is the seconds of a round with a active rows (k = 0: a plain step). A row
    gains min(accepted + 1, tokens left) per round and leaves when done; plain decoding
    takes new_tokens steps of the full batch. `draft_rate` (one, or one per row): the share of
    rounds in which the row's proposer drafts at all (a draft-free proposer finds nothing to
    propose in new text); a row without a draft gains one token, and a round where no active
    row drafted costs a plain step. Deterministic for a given seed."""
    if k <= 0 or new_tokens <= 0:
        return 1.0
    cost = np.array([0.0] + [t_round(a, k) for a in range(1, b + 1)])          # (b+1,) by active rows
    plain = np.array([0.0] + [t_round(a, 0) for a in range(1, b + 1)])         # (b+1,)
    a = np.broadcast_to(np.asarray(alpha, dtype=float).reshape(-1, 1), (b, 1))  # (b, 1) per row
    r = np.broadcast_to(np.asarray(draft_rate, dtype=float).reshape(-1), (b,))  # (b,) per row
    rng = np.random.default_rng(seed)
    left = np.full((trials, b), new_tokens)                                    # (trials, b)
    spent = np.zeros(trials)
    while (left > 0).any():
        active = (left > 0).sum(1)                                             # (trials,)
        ok = rng.random((trials, b, k)) < a                                    # (trials, b, k)
        accepted = np.cumprod(ok, axis=2).sum(2)                               # leading accepts
        if (r < 1).any():
            drafts = (rng.random((trials, b)) < r) & (left > 0)                # (trials, b)
            accepted = accepted * drafts
            spent += np.where(drafts.any(1), cost[active], plain[active])
        else:
            spent += cost[active]
        left = np.maximum(left - (accepted + 1), 0)
    return new_tokens * t_round(b, 0) / float(spent.mean())


def with_draft_rate(tokens: float, ratio: float, rate: float) -> float:
    """The steady-state speed-up when only a share `rate` of rounds draft (tokens per drafting
    round `tokens`, costing `ratio` plain steps); the others give one token for one plain step."""
    return (rate * tokens + 1 - rate) / (rate * ratio + 1 - rate)


def pooled_speedup(speedups: Sequence[float]) -> float:
    """Speed-up over groups that each decode the same number of tokens plainly in equal time:
    total plain time over total speculative time, i.e. the harmonic mean."""
    return len(speedups) / sum(1.0 / s for s in speedups)
