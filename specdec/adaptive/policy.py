"""k = "auto": each round, draft the k that maximises expected tokens per second.

    rate(k) = sum_rows E[tokens | a_row, k] / t(b, k, L),        k = 0..k_max (0: plain)
    k* = 0 if rate(0) >= max_{k>=1} rate(k), else the smallest k >= 1 with
         rate(k) >= max((1 - TIE) * max_{j>=1} rate(j), rate(0))

t is the cost model's real round (costs/) for the batch's sampling mode at its longest cache
length L: its measured round table where it has one (`specdec profile`), else, with `online`,
the forwards plus what the observed rounds add (online.py: learned while decoding), at the
width a round asked for k is expected to verify (width.py); E[tokens]
comes from acceptance.py, capped by each row's remaining tokens. A draining batch (nobody waits for a row) minimises its expected
finish time instead (drain.py). From k = 0, every k > 0 carries the draft model's catch-up,
min(n, RECHECK) * t_draft(b) / RECHECK seconds after n plain rounds (a draining batch: all of
it). At an unchanged batch size k is re-evaluated every RECHECK rounds; at once when the batch
changes or proposes as another arm (`auto`), a row has no more than k tokens left, or k has
just changed. One k serves the whole batch: verification is a dense (b, k + 1) block, so
`row_caps()` is None. docs/adaptive.md.
"""
from __future__ import annotations

import numpy as np

from ..costs.cost_model import CostModel
from ..costs.profiling import grid_rows
from ..engine.policy import KPolicy
from ..engine.round import RoundResult
from ..proposers.base import Proposer
from .acceptance import AcceptanceTracker
from .drain import drain_seconds
from .online import OnlineRounds
from .width import DraftWidths

RECHECK = 4     # rounds between evaluations at an unchanged batch size: the estimates move over
                # ~20 rounds, and evaluating every round costs more than its choice gains
                # (docs/adaptive.md §5, *Cadence*; benchmarks/policy_overhead.py)
TIE = 0.02      # a longer drafting k must beat the best shorter one by 2%: deep positions' estimates
                # rest on the fewest rounds, and an argmax favours those that came out high
                # (docs/adaptive.md §5, *Near-ties*)


def near_best(score: np.ndarray) -> int:
    """(k_max + 1,) score, higher is better -> k: plain decoding if it scores best, else the
    smallest k >= 1 within TIE of the best k >= 1 and not below plain."""
    best = score[1:].max() if len(score) > 1 else -np.inf
    if score[0] >= best:
        return 0
    return 1 + int(np.flatnonzero(score[1:] >= max((1.0 - TIE) * best, score[0]))[0])


class AdaptiveK(KPolicy):
    """`k_max` caps k; `proposer` is the engine's (its cost_key() names a round's costs and
    estimates); `cost_model` prices rounds (None, or proposer "none": always k = 0); `online`
    learns the round costs the cost model has no table for from the rounds observed (None:
    such rounds are priced by their forwards alone)."""
    name = "auto"
    wants_accept_prob = True

    def __init__(self, k_max: int, proposer: Proposer, cost_model: CostModel | None,
                 online: OnlineRounds | None = None):
        none = proposer.name == "none" or cost_model is None
        self.k_max = 0 if none else min(k_max, proposer.max_k or k_max)
        self.proposer, self.cost, self.online = proposer, cost_model, None if none else online
        self.acc = AcceptanceTracker(max(self.k_max, 1))
        self.widths = DraftWidths(self.k_max)       # what a round asked for k drafts (online prices)
        self._k = self._idle = 0                  # the last round's k; plain rounds since drafting
        self._since, self._eval_b = RECHECK, 0    # rounds since the last evaluation, and its batch size
        self._eval_key = None                     # and the proposer's cost key then
        self.last_choice: dict = {}               # for inspection: tokens, times, scores by k
        self._tables: dict = {}                   # (b, key, sampled) -> (online version, round costs at 1..b)

    def _learns(self, key, sampled: bool) -> bool:
        """Whether rounds of `key` in this mode are priced by the online table."""
        return self.online is not None and (key, sampled) not in self.cost.rounds

    def curve(self, key, b: int, sampled: bool) -> tuple[np.ndarray, np.ndarray]:
        """(base, slope): a round asked for k = 0..k_max drafts costs base[k] + slope[k] * (L - l_ref).
        The online table prices the width a round verified: asked for k, it costs its expected
        width's price (a measured table times rounds as asked)."""
        base, slope = self.cost.curve(key, b, self.k_max, sampled)
        if self._learns(key, sampled):
            base = self.online.prices(key, sampled, b, self.k_max)
            width, ks = self.widths.expected(key), np.arange(self.k_max + 1)
            base, slope = np.interp(width, ks, base), np.interp(width, ks, slope)
        return base, slope

    def step_times(self, b: int, L: int, key, sampled: bool = False) -> np.ndarray:
        """(k_max + 1,) seconds of a round drafting k = 0..k_max (see `curve`)."""
        base, slope = self.curve(key, b, sampled)
        return base + slope * (L - self.cost.target.l_ref)

    def choose(self, batch) -> int:
        b = len(batch)
        if self.k_max == 0 or b == 0:
            return 0
        left = [s.params.max_new_tokens - s.num_output for s in batch]
        key = self.proposer.cost_key()                # auto: the arm most rows play this round
        if (self._since < RECHECK and b == self._eval_b and key == self._eval_key
                and (self._k == 0 or min(left) > self._k)):
            return self._k                                             # between evaluations
        self._since, self._eval_b, self._eval_key = 0, b, key
        sampling = getattr(batch, "sampling", None)                    # a list: greedy
        sampled = sampling is not None and not sampling.all_greedy
        L, remaining = max(len(s.token_ids) for s in batch), [max(1, r) for r in left]
        times = self.step_times(b, L, key, sampled)
        whole = min(self._idle, RECHECK) * self.cost.t_draft(key, b, L) if self._idle else 0.0
        catch_up = np.where(np.arange(self.k_max + 1) > 0, whole, 0.0)     # the draft model's, k > 0
        if getattr(batch, "draining", False) and b > 1:
            mean, var = self.acc.row_tokens(key, remaining)                 # (b, k_max+1) each
            tokens, drain = mean.sum(axis=0), self._drain_seconds(b, L, remaining, mean, var, key, sampled)
            score = 1.0 / (drain + catch_up)
        else:
            tokens = self.acc.expected_tokens(key, remaining)
            score = tokens / (times + catch_up / RECHECK)
        k = near_best(score)
        if k != self._k:
            self._since = RECHECK - 1                # a switch (a probe, say) is checked next round
        self.last_choice = {"b": b, "L": L, "k": k, "tokens": tokens.tolist(),
                            "times": (times + catch_up / RECHECK).tolist(), "score": score.tolist()}
        return k

    def _drain_seconds(self, b, L, remaining, mean, var, key, sampled) -> np.ndarray:
        """(k_max + 1,) expected seconds until the last row finishes (drain.py). A round at sizes
        1..b costs base + slope * (L - l_ref), interpolated between the sizes 1, 2, 4, .., b: a
        table memoized per (b, key, sampled) until the online table learns something new."""
        version = ((self.online.version(key, sampled), self.widths.version) if self._learns(key, sampled)
                   else None)
        memo = self._tables.get((b, key, sampled))
        if memo is None or memo[0] != version:
            sizes = grid_rows(b)
            curves = np.array([self.curve(key, s, sampled) for s in sizes])                 # (S, 2, k_max+1)
            self._tables[b, key, sampled] = version, np.apply_along_axis(
                lambda col: np.interp(np.arange(1, b + 1), sizes, col), 0, curves)         # (b, 2, k_max+1)
        table = self._tables[b, key, sampled][1]
        return drain_seconds(mean, var, remaining, table[:, 0] + table[:, 1] * (L - self.cost.target.l_ref))

    def start(self, row, seq):
        self._since = RECHECK                        # a new request: evaluate at once
        self.acc.start(row, seq.params.verification)

    def row_state(self):
        return [self.acc.rows]

    def observe(self, result: RoundResult) -> None:
        if self.k_max:
            self.acc.record(result.cost_key, result.num_draft, result.accepted, result.k, result.accept_prob)
            if self.online is not None:
                self._learn(result)
                self.widths.record(result.cost_key, result.k, result.num_draft)
            self._idle = self._idle + 1 if result.k == 0 else 0
            self._since, self._k = self._since + 1, result.k

    def _learn(self, result: RoundResult) -> None:
        """Hand the round's time to the online table, as a round verifying the widest draft it
        made; except a round that carries work of earlier rounds (the draft model's catch-up
        after plain rounds), one that drafted nothing though asked to, and a key and mode with
        a measured table."""
        key, k = result.cost_key, max(result.num_draft, default=0)
        sampling = getattr(result.batch, "sampling", None)
        sampled = sampling is not None and not sampling.all_greedy
        if (result.k and self._idle) or (result.k and not k) or k > result.k or not self._learns(key, sampled):
            return
        L = max(len(s.token_ids) for s in result.batch)
        self.online.record(key, sampled, len(result.batch), k, L, result.dt)
