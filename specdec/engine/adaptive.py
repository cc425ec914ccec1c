"""`k="auto"`: each round, draft the k that maximises expected tokens per second.

    rate(k) = sum_rows E[tokens | a_row, k]  /  T(b, k)
    T(b, k) = t_round(b, k, L, mode) * exp(drift(b, k))
    k* = 0 if rate(0) >= max_{k>=1} rate(k), else the smallest k >= 1 with
         rate(k) >= max((1 - TIE) * max_{k>=1} rate(k), rate(0))

- Near-ties between drafting lengths go to the smaller k (TIE = 2%). The estimates of deep
  positions rest on the fewest observations, and an argmax over noisy estimates picks the
  ones that came out high: at random/4 adaptive drafted k = 3 in most rounds of 4 of 9
  repeats, whose rounds cost 11-16% more than fixed k = 2's for 4-12% more tokens (0.93-0.96x
  fixed k = 2; docs/adaptive.md, run K). Whether to draft at all stays a plain argmax: with
  the margin there too, a closed batch at random/64 (k = 1 beats plain by ~6%, but the
  estimate hovers near the tie) stopped drafting for good, 0.93x fixed k = 1 (run L); the
  resume charge below already guards that switch. With the margin among k >= 1 only, run M
  met the goal in all 12 regimes (random/4 0.967x, random/64 0.995x the best fixed k).

- E[tokens | a, k] comes from per-position Beta posteriors per request and per proposer
  (acceptance.py), capped by each request's remaining max_new_tokens.
- t_round is the measured cost model's whole round (costs/), for the batch's sampling
  mode at its longest cache length L: real engine steps, timed by engine/calibrate.py.
  `ensure(b)` / `ensure_rounds(b, ...)` measure a batch size on its first use (cached on
  disk, so once per machine).
- drift(b, k) = a_b + c_b * k is the log of the factor by which a step now costs more (or
  less) than the cost model says (a machine slower or faster than when it was measured,
  real text rather than synthetic prompts): a ridge least-squares fit of log(measured /
  modelled step time), exponentially weighted per batch size. A factor, because a
  machine's slow or fast spell scales every k alike: the batch mostly runs one k, and the
  ridge then puts its residual into a_b, which scales every k by the same exp(a_b) and so
  keeps the ratios between the k as measured. The slope is fitted about the mean observed
  k (StepOverhead): fitted about k = 0, a residual seen only at k = 2 went partly into the
  slope, which k = 8 multiplied fourfold, and with a model measured in a slow spell
  adaptive drafted k = 3-8 at batch 16, 0.84x the best fixed k.
  On top of the line, each k's own mean residual off it (shrunk toward the line by SHAPE_N
  pseudo-steps) corrects a k that the cost model got wrong in shape, such as a kernel cliff
  at one number of positions; one k observed alone gets none (its residual is the line's).
  Steps that are not typical of a k are left out of the fit: those that
  measured the cost model, ran a (b, k) shape for the first time (kernel set-up) or
  resumed drafting after k = 0 (the draft model catches up). Prefill never enters: the
  engine admits requests in steps of their own, which call no policy.
- k = 0 is plain decoding. After k = 0 the estimates relax toward an optimistic prior
  (acceptance.py), so the policy tries drafting again when the relaxed estimate pays.
- Cadence. While the batch size is unchanged the policy re-evaluates only every RECHECK
  rounds and keeps its k in between (at once when a request joins or leaves, when a row
  has no more than k tokens left, and in the round after a switch, so that a failed
  probe ends after one round). The estimates move slowly (windows of about 20
  rounds), while an evaluation and the learning behind it cost about 0.4 ms per round,
  3% of a k = 2 step at batch 4 (`benchmarks/policy_overhead.py`); between evaluations
  the tracker only queues the rounds (acceptance.py).
- Resuming costs. The first drafting round after n plain ones makes the draft model catch
  up on the n tokens it has not seen: at batch 64 roughly 20 ms, most of a plain step. Where
  k = 1 and k = 0 are a near tie (batch 64 on prose), a policy that ignores it flips
  between them and pays it every time: 0.88x plain in one benchmark run, where either k
  alone made 0.98-1.0x. So from k = 0, every k > 0 carries m * resume(b) / RECHECK
  seconds more, m = min(n, RECHECK): the catch-up of a switch after the shortest
  idle spell, spread over as many rounds (switches after longer spells are rarer, so
  cost less per round). resume(b), per caught-up token, is learned from resuming steps
  after at most RECHECK plain rounds (their excess over the model), starting from
  t_draft(b).

- Draining. When no request waits for a row (`batch.draining`: a closed batch's end, a
  quiet server), a finished row is not refilled and the batch runs on smaller, at nearly
  the full step's cost. There k minimises the expected time until the last row finishes
  instead (drain.py): each row's remaining tokens over its expected tokens per round, with
  the spread a longer draft adds, summed over the shrinking batch's modelled steps. With
  one row this is the rate objective again. (Run H, docs/adaptive.md: at code/16 k = 4
  matched k = 2 at full batch and lost 5% to a tail of 12 small rounds against 6.)

Rows. The engine verifies a dense (B, k+1) block, so once the batch drafts k, capping a
row below k saves no target compute and only forgoes tokens: the batch k maximises the
sum over rows, and `row_caps()` is None. (With ragged verification a per-row cap would
pay; the row estimates are already there.)
"""
from __future__ import annotations

import math

import numpy as np

from ..costs.cost_model import CostModel
from .acceptance import AcceptanceTracker
from .calibrate import round_timer
from .drain import drain_seconds

FIT_DECAY = 0.95      # per observed step (~20 steps) in the overhead fit
RECHECK = 4           # at an unchanged batch size, re-evaluate every this many rounds
FIT_RIDGE = 1.0       # pseudo-steps of zero residual behind the intercept (and, at k = k_max/2,
                      # behind the slope): one odd step cannot swing the fit
SHAPE_N = 2.0         # pseudo-steps on the line behind each k's own mean residual
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


class StepOverhead:
    """residual(b, k) ~ a_b + c_b * k, fitted online by exponentially weighted ridge regression
    (AdaptiveK feeds it log residuals, log(dt / predicted)).

    The slope is fitted about the mean observed k: the batch mostly runs one k, and its
    residual then moves the level of every k alike and leaves the slope at its prior. (Fitted
    about k = 0, a residual seen only at k = 2 went partly into the slope, which k = 8
    multiplied fourfold: after a few steps 40% faster than a model measured in a slow spell,
    k = 8 looked cheaper than it was and adaptive drafted it.) Each batch size's fit shrinks
    toward a fit over all batch sizes, which itself shrinks toward zero: a batch size met for
    the first time (a closed batch's tail) starts from how the machine runs now, not from
    the raw model. Each k's exponentially weighted mean residual, measured from the data's
    centre line (mean residual at the mean k, the fitted slope) and shrunk by SHAPE_N, is
    added where the line cannot fit: a k that runs dearer than its neighbours. Plain floats, closed form: it runs every step, where numpy's per-call
    overhead would show."""

    ALL = -1                                        # the key of the fit over all batch sizes

    def __init__(self, k_max: int):
        self.ridge_c = FIT_RIDGE * max(1.0, k_max / 2) ** 2
        self.k_max = k_max
        self.sums: dict[int, list[float]] = {}     # b -> [n, Sk, Skk, Sr, Skr]
        self.shape: dict[int, tuple[list[float], list[float]]] = {}   # b -> (weight, residual sum) per k

    def observe(self, b: int, k: int, residual: float) -> None:
        w, s = self.shape.setdefault(b, ([0.0] * (self.k_max + 1), [0.0] * (self.k_max + 1)))
        for j in range(len(w)):                     # every k of this batch size forgets alike
            w[j] *= FIT_DECAY
            s[j] *= FIT_DECAY
        w[k] += 1.0
        s[k] += residual
        d = FIT_DECAY
        for key in (b, self.ALL):
            n, sk, skk, sr, skr = self.sums.get(key, (0.0, 0.0, 0.0, 0.0, 0.0))
            self.sums[key] = [d * n + 1.0, d * sk + k, d * skk + k * k, d * sr + residual, d * skr + k * residual]

    def _fit(self, key: int, prior: tuple[float, float]) -> tuple[float, float]:
        s = self.sums.get(key)
        if s is None:
            return prior
        n, sk, skk, sr, skr = s
        kbar = sk / n
        level = (sr + FIT_RIDGE * (prior[0] + prior[1] * kbar)) / (n + FIT_RIDGE)   # at k = kbar
        sxx, sxr = skk - sk * kbar, skr - sr * kbar                                # centred sums
        c = (sxr + self.ridge_c * prior[1]) / (max(sxx, 0.0) + self.ridge_c)
        return level - c * kbar, c

    def coefficients(self, b: int) -> tuple[float, float]:
        """(a_b, c_b); the all-batch-size fit before batch size b has been observed."""
        return self._fit(b, self._fit(self.ALL, (0.0, 0.0)))

    def predict(self, b: int, ks: np.ndarray) -> np.ndarray:
        a, c = self.coefficients(b)
        out = a + c * ks
        if b in self.shape:
            # each k's own mean residual off the data's centre line (mean residual at the mean k,
            # the fitted slope; no ridge: one k alone sits exactly on it), shrunk by SHAPE_N
            w, s = self.shape[b]
            n, sk, _, sr, _ = self.sums[b]
            out = out + np.array([(s[k] - w[k] * (sr / n + c * (k - sk / n))) / (w[k] + SHAPE_N) for k in ks])
        return out


class AdaptiveK:
    name = "auto"
    learns_from_beta = True       # the engine passes each draft's acceptance probability

    def __init__(self, spec, proposer, target, cost_model: CostModel | None = None, draft=None):
        cap = getattr(proposer, "max_k", None)
        self.k_max = 0 if getattr(proposer, "name", "") == "none" else min(spec.k_max, cap or spec.k_max)
        self.proposer = proposer
        if cost_model is None and self.k_max > 0:
            cost_model = CostModel.load_or_measure(target, proposer, quick=True, k_max=self.k_max)
        self.cost = cost_model
        if cost_model is not None and not cost_model.times_rounds and target is not None and self.k_max > 0:
            cost_model.attach_round_timer(round_timer(target, spec, draft))
        self.acc = AcceptanceTracker(max(self.k_max, 1))
        self.overhead = StepOverhead(self.k_max)
        self._skip_fit = False
        self._seen: set[tuple[int, int]] = set()   # (b, k) shapes already run once
        self._prev_k = 0
        self._idle_rounds = 0                      # consecutive k = 0 rounds
        self._since, self._eval_b = RECHECK, 0     # rounds since the last evaluation, at batch size
        self._resume: dict[int, float] = {}           # b -> seconds per caught-up token
        self._curves: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
        self._pred: np.ndarray | None = None       # model step times for k = 0..k_max, at the last evaluation
        self._corrected: np.ndarray | None = None  # the same with the drift, sans catch-up
        self.last_choice: dict = {}                # for inspection: tokens, times, rate by k

    # ---- the decision ---------------------------------------------------------------------
    def step_times(self, b: int, L: int, key: str, sampled: bool = False) -> np.ndarray:
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
        times = self._pred * np.exp(self.overhead.predict(b, ks))                 # (k_max+1,)
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
        known = np.array([self.step_times(s, L, key, sampled) * np.exp(self.overhead.predict(s, ks))
                          if s < b else self._corrected for s in sizes])              # (len(sizes), k_max+1)
        step = np.stack([np.interp(np.arange(1, b + 1), sizes, known[:, k]) for k in ks], axis=1)  # (b, k_max+1)
        mean, var = self.acc.row_tokens(key, remaining)                            # (b, k_max+1)
        out = drain_seconds(mean, var, remaining, step)
        out[1:] += (times[1] - self._corrected[1]) * RECHECK
        return out

    def row_caps(self):
        return None

    # ---- lifecycle and learning ------------------------------------------------------------
    def start(self, row, seq):
        self._since = RECHECK            # a new request: evaluate at once
        self.acc.start(row)              # admission is a step of its own: no decode time to skip

    def finish(self, row):
        pass

    def move_row(self, src, dst):
        self.acc.move_row(src, dst)

    def observe(self, batch, k, num_draft, accepted, dt, accept_prob=None, lookahead=None):
        if self.k_max == 0:
            return
        key = self.proposer.cost_key()
        if lookahead is not None:                   # the previous round's position k + 1
            self.acc.observe_position(key, *lookahead)
        self.acc.observe(key, list(num_draft), list(accepted), k, accept_prob)
        shape = (len(batch), k)
        resumed = k > 0 and self._prev_k == 0
        if self._pred is not None and not self._skip_fit:      # a step the model predicted
            # (between evaluations: from the last one, at the same batch size)
            pred = max(float(self._pred[k]), 1e-9)
            if resumed and 0 < self._idle_rounds <= RECHECK:
                excess = max(dt - float(self._corrected[k]), 0.0) / self._idle_rounds
                old = self._resume.get(len(batch))
                self._resume[len(batch)] = excess if old is None else 0.5 * (old + excess)
            elif shape in self._seen and not resumed:              # typical of its k
                drift = math.log(max(dt, 1e-9) / pred)
                self.overhead.observe(len(batch), k, min(max(drift, -LOG_CLIP), LOG_CLIP))
        self._seen.add(shape)
        self._idle_rounds = self._idle_rounds + 1 if k == 0 else 0
        self._since += 1
        self._prev_k = k
        self._skip_fit = False
