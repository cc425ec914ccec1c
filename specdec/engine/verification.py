"""One round's verification, for the engine: the target's logits and the draft in, the
accepted counts and the next token out. Pure functions over the verify/ rules."""
from __future__ import annotations

import torch

from ..proposers.base import Draft
from ..verify.greedy import greedy_verify
from ..verify.rejection import acceptance_probability, rejection_verify
from ..verify.sampling import BatchSampling, sample


def plain_next(logits, sampling: BatchSampling, chosen: list[list[int]]):
    """(next_token (B,), p (B, V) or None) for a round without drafts, or None for a batch
    mixing argmax and sampled rows (verification handles that). Same draws as
    verification's."""
    if sampling.all_argmax:
        return sampling.scores(logits, chosen)[:, 0].argmax(-1), None
    if not sampling.any_argmax:
        p = sampling.probs(logits, positions=chosen)[:, 0]                          # (B, V)
        return sample(p, sampling.uniforms(1)[:, 0]), p
    return None


def verify_round(logits, draft: Draft, n_draft, sampling: BatchSampling, chosen: list[list[int]],
                 want_beta: bool):
    """-> (num_accepted (B,), next_token (B,), beta (B, k) or None, p_bonus (B, V) or None).
    Greedy and coupled rows are verified by argmax on their scores, the others by
    rejection sampling. beta, each draft's acceptance probability, is computed for
    sampled batches when `want_beta` (the policy learns from it; argmax acceptance is
    already deterministic given the context); p_bonus is the target's distribution after the
    last draft (sampled batches)."""
    tokens = draft.tokens.to(logits.device)
    if sampling.all_argmax:
        return (*greedy_verify(sampling.scores(logits, chosen, tokens), tokens, n_draft), None, None)
    p = sampling.probs(logits, positions=chosen, drafts=tokens)                     # (B, k+1, V)
    kk = tokens.shape[1]
    u = sampling.uniforms(kk + 1)
    n_acc, nxt = rejection_verify(p, draft.probs, tokens, n_draft, u[:, :kk], u[:, kk])
    beta = (acceptance_probability(p, draft.probs, tokens)                          # (B, k)
            if kk > 0 and want_beta else None)
    if sampling.any_argmax:
        scores = sampling.scores(logits, chosen, tokens)                            # (B, k+1, V)
        g_acc, g_nxt = greedy_verify(scores, tokens, n_draft)
        n_acc = torch.where(sampling.argmax_mask, g_acc, n_acc)
        nxt = torch.where(sampling.argmax_mask, g_nxt, nxt)
        if beta is not None:
            match = (tokens == scores[:, :kk].argmax(-1)).to(beta.dtype)
            beta = torch.where(sampling.argmax_mask[:, None], match, beta)
    return n_acc, nxt, beta, p[:, kk]
