"""One acceptance probability past the drafted k, at no extra forward.

When a round accepts all k of a row's drafts, verification has already computed the
target's distribution for the next position, p_{k+1} (the bonus token's). In the next round
the draft model catches up by feeding [d_k, bonus], and its output after d_k is q_{k+1}.
Their overlap

    beta_{k+1} = sum_x min(p_{k+1}(x), q_{k+1}(x))      (greedy rows: argmax q == bonus)

is the probability that a (k+1)-th draft would have been accepted, given the same context
as a real one: an observation at a position the policy did not draft. Without it, a policy
that settles on k never sees position k+1, whose estimate then only inherits position k's.

The engine calls `remember` after each round and `betas` after the next proposal; a row's
observation is dropped if the request left, the round in between drafted nothing, or the
proposer changed. Proposers without logits (n-gram, suffix, and auto, which merges drafts
from several) give none.

At most ROWS rows are observed, taking turns across the batch, in every EVERY-th round:
each costs a softmax over the vocabulary and a copy of the target's probabilities, and the
observation as a whole some twenty small tensor operations, about 0.2 ms, 1-2% of a k = 2
step at batch 4 (benchmarks/policy_overhead.py). A few observations every other round are
plenty for one position's estimate, whose window is some 50 rounds.
"""
from __future__ import annotations

import torch

from ..proposers.base import Draft
from ..verify.sampling import BatchSampling

ROWS = 4            # rows observed per round at most
EVERY = 2           # observe after every this many rounds


class Lookahead:
    def __init__(self):
        self._pending: dict[int, int] = {}     # seq id -> its row of self._p
        self._p: torch.Tensor | None = None    # (n, V) target probs at the pending rows' bonus
        self._k, self._key = 0, None
        self._turn = 0                         # where the next round starts picking rows
        self._round = 0

    def remember(self, batch, k: int, key: str, num_draft: list[int], accepted: list[int],
                 p_bonus: torch.Tensor | None) -> None:
        """After a round that drafted k (p_bonus: (B, V) the target's probabilities after the
        k-th draft, None for an all-greedy batch): rows that accepted every draft wait for q."""
        self._round += 1
        due = k > 0 and self._round % EVERY == 0
        rows = [b for b in range(len(batch)) if due and num_draft[b] == k and accepted[b] == k]
        if len(rows) > ROWS:                   # take turns: ROWS of them, from where we stopped
            start = self._turn % len(rows)
            rows = sorted((rows[start:] + rows[:start])[:ROWS])
            self._turn += ROWS
        self._pending = {batch[b].id: i for i, b in enumerate(rows)}
        # a copy of those rows only: p_bonus is a view of the round's (B, k+1, V) probabilities
        self._p = p_bonus[torch.tensor(rows, device=p_bonus.device)] if rows and p_bonus is not None else None
        self._k, self._key = k, key

    def betas(self, batch, draft: Draft, key: str, sampling: BatchSampling) -> tuple[int, torch.Tensor] | None:
        """-> (position, (B,) beta with NaN where nothing was observed), or None. `position`
        is the previous round's k + 1 (1-based), the same for every row."""
        pending, self._pending = self._pending, {}
        logits = draft.lookahead_logits                                            # (B, V)
        if not pending or logits is None or key != self._key:
            return None
        rows = [(b, pending[seq.id]) for b, seq in enumerate(batch) if seq.id in pending]
        if not rows:
            return None
        dev = logits.device
        now = torch.tensor([b for b, _ in rows], device=dev)                       # (n,)
        then = [r for _, r in rows]
        lg = logits[now]                                                           # (n, V)
        beta = None
        if sampling.any_greedy or self._p is None:                                 # greedy rows
            bonus = torch.tensor([batch[b].token_ids[-1] for b, _ in rows], device=dev)
            beta = (lg.argmax(-1) == bonus).float()
        if self._p is not None and not sampling.all_greedy:
            q = sampling.probs(lg[:, None], now)[:, 0]                             # (n, V)
            overlap = torch.minimum(self._p[then], q).sum(-1).clamp_(0.0, 1.0)
            beta = overlap if beta is None else torch.where(sampling.greedy_mask[now], beta, overlap)
        out = torch.full((len(batch),), float("nan"), device=dev)
        out[now] = beta
        if sampling.any_coupled:           # coupled rows: their draft's argmax is keyed noise, not q
            for b, _ in rows:
                if sampling.noises[b] is not None:
                    out[b] = float("nan")
        return self._k + 1, out
