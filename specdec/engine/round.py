"""What one decode round did: the engine's report to its k policy."""
from __future__ import annotations

from dataclasses import dataclass

from ..batch import Batch
from ..costs.key import CostKey


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
