"""Lossless speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

Draft token x at position j is accepted with probability min(1, p_j(x) / q_j(x)).
At the first rejection the recovered token is drawn from norm(max(0, p_j - q_j)); if
all drafts are accepted, a bonus token is drawn from p_k. The output is distributed
exactly as p. A proposer without probabilities counts as a one-hot q.
"""
from __future__ import annotations

import torch

from .greedy import accepted_prefix
from .sampling import sample


def rejection_verify(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                     num_draft: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """p (B, k+1, V) target probs; q (B, k, V) draft probs or None (one-hot);
    draft_tokens (B, k); num_draft (B,); u_accept (B, k) and u_sample (B,) uniforms in [0, 1).
    Returns (num_accepted (B,), next_token (B,)).
    """
    B, k = draft_tokens.shape
    idx = draft_tokens[:, :, None]
    p_x = p[:, :k].gather(2, idx).squeeze(2)                                  # (B, k)
    q_x = torch.ones_like(p_x) if q is None else q.gather(2, idx).squeeze(2)
    accept = u_accept * q_x < p_x                                             # u < p/q, no division
    num_accepted = accepted_prefix(accept, num_draft)                         # (B,)

    at = num_accepted[:, None, None].expand(B, 1, p.shape[2])
    p_at = p.gather(1, at).squeeze(1)                                         # (B, V)
    rejected = num_accepted < num_draft                                       # (B,)
    if q is None:
        residual = p_at.scatter(1, draft_tokens.gather(1, num_accepted.clamp(max=k - 1)[:, None]), 0.0) \
            if k > 0 else p_at
    else:
        q_at = q.gather(1, at.clamp(max=k - 1)).squeeze(1) if k > 0 else torch.zeros_like(p_at)
        residual = (p_at - q_at).clamp_min(0.0)
    residual = guarded(residual, p_at)
    final = torch.where(rejected[:, None], residual, p_at)                    # recovered or bonus dist
    return num_accepted, sample(final, u_sample)


def guarded(residual: torch.Tensor, p_at: torch.Tensor) -> torch.Tensor:
    """residual (B, V) unnormalised, p_at (B, V) -> the residual, or p where it is all zero.
    When p == q exactly a rejection has probability 0; the empty residual is guarded anyway."""
    empty = residual.sum(-1, keepdim=True) <= 0
    return torch.where(empty, p_at, residual)


def recovery_distribution(p_at: torch.Tensor, q_at: torch.Tensor) -> torch.Tensor:
    """p_at, q_at (B, V) at the rejected position -> norm(max(0, p - q)) (B, V), the law of the
    recovered token (a one-hot q: p with the draft token removed, renormalised)."""
    residual = guarded((p_at - q_at).clamp_min(0.0), p_at)
    return residual / residual.sum(-1, keepdim=True)


def acceptance_probability(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor) -> torch.Tensor:
    """p (B, >=k, V) target probs; q (B, k, V) draft probs or None (one-hot); draft_tokens (B, k)
    -> beta (B, k): the probability that draft j is accepted given its context,
    beta_j = sum_x min(p_j(x), q_j(x)) = 1 - TV(p_j, q_j) (one-hot q: p_j(x_j)).

    It is the expectation of the accept indicator over the draft's sample and the uniform,
    so an estimate of the acceptance rate built from beta at the positions verification
    reached is unbiased like one built from the indicators, with less variance
    (Rao-Blackwell). Meaningful only up to the first rejection: later contexts hold a
    rejected token.
    """
    k = draft_tokens.shape[1]
    if q is None:
        return p[:, :k].gather(2, draft_tokens[:, :, None]).squeeze(2)
    return torch.minimum(p[:, :k], q).sum(-1).clamp_(0.0, 1.0)

