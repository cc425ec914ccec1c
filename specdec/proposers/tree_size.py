"""`--tree auto`: how many of the drafted nodes a round's tree keeps, from costs and confidence.

A node is accepted only if its whole path is; the draft's path probability (the product of
its tokens' draft probabilities) estimates that chance (EAGLE-2's observation: a draft's
confidence tracks acceptance). Keeping the N most confident nodes of every row is then
expected to emit

    gain(N) = B + c * sum over rows of the N largest path probabilities

tokens (the B recovered or bonus tokens, plus the accepted nodes), for a verify forward of
N + 1 positions per row that costs t(B, N + 1), the target's measured forward time
(costs/profiling.py, timed by build.make_engine above the engine). The round keeps the N
with the most tokens per second of the whole round, gain(N) / (d + t(B, N + 1)), d being
the seconds this round's drafting took. d is spent whatever N is, but it is part of every
round's time: weighing the nodes against verification alone makes the rate of the round
the objective no longer is, and kept too few nodes (a greedy depth-4 tree kept 2.5 tokens a
round where the chain of 4 made 3.3). c calibrates the draft's confidence to what
verification accepts: the ratio of accepted nodes to predicted ones over recent rounds. At a
large batch t grows with N and the chosen tree shrinks towards a few nodes per row.

Plain step, chain or tree (KINDS): an auto round drafts the kind that emitted the most tokens
a second over the recent rounds: nothing (a plain step), the proposer's own chain of k, or a
tree. Every rate is measured (`RoundRates`: tokens emitted over the wall time from the round's
start, before drafting, to its rollback, after verification; the engine's admissions of new
requests fall outside, so a prefill is charged to no kind). The other kinds are probed: a probe
is PROBE_ROWS row-rounds of one kind back to back (4 rounds at batch 1, one at batch 4 and
above), judged together against the best other kind; a kind that lost sits out as many rounds
as make its next probe's excess time (its seconds less what the best kind would have taken for
its tokens) EXPLORE_SHARE of theirs, at most BACKOFF_MAX (`Backoff`). The kinds are first
probed cheapest first, a costlier one only where the one before it leads: a tree, which drafts
and verifies more than the chain, is first drafted where the chain beats plain steps (at
batch 16 on this CPU neither pays, and one tree round there costs several plain steps). No
kind is given up for good: the batch, the text and so the acceptance change.

Never drafted: a round drafts nothing (a plain step) where no tree or chain could pay at all
(`can_pay`): where the best line of depth d <= k, accepted at an optimistic ALPHA_PRIOR per
token and drafted for free, would emit no more tokens a second than plain steps, by the
target's measured t(B, q). That is a batch whose verify forward is compute-bound (t grows with
q as fast as the tokens a line could add); none of the drafter's work is spent there.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch

from ..costs.profiling import ModelProfile, grid_rows
from ..errors import ConfigError

AUTO_NODES = 32      # nodes drafted when the size is chosen per round; on this project's CPU the
                     # verify forward at 33 positions already costs about 2x one at 9 (decode_cost)
CALIBRATION_DECAY = 0.95   # the calibration's memory: about the last 20 rounds
EXPLORE_SHARE = 0.01      # the time a losing kind's next probe may cost, as a share of the best kind's
                          # rounds before it: two kinds explore beside the best, together 2%, within the
                          # tree issue's bound at batch 16 (3%)
BACKOFF_MAX = 128         # rounds a kind sits out at most: acceptance changes along a text within tens
                          # of rounds, and 256 left a chain that met a hard stretch out of the easy one
                          # after it; a probe of 4 rounds in 128 costs a plain step's loss at batch 1
                          # (about 35% a round) about 1%


def best_rate(path_probs: torch.Tensor, c: float, cost: Callable[[int, int], float],
              spent: float = 0.0) -> tuple[int, float]:
    """path_probs (B, W): each row's node path probabilities, largest first; c: the
    calibration; cost(b, q): seconds of a target forward of b rows x q positions; spent: the
    seconds the round's drafting took -> (N in 1..W, the round's expected tokens a second)."""
    B, W = path_probs.shape
    gain = B + c * path_probs.sum(0).cumsum(0)                                        # (W,) N = 1..W
    seconds = spent + torch.tensor([cost(B, n + 1) for n in range(1, W + 1)], dtype=gain.dtype)
    rate = gain / seconds.clamp_min(1e-9)                                             # (W,) tokens/s
    n = int(torch.argmax(rate))
    return n + 1, float(rate[n])


def best_size(path_probs: torch.Tensor, c: float, cost: Callable[[int, int], float], spent: float = 0.0) -> int:
    """N of `best_rate`."""
    return best_rate(path_probs, c, cost, spent)[0]


ALPHA_PRIOR = 0.86        # per-token acceptance assumed by `can_pay`: the best we measured (a distilled
                          # draft on greedy code, mean acceptance length 3.75 at k = 4 against the first
                          # bundled target, whose output repeated itself), with drafting free, so only a batch whose verify is compute-bound is
                          # ruled out (on the Zen 4 of benchmarks/results/trees/NOTES-batch16.md, batch 16
                          # still passes)


def can_pay(b: int, k: int, cost: Callable[[int, int], float]) -> bool:
    """Whether some line of depth d <= k, each drafted token accepted with ALPHA_PRIOR and drafted
    for free, emits more tokens a second at batch b than plain steps: the expected tokens a row
    (1 - a^(d+1)) / (1 - a) exceed t(b, d + 1) / t(b, 1)."""
    a, t1 = ALPHA_PRIOR, cost(b, 1)
    return any((1 - a ** (d + 1)) / (1 - a) * t1 > cost(b, d + 1) for d in range(1, k + 1))


KINDS = ("none", "chain", "tree")    # what an auto round drafts, cheapest first: each kind is first tried
                                     # only where the one before it is the best measured so far
PROBE_ROWS = 4            # row-rounds a probe measures, its rounds run back to back and judged together:
                          # one row's tokens vary from 1 to k + 1 a round, and at batch 1 a wait judged
                          # on one unlucky round left the chain out of most rounds; a batch of 16 rows
                          # averages them in one round, where a longer probe costs more than it learns
RATE_DECAY = 0.95         # the rates' memory: about the last 20 rounds of the run. One round's tokens
                          # vary from 1 to k + 1 a row, so a shorter memory (0.8 measured) let a few
                          # unlucky chain rounds fall below plain steps at batch 1 and hand them the rounds


def probe_rounds(b: int) -> int:
    """Rounds of a probe at batch b: PROBE_ROWS row-rounds."""
    return max(1, math.ceil(PROBE_ROWS / b))


class RoundRates:
    """Tokens a second of the recent rounds of each kind, measured from a round's start to its
    rollback: decayed sums of tokens over decayed sums of seconds (a ratio of sums, so that
    one short lucky round weighs no more than its seconds); None until a round of that kind ended."""

    def __init__(self):
        self.rate: dict[str, float | None] = dict.fromkeys(KINDS)
        self.seconds: dict[str, float | None] = dict.fromkeys(KINDS)      # a round's, on average
        self._sums = {kind: [0.0, 0.0, 0.0] for kind in KINDS}          # decayed tokens, seconds, rounds
        self.kind, self._t, self._t_end, self._emitted = None, 0.0, 0.0, 0
        self.clock = time.perf_counter

    def end(self) -> str | None:
        """The running round ended (its `emitted`): record it; -> its kind (None: none was measured).
        Every kind's sums decay each round, so a kind that sat out rounds is judged mostly by
        its next round: the text, and with it the acceptance, changed meanwhile."""
        kind = self.kind
        if kind is not None and self._emitted:
            for sums in self._sums.values():
                sums[:] = [RATE_DECAY * x for x in sums]
            sums = self._sums[kind]
            for i, x in enumerate((self._emitted, max(self._t_end - self._t, 1e-9), 1.0)):
                sums[i] += x
            self.rate[kind], self.seconds[kind] = sums[0] / sums[1], sums[1] / sums[2]
        self.kind = None
        return kind

    def begin(self, kind: str) -> None:
        """A round of `kind` starts now."""
        self.kind, self._t, self._emitted = kind, self.clock(), 0

    def emitted(self, tokens: int) -> None:
        """The running round's tokens, known at its rollback: the round's time ends here, before
        the engine admits new requests (a prefill that would be charged to whichever kind ran)."""
        self._emitted, self._t_end = tokens, self.clock()

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` of the running round (a one-time catch-up, as a prefill) out of its time."""
        self._t += seconds

    def best(self, but: str | None = None) -> str | None:
        """The measured kind (other than `but`) with the most tokens a second; None: none measured."""
        kinds = [k for k in KINDS if k != but and self.rate[k] is not None]
        return max(kinds, key=lambda k: self.rate[k], default=None)


class Backoff:
    """Rounds each kind sits out after it emitted fewer tokens a second than the best other kind:
    as many as make the excess time of its next probe EXPLORE_SHARE of theirs."""

    def __init__(self):
        self.wait = dict.fromkeys(KINDS, 0)

    def judge(self, kind: str, rates: RoundRates, rounds: int = 1) -> None:
        """A probe of `kind`, `rounds` rounds, just ended (rates.end()): against the best other
        measured kind."""
        other = rates.best(but=kind)
        if other is None:
            return
        rate, better = rates.rate[kind], rates.rate[other]
        if rate >= better:
            self.wait[kind] = 0
            return
        excess = rounds * rates.seconds[kind] * (1 - rate / better)  # a probe's, beyond the better kind's time
        self.wait[kind] = min(BACKOFF_MAX, math.ceil(excess / (EXPLORE_SHARE * max(rates.seconds[other], 1e-9))))

    def tick(self) -> None:
        """A round passed."""
        for kind, n in self.wait.items():
            self.wait[kind] = max(0, n - 1)


class Calibration:
    """c = accepted nodes / predicted nodes (sums of path probabilities), over recent rounds."""

    def __init__(self):
        self.accepted, self.predicted = 1.0, 1.0        # a prior of one round at c = 1

    @property
    def c(self) -> float:
        return self.accepted / self.predicted

    def observe(self, accepted: float, predicted: float) -> None:
        self.accepted = CALIBRATION_DECAY * self.accepted + accepted
        self.predicted = CALIBRATION_DECAY * self.predicted + predicted


class AutoSize:
    """`--tree auto` for one proposer: the calibration, the back-off and the measured rates,
    consulted at a round's start (`choose`), when its tree is drafted (`size`) and at its
    rollback (`observe`)."""

    def __init__(self, cost: Callable[[int, int], float] | None, budget: int | str = "auto"):
        """cost(b, q): the target's forward seconds, needed when the proposer's budget is "auto"."""
        if budget == "auto" and cost is None:
            raise ConfigError("--tree auto needs the target's measured forward costs (build.make_engine)")
        self.cost, self.calibration, self.rates = cost, Calibration(), RoundRates()
        self.backoff = Backoff()
        self._predicted: float | None = None
        self._probe, self._probe_left = None, 0     # the kind being probed (judged when its last round ends), rounds to go
        self._feasible: dict[tuple[int, int], bool] = {}           # (b, k) -> can_pay

    def choose(self, auto: bool, b: int = 1, k: int = 1) -> str | None:
        """A round of b rows and depth k starts: judge the round that just ended; -> what this
        one drafts, for an auto round: "tree", "chain" or "none" (a plain step); None otherwise
        (the proposer's own rule)."""
        r, off = self.rates, self.backoff
        ended = r.end()
        if ended is not None and ended == self._probe and not self._probe_left:
            off.judge(ended, r, probe_rounds(b))    # a probe is judged once, on all its rounds
        if not auto:
            return None
        if not self._can_pay(b, k):
            return "none"                   # nothing could pay: not a round the rates compare
        off.tick()
        if self._probe is not None and self._probe_left:      # 1. a probe runs its rounds
            self._probe_left -= 1
            kind = self._probe
        else:                               # 2. a kind due a probe (its last round, if one), else the best
            best = r.best()
            due = [kind for i, kind in enumerate(KINDS) if kind != best and off.wait[kind] == 0
                   and (r.rate[kind] is not None or i == 0 or KINDS[i - 1] == best)]   # first tried where the cheaper leads
            kind = due[0] if due else best
            self._probe, self._probe_left = (kind, probe_rounds(b) - 1) if due else (None, 0)
        r.begin(kind)
        return kind

    def _can_pay(self, b: int, k: int) -> bool:
        if (b, k) not in self._feasible:
            self._feasible[(b, k)] = can_pay(b, k, self.cost)
        return self._feasible[(b, k)]

    def size(self, probs: torch.Tensor, spent: float) -> int:
        """probs (B, W): path probabilities, largest first; spent: the drafting's seconds -> N."""
        n = best_size(probs, self.calibration.c, self.cost, spent)
        self._predicted = float(probs[:, :n].sum())
        return n

    def observe(self, num_accepted: list[int]) -> None:
        """The round's accepted drafts per row (each row also emitted one token of its own)."""
        self.rates.emitted(len(num_accepted) + sum(num_accepted))
        if self._predicted is not None:
            self.calibration.observe(sum(num_accepted), self._predicted)
        self._predicted = None


TREE_QS = [1, 2, 3, 5, 9, 17, 25, 33]   # verify widths timed for --tree auto: up to AUTO_NODES + 1,
                                        # denser where the kernel's tiles change (1..9)


def tree_profile(model, max_batch: int, l_ref: int = 128, l_long: int = 512) -> ModelProfile:
    """The target's forward times at TREE_QS positions, for every batch row up to max_batch
    (what `--tree auto` weighs a tree's size against: best_size), timed by build.make_engine."""
    l_long = max(2, min(l_long, model.config.max_position_embeddings - max(TREE_QS) - 2))
    prof = ModelProfile(min(l_ref, l_long // 2), l_long)
    prof.measure(model, grid_rows(max_batch), max(TREE_QS), qs=TREE_QS)
    return prof
