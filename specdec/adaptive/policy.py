"""`k="auto"`: each round, draft the k that maximises expected tokens per second.

    rate(k) = sum_rows E[tokens | a_row, k]  /  T(b, k)
    T(b, k) = t_round(b, k, L, mode) * exp(drift(b, k))
    k* = 0 if rate(0) >= max_{k>=1} rate(k), else the smallest k >= 1 with
         rate(k) >= max((1 - TIE) * max_{k>=1} rate(k), rate(0))

- E[tokens | a, k] comes from per-position Beta posteriors per request and per proposer
  (acceptance.py), capped by each request's remaining max_new_tokens.
- t_round is the cost model's whole round (costs/) for the batch's sampling mode at its
  longest cache length L. The cost model is built above the engine and handed in; it may
  measure a batch size it has not seen on first use (`ensure`, `ensure_rounds`), cached
  on disk, so once per machine.
- drift(b, k) is how much a round costs now relative to the model (drift.py). Steps that
  are not typical of their k stay out of its fit: those during which the cost model
  measured, the first of a (b, k) shape (kernel set-up) and the first after k = 0 (the
  draft model catches up).
- Near-ties among k >= 1 go to the smaller k (TIE): the deep positions' estimates rest on
  the fewest observations, and an argmax over noisy estimates favours those that came out
  high. Whether to draft at all stays a plain argmax; the resume charge guards that switch.
- k = 0 is plain decoding. After k = 0 the estimates relax toward an optimistic prior
  (acceptance.py), so the policy tries drafting again when the relaxed estimate pays.
- Cadence. At an unchanged batch size the policy re-evaluates every RECHECK rounds and
  keeps its k in between; at once when a request joins or leaves, when a row has no more
  than k tokens left, and in the round after a switch, so that a failed probe ends after
  one round. The estimates move over ~20 rounds; an evaluation costs ~0.4 ms
  (`benchmarks/policy_overhead.py`).
- Resuming costs. The first drafting round after n plain ones makes a draft model catch up
  on n tokens. From k = 0, every k > 0 carries min(n, RECHECK) * resume(b) / RECHECK
  seconds more: the catch-up of a switch after the shortest idle spell, spread over as many
  rounds. resume(b), per caught-up token, is learned from resuming steps, starting from
  t_draft(b). Without it, a near tie between k = 1 and k = 0 flips and pays it each time.
- Draining. When no request waits for a row (`batch.draining`), a finished row is not
  refilled, and k minimises the expected time until the last row finishes instead
  (drain.py). With one row this is the rate objective again.

Rows. The engine verifies a dense (B, k+1) block, so a per-row cap below the batch k saves
no target compute and only forgoes tokens: `row_caps()` is None.
"""
from __future__ import annotations

import math

import numpy as np

from ..costs.cost_model import CostModel
from ..engine.policy import KPolicy
from ..engine.round import RoundResult
from ..costs.key import CostKey
from ..proposers.base import Proposer
from .acceptance import AcceptanceTracker
from .drain import drain_seconds
from .drift import Drift

RECHECK = 4           # at an unchanged batch size, re-evaluate every this many rounds: the
                      # estimates move over ~20 rounds, an evaluation costs ~0.4 ms
LOG_CLIP = 1.0        # one step's log residual counts at most +-1 (a factor of e): a stall
                      # (another process, a page fault) cannot swing the fit either
TIE = 0.02            # among k >= 1, a larger k must beat the best smaller one by more than this


def near_best(score: np.ndarray) -> int:
    """(k_max+1,) score, higher is better -> k. k = 0 (plain) if it is the argmax; otherwise the
    smallest k >= 1 whose score is within TIE of the best k >= 1 and not below plain's (module
    doc)."""
    drafting = score[1:]
    best = drafting.max() if drafting.size else -np.inf
    if score[0] >= best:
        return 0
    return 1 + int(np.flatnonzero(drafting >= max((1.0 - TIE) * best, score[0]))[0])   # never below plain


class AdaptiveK(KPolicy):
    """The rate-maximising k (module doc). `k_max` caps k; `proposer` is the engine's (its
    cost_key() per round); `cost_model` prices rounds. Nothing here measures the machine
    except the cost model's own lazy `ensure` calls."""
    name = "auto"
    wants_accept_prob = True

    def __init__(self, k_max: int, proposer: Proposer, cost_model: CostModel | None):
        cap = proposer.max_k
        self.k_max = 0 if proposer.name == "none" or cost_model is None else min(k_max, cap or k_max)
        self.proposer = proposer
        self.cost = cost_model
        self.acc = AcceptanceTracker(max(self.k_max, 1))
        self.drift = Drift(self.k_max)
        self._skip_fit = False
        self._seen: set[tuple[int, int]] = set()   # (b, k) shapes already run once
        self._prev_k = 0
        self._idle_rounds = 0                      # consecutive k = 0 rounds
        self._since, self._eval_b = RECHECK, 0     # rounds since the last evaluation, at batch size
        self._resume: dict[int, float] = {}        # b -> seconds per caught-up token
        self._curves: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._pred: np.ndarray | None = None       # (k_max+1,) model step times at the last evaluation
        self._corrected: np.ndarray | None = None  # the same with the drift, sans catch-up
        self.last_choice: dict = {}                # for inspection: tokens, times, rate by k

    # ---- the decision ---------------------------------------------------------------------
    def step_times(self, b: int, L: int, key: CostKey, sampled: bool = False) -> np.ndarray:
        """(k_max+1,) modelled seconds of a round drafting k = 0..k_max, before the online
        correction: the cost model's t_round(key, b, k, L, sampled) (forwards plus the measured
        per-round overhead), from a per-(b, key, mode) curve linear in L."""
        ck = (b, key, sampled)
        if ck not in self._curves:
            base, slope = self.cost.curve(key, b, self.k_max, sampled)
            self._curves[ck] = (np.asarray(base), np.asarray(slope))
        base, slope = self._curves[ck]
        return np.maximum(base + slope * (L - self.cost.target.l_ref), 0.5 * base)

    def choose(self, batch) -> int:
        b = len(batch)
        if self.k_max == 0 or b == 0:
            return 0
        k = self._prev_k
        if self._since < RECHECK and b == self._eval_b and (
                k == 0 or all(s.params.max_new_tokens - s.num_output > k for s in batch)):
            return k                                 # between evaluations: keep k
        self._since, self._eval_b = 0, b
        key = self.proposer.cost_key()
        sampling = getattr(batch, "sampling", None)            # a plain list of sequences: greedy
        sampled = sampling is not None and not sampling.all_greedy
        if self.cost.ensure(b) | self.cost.ensure_rounds(b, key, sampled):
            self._skip_fit = True
            self._curves.clear()
        L = max(len(s.token_ids) for s in batch)
        remaining = [max(1, s.params.max_new_tokens - s.num_output) for s in batch]
        tokens = self.acc.expected_tokens(key, remaining)                          # (k_max+1,)
        ks = np.arange(self.k_max + 1)
        self._pred = self.step_times(b, L, key, sampled)
        times = self._pred * np.exp(self.drift.predict(b, ks))                 # (k_max+1,)
        self._corrected = times.copy()
        if self._idle_rounds:                        # drafting again: the draft model catches up
            per_token = self._resume.get(b)
            if per_token is None:                    # the model's draft step, at the machine's drift
                per_token = self.cost.t_draft(key, b, L) * float(times[1] / self._pred[1])
            times[1:] += min(self._idle_rounds, RECHECK) * per_token / RECHECK
        rate = tokens / times
        k = near_best(rate)                                           # near-ties go to the smaller k
        drain = None
        if getattr(batch, "draining", False) and b > 1:               # no row will be refilled
            drain = self._drain_seconds(batch, key, L, sampled, remaining, times)
            k = near_best(1.0 / drain)
        if k != self._prev_k:
            self._since = RECHECK - 1                # a switch (a probe, say) is checked next round
        self.last_choice = {"b": b, "L": L, "tokens": tokens.tolist(), "times": times.tolist(), "k": k,
                            "drain": None if drain is None else drain.tolist()}
        return k

    def _drain_seconds(self, batch, key, L, sampled, remaining, times) -> np.ndarray:
        """(k_max+1,) expected seconds until a draining batch's last row finishes (drain.py),
        from the smaller batch sizes' modelled steps at the current drift, and this round's
        catch-up charge once for the switch rather than spread over RECHECK rounds. Steps are
        modelled at sizes 1, 2, 4, .. below b and interpolated in between: a first curve at a
        size costs milliseconds (4 ms each, 265 ms for all 63 sizes below 64, measured)."""
        b, ks = len(batch), np.arange(self.k_max + 1)
        sizes = [1 << i for i in range(b.bit_length()) if 1 << i < b] + [b]
        known = np.array([self.step_times(s, L, key, sampled) * np.exp(self.drift.predict(s, ks))
                          if s < b else self._corrected for s in sizes])              # (len(sizes), k_max+1)
        step = np.stack([np.interp(np.arange(1, b + 1), sizes, known[:, k]) for k in ks], axis=1)  # (b, k_max+1)
        mean, var = self.acc.row_tokens(key, remaining)                            # (b, k_max+1)
        out = drain_seconds(mean, var, remaining, step)
        out[1:] += (times[1] - self._corrected[1]) * RECHECK
        return out

    # ---- lifecycle and learning ------------------------------------------------------------
    def start(self, row, seq):
        self._since = RECHECK            # a new request: evaluate at once
        self.acc.start(row)              # admission is a step of its own: no decode time to skip

    def move_row(self, src, dst):
        self.acc.move_row(src, dst)

    def observe(self, result: RoundResult) -> None:
        if self.k_max == 0:
            return
        key, k, dt, b = result.cost_key, result.k, result.dt, len(result.batch)
        if result.lookahead is not None:            # the previous round's position k + 1
            self.acc.record_position(key, *result.lookahead)
        self.acc.record(key, result.num_draft, result.accepted, k, result.accept_prob)
        shape = (b, k)
        resumed = k > 0 and self._prev_k == 0
        if self._pred is not None and not self._skip_fit:      # a step the model predicted
            # (between evaluations: from the last one, at the same batch size)
            pred = max(float(self._pred[k]), 1e-9)
            if resumed and 0 < self._idle_rounds <= RECHECK:
                excess = max(dt - float(self._corrected[k]), 0.0) / self._idle_rounds
                old = self._resume.get(b)
                self._resume[b] = excess if old is None else 0.5 * (old + excess)
            elif shape in self._seen and not resumed:              # typical of its k
                residual = math.log(max(dt, 1e-9) / pred)
                self.drift.add(b, k, min(max(residual, -LOG_CLIP), LOG_CLIP))
        self._seen.add(shape)
        self._idle_rounds = self._idle_rounds + 1 if k == 0 else 0
        self._since += 1
        self._prev_k = k
        self._skip_fit = False
