"""`auto`: choose a proposer per request, online, by measured goodput.

Arms: DEFAULT_ARMS that are available (draft when a draft model was given, parallel when it has
a mask token, ngram, suffix), or
those named by `auto_arms` (also eagle or mtp with a head, layerskip, none). Each round, every
running request (batch row) picks one arm; the arms picked by at least one row propose for the
whole batch and each row keeps its own arm's tokens. After verification, the row's reward is
its goodput:

    tokens emitted this round (accepted drafts + the recovered/bonus token) / round time,

where the round time runs from `plan` to `rollback` (drafting, the target's verify forward and
verification). The k policy picks k for the arm most rows play; where it picks 0, the round is
a plain one and counts as the planned arms' play (their goodput as the policy runs them). The
rule is discounted UCB (Garivier & Moulines, 2011) on a ratio estimator, per row:

    every round:   N_a <- g N_a,  S_a <- g S_a,  T_a <- g T_a          (all arms, g = gamma)
    after arm a:   N_a += 1,      S_a += tokens, T_a += seconds
    goodput        G_a = S_a / T_a                (tokens per second, as throughput is)
    choose         argmax_a  G_a + c * max_b G_b * sqrt(log(sum_b N_b) / N_a)

An arm never tried in this request is tried first, unless earlier requests verified the
same way (greedy, or the sampled coupling: `invariant` accepts less than `standard`, so an
arm's goodput differs by mode) left a prior (their goodput, counted as `prior` pulls). Because the counts of an arm not played decay
geometrically, its exploration bonus grows until it is played again: no arm is abandoned
for good (it is retried roughly every few times 1/(1-gamma) rounds when clearly worse),
and a change of regime mid-request is followed within about 1/(1-gamma) rounds. On a
long stationary request the best arm is played in all but a vanishing share of rounds.

Keeping sub-proposers in step: a sub-proposer that did not propose for a row is told
that row accepted 0 of its tokens, and every sub-proposer catches up from the
sequence itself on its next call: the draft model (and layerskip) feed the tokens their
cache has not seen, ngram and suffix extend their per-row buffers/indexes. Lifecycle
hooks (start, finish) are forwarded to all of them, and their per-row state is handed
to the row table with the bandit's own (`row_state`).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from ..batch import RowSlots
from ..errors import ConfigError
from ..costs.key import CostKey
from .base import Draft, NoProposer, Proposer, create, register

# The arms when `auto_arms` names none. No `none`: the k policy already picks plain rounds (k = 0)
# for any arm when drafting does not pay, and a plain arm beside it only adds exploration; no
# `layerskip`: a shallow self-draft costs a sizeable share of a target step, so the policy mostly
# runs it at k = 0, and every arm it plays that way costs exploration for nothing. Each extra arm
# dilutes the rounds the better arms get (figures: benchmarks/results/auto-2026-12-07).
# `parallel` is an arm only where the draft has a mask token (a parallel draft also drafts
# sequentially: the draft arm runs the same model step by step).
DEFAULT_ARMS = ("draft", "parallel", "ngram", "suffix")


class _Stats:
    """Discounted pulls, tokens and seconds per arm for one request."""
    __slots__ = ("n", "tok", "sec")

    def __init__(self, arms: int):
        self.n, self.tok, self.sec = [0.0] * arms, [0.0] * arms, [0.0] * arms


class AutoProposer(Proposer):
    name = "auto"

    def __init__(self, arms: dict, gamma: float = 0.98, c: float = 0.3, prior: float = 1.0,
                 clock=time.perf_counter):
        if not arms:
            raise ConfigError("auto needs at least one proposer to choose from")
        if not 0 < gamma <= 1 or c < 0 or prior < 0:
            raise ConfigError(f"auto needs 0 < gamma <= 1, c >= 0, prior >= 0; got {gamma}, {c}, {prior}")
        self.names = list(arms)
        self.arms = [arms[n] for n in self.names]
        self.gamma, self.c, self.prior, self.clock = gamma, c, prior, clock
        self.rows: RowSlots = RowSlots()   # row -> _Stats
        self.glob: dict[str, tuple[list[float], list[float]]] = {}   # mode -> (tokens, seconds) per arm
        self.row_mode: RowSlots = RowSlots()                # each running row's verification mode
        self.chosen: list[int] | None = None                # arms of the round in flight, per row
        self.planned: list[int] | None = None               # arms `plan` picked for the next round
        self.used: list[int] = []
        self.t0 = 0.0
        self.history: list[list[int]] = []                   # arms chosen per recent round
        self.history_cap = 20000

    # ---- lifecycle, forwarded to every sub-proposer ------------------------------------------
    def start(self, row, seq):
        self.start_rows([row], [seq])

    @property
    def uses_features(self):
        return any(a.uses_features for a in self.arms)

    def take_features(self, rows, features):
        for a in self.arms:
            if a.uses_features:
                a.take_features(rows, features)

    def start_rows(self, rows, seqs):
        for a in self.arms:
            a.start_rows(rows, seqs)
        for row, seq in zip(rows, seqs):
            self._start_stats(row, seq)

    def _start_stats(self, row, seq):
        st = _Stats(len(self.arms))
        mode = _mode(seq)
        self.row_mode[row] = mode
        tok, sec = self.prior_of(mode)
        for i in range(len(self.arms)):
            if sec[i] > 0 and self.prior > 0:
                g = tok[i] / sec[i]
                st.n[i], st.sec[i], st.tok[i] = self.prior, self.prior * 1e-3, self.prior * 1e-3 * g
        self.rows[row] = st

    def row_state(self):
        return [self.rows, self.row_mode] + [s for a in self.arms for s in a.row_state()]

    def finish(self, row):
        for a in self.arms:
            a.finish(row)
        st = self.rows.get(row)
        mode = self.row_mode.get(row, _DEFAULT_MODE)
        if st is not None:                   # the request's goodput becomes its mode's next requests' prior
            tok, sec = self.glob.setdefault(mode, ([0.0] * len(self.arms), [0.0] * len(self.arms)))
            for i in range(len(self.arms)):
                if st.sec[i] > 0:
                    tok[i] = 0.5 * tok[i] + st.tok[i] / st.sec[i]
                    sec[i] = 0.5 * sec[i] + 1.0

    def prior_of(self, mode: str) -> tuple[list[float], list[float]]:
        """(decayed goodput sums, weights) per arm left by finished requests verified in `mode`
        ("greedy", "standard" or "invariant"); zeros where none finished yet."""
        A = len(self.arms)
        return self.glob.get(mode, ([0.0] * A, [0.0] * A))

    # ---- the bandit --------------------------------------------------------------------------
    def _stats(self, row) -> _Stats:
        if row not in self.rows:
            self.rows[row] = _Stats(len(self.arms))
        return self.rows[row]

    def choose(self, st: _Stats) -> int:
        """The arm to play next for a request with statistics `st` (discounted UCB)."""
        for i, n in enumerate(st.n):
            if n == 0:
                return i
        good = [t / s if s > 0 else 0.0 for t, s in zip(st.tok, st.sec)]
        scale = max(good) or 1.0
        log_n = math.log(max(sum(st.n), 1.0 + 1e-9))
        idx = [g + self.c * scale * math.sqrt(max(log_n, 0.0) / n) for g, n in zip(good, st.n)]
        return max(range(len(idx)), key=idx.__getitem__)

    def update(self, st: _Stats, arm: int, tokens: float, seconds: float) -> None:
        g = self.gamma
        for i in range(len(st.n)):
            st.n[i] *= g; st.tok[i] *= g; st.sec[i] *= g
        st.n[arm] += 1.0
        st.tok[arm] += tokens
        st.sec[arm] += seconds

    # ---- proposing ---------------------------------------------------------------------------
    def plan(self, batch):
        """Pick each row's arm for this round (before the policy picks k). The round counts as
        these arms' play even if the policy then picks k = 0 for the arm most rows play and
        nothing is proposed: its goodput as the policy runs it is plain decoding's, and a bandit
        that learnt nothing from such rounds would pick that arm again forever."""
        self.planned = [self.choose(self._stats(b)) for b in range(len(batch))]
        self.chosen, self.used, self.t0 = self.planned, [], self.clock()

    def cost_key(self):
        """The cost of this round is that of the arm most rows play (see plan)."""
        planned = self.planned
        if not planned:
            return CostKey(self.name)
        arm = max(set(planned), key=planned.count)
        return self.arms[arm].cost_key()

    def propose(self, context, k):
        B = len(context)
        planned = self.planned
        if planned is None or len(planned) != B:          # called without plan (a test, a warm-up)
            self.planned = planned = [self.choose(self._stats(b)) for b in range(B)]
            self.t0 = self.clock()
        chosen = planned
        used = sorted(set(chosen))
        drafts = {i: self.arms[i].propose(context, k) for i in used}
        self.chosen, self.used = chosen, used
        return merge([drafts[i] for i in chosen], list(drafts.values()))

    def rollback(self, num_accepted):
        if self.chosen is None:              # neither planned nor proposed: nothing to learn
            return
        dt = max(self.clock() - self.t0, 1e-9)
        for i in self.used:
            self.arms[i].rollback([n if c == i else 0 for n, c in zip(num_accepted, self.chosen)])
        for b, (n, arm) in enumerate(zip(num_accepted, self.chosen)):
            self.update(self._stats(b), arm, n + 1, dt)
        self.history.append(self.chosen)
        if len(self.history) > self.history_cap:              # bounded memory in a long-lived server
            del self.history[: self.history_cap // 2]
        self.chosen, self.planned = None, None

    def share(self) -> dict[str, float]:
        """Fraction of row-rounds each arm was chosen in (over the recorded history)."""
        flat = [a for rnd in self.history for a in rnd]
        return {n: flat.count(i) / len(flat) if flat else 0.0 for i, n in enumerate(self.names)}


_DEFAULT_MODE = "greedy"     # a row started without a sequence (tests, warm-up) counts as greedy


def _mode(seq) -> str:
    """The verification mode of a request (see SamplingParams.verification)."""
    params = getattr(seq, "params", None)
    return params.verification if params is not None else _DEFAULT_MODE


def merge(row_drafts: list[Draft], drafts: list[Draft]) -> Draft:
    """Row b's tokens (and q) from row_drafts[b]; one-hot q for rows whose arm has none.
    `drafts` are the distinct drafts of this round (q is built only if one of them has it)."""
    B = len(row_drafts)
    lengths = [d.num_tokens()[b] for b, d in enumerate(row_drafts)]
    W = max(lengths, default=0)
    tokens = torch.zeros(B, W, dtype=torch.long)                                    # (B, W)
    for b, d in enumerate(row_drafts):
        tokens[b, :lengths[b]] = d.tokens[b, :lengths[b]].cpu()
    probs = None
    with_q = [d for d in drafts if d.probs is not None]
    if with_q and W > 0:
        V = with_q[0].probs.shape[-1]
        probs = torch.nn.functional.one_hot(tokens, V).to(with_q[0].probs.dtype)    # (B, W, V)
        for b, d in enumerate(row_drafts):
            if d.probs is not None and lengths[b]:
                probs[b, :lengths[b]] = d.probs[b, :lengths[b]].to(probs.device)
    return Draft(tokens=tokens, probs=probs, lengths=lengths)


@register("auto")
def _build(target, spec, draft_model=None, rows=1, max_len=1024, head=None, **_):
    o = spec.opts
    names = o.get("auto_arms") or DEFAULT_ARMS
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if "auto" in names:
        raise ConfigError("auto cannot choose itself")
    arms = {}
    spec = replace(spec, tree=0)              # merge() joins chains: its arms draft no trees
    for n in names:
        if (n == "draft" and draft_model is None) or (n in ("eagle", "mtp") and head is None):
            continue                          # no draft model or head given: not an arm
        if n == "parallel" and getattr(draft_model, "mask_token", None) is None:
            continue                          # a draft without a mask token drafts sequentially only
        if n == "layerskip" and target.config.num_hidden_layers < 2:
            continue
        arms[n] = NoProposer() if n == "none" else create(
            n, target, spec, draft_model=draft_model, rows=rows, max_len=max_len, head=head)
    return AutoProposer(arms, gamma=o.get("auto_gamma", 0.98), c=o.get("auto_c", 0.3),
                        prior=o.get("auto_prior", 1.0))
