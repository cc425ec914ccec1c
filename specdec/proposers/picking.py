"""A draft token from a proposer's logits, by the row's own rule: what q-carrying proposers share."""
from __future__ import annotations

import torch

from ..verify.sampling import sample


def pick(s, logits: torch.Tensor, at: list[list[int]], before: torch.Tensor | None,
         u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits (B, 1, V) of the draft's next position -> (tokens (B,), q (B, V) or None).

    Greedy rows take the argmax of their scores, coupled rows of log q + the position's noise
    (BatchSampling.scores); sampled rows draw from q at the uniforms u (B,). `at`: the
    positions chosen, [[p] per row]; `before`: the drafts so far (B, i), for rows that process
    their logits (penalties), which then see the same history as the target's p will."""
    if s.all_argmax:
        return s.scores(logits, at, before)[:, 0].argmax(-1), None
    q = s.probs(logits, positions=at, drafts=before)[:, 0]                            # (B, V)
    tok = sample(q, u)
    if s.any_argmax:
        best = s.scores(logits, at, before)[:, 0].argmax(-1)
        tok = torch.where(s.argmax_mask, best, tok)
    return tok, q
