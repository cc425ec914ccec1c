"""What one decode round carries from stage to stage (engine.py: schedule -> propose -> verify ->
commit), and what it reports to the k policy at the end."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..batch import Batch
from ..costs.key import CostKey
from ..proposers.base import Draft


@dataclass
class Proposal:
    """The propose stage's output: the draft and what the round verifies of it."""
    draft: Draft                  # a chain (parents None) or a token tree, (B, kk) tokens
    rows: list[list[int]]         # (B, kk) the draft tokens as host lists
    num_draft: list[int]          # (B,) drafts verified per row, after the policy's row caps
    cost_key: CostKey             # whose drafting this round was (proposer.cost_key())


@dataclass
class Verdict:
    """The verify stage's output. A chain's accepted path is its first `accepted` drafts; a
    tree's is a branch of node indices, so the commit stage treats both as paths."""
    accepted: list[int]           # (B,) accepted drafts per row
    next_ids: list[int]           # (B,) the recovered or bonus token (a plain round's token)
    paths: list[list[int]]        # (B, accepted) the accepted drafts' indices in the draft
    beta: list[list[float]] | None   # (B, kk) acceptance probabilities, when the policy asks
    logits: torch.Tensor          # (B, kk+1, V) the target's, for log-probabilities
    hidden: torch.Tensor | None   # (B, kk+1, d) the target's final hidden states (feature heads)


@dataclass
class RoundResult:
    batch: Batch                  # the rows this round ran, row b = batch[b]
    k: int                        # drafts asked of the proposer per row (0: a plain round)
    cost_key: CostKey             # whose drafting this round was (proposer.cost_key())
    num_draft: list[int]          # (B,) drafts verified per row, <= k
    accepted: list[int]           # (B,) accepted drafts per row, <= num_draft
    dt: float                     # seconds of the whole round (propose, verify, commit)
    # (B, k) each draft's acceptance probability given its context (verify.rejection.
    # acceptance_probability; greedy rows 0/1), when the policy asks for it
    accept_prob: list[list[float]] | None = None
    # (B,) the tokens verification gave each row: its accepted drafts, then the recovered or
    # bonus token (the plain token in a round without drafts), before stop and length checks
    # cut them; the engine's own list, handed over without a copy
    emitted: list[list[int]] | None = None
