"""How a proposer picks its draft tokens, by each row's own rule: what q-carrying proposers share.

`pick` is one step's choice from the draft's logits; `DraftRule` is a round's, which the model
runner (models/runner.py) takes to draft k tokens and which tells it when its fused loops
apply (greedy rows only, or temperature-only sampled rows).
"""
from __future__ import annotations

import torch

from ..verify.sampling import BatchSampling, sample


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


class DraftRule:
    """A round's picking rule for k drafts (models/runner.py's DraftRule): `greedy` when every
    row takes its plain argmax, `temperature` (B,) when every row samples with temperature
    alone, each with its uniforms (B, k) drawn here, once per round, from the rows' generators."""

    def __init__(self, sampling: BatchSampling, k: int, first: list[int]):
        """first: each row's position that draft 1 fills (its number of tokens)."""
        s = self.sampling = sampling
        self.first = first
        self.greedy = s.fused_argmax
        self.uniforms = None if s.all_argmax else s.uniforms(k)                          # (B, k)
        self.temperature = s.temperature if s.temperature_only else None                 # (B,)

    def pick(self, logits: torch.Tensor, i: int, before: list[torch.Tensor]):
        """Draft i+1 from logits (B, 1, V) at position first + i; `before`: drafts 1..i."""
        s = self.sampling
        drafts = torch.stack(before, 1) if before and s.processed else None               # (B, i)
        return pick(s, logits, [[t + i] for t in self.first], drafts,
                    None if self.uniforms is None else self.uniforms[:, i])
