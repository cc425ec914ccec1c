"""How many tokens a proposer drafts when asked for k: the width its rounds verify.

    widths = DraftWidths(k_max)
    widths.record(key, k, num_draft)        # from AdaptiveK.observe(RoundResult)
    widths.expected(key)                    # (k_max + 1,) E[width | asked k], k = 0..k_max

A draft model or a feature head drafts every token asked for; n-gram and suffix draft only as
far as their match goes (often none, on text without repeats). The online round table
(online.py) prices a round by the width it verified, since that is what its forwards cost; a
round *asked* for k then costs what a round of its expected width costs. Without this, asking
an n-gram proposer for 8 was priced as verifying 8, and the cold policy asked for less than the
measured table's (which times rounds as asked, at the widths its proposer gave) where long
matches were there to be had. Per position i, the share of rounds asked for more than i that
drafted more than i, decayed like the acceptance estimates (acceptance.PROPOSER_DECAY) and
starting from one full-width round: a proposer drafts in full until its rounds say otherwise.
"""
from __future__ import annotations

import numpy as np

from ..costs.key import CostKey
from .acceptance import PROPOSER_DECAY

PRIOR_ROUNDS = 1.0     # the full-width rounds every position starts from: optimism, soon outweighed


class DraftWidths:
    """Per cost key: decayed counts of rounds asked beyond position i and drafted beyond it."""

    def __init__(self, k_max: int):
        self.k_max = k_max
        self.counts: dict[CostKey, np.ndarray] = {}       # key -> (2, k_max): (drafted, asked) beyond i
        self.version = 0                                   # bumped by every record
        self._pos = np.arange(k_max)                       # draft positions 0..k_max-1

    def record(self, key: CostKey, k: int, num_draft: list[int]) -> None:
        """A round that asked each row for k drafts; row b drafted num_draft[b] (<= k)."""
        if k < 1 or self.k_max < 1:
            return
        c = self.counts.setdefault(key, np.zeros((2, self.k_max)))
        c *= PROPOSER_DECAY
        made = np.asarray(num_draft)[:, None]                                   # (B, 1)
        c[0] += (self._pos < made).sum(axis=0)
        c[1] += (self._pos < min(k, self.k_max)) * len(num_draft)
        self.version += 1

    def expected(self, key: CostKey) -> np.ndarray:
        """(k_max + 1,) the expected width of a round asked for k = 0..k_max drafts."""
        c = self.counts.get(key)
        share = np.ones(self.k_max) if c is None else (c[0] + PRIOR_ROUNDS) / (c[1] + PRIOR_ROUNDS)
        return np.concatenate([[0.0], np.cumsum(share)])
