"""Live acceptance estimates: Beta posteriors per draft position, per proposer and per request.

a_j = P(the j-th draft asked for is made and accepted | drafts 1..j-1 were). A round asking for
k drafts with m accepted adds successes at 1..m and, if m < k, a failure at m + 1 (a draft not
made yields no token either); sampled rounds count beta_j successes and 1 - beta_j failures at
each position reached instead (beta_j: the draft's acceptance probability; the same expectation
without the coin's noise). P(A >= i) = prod_{j<=i} E[a_j]. A proposer's prior mean at j is
E[a_{j-1}] (at j = 1 PRIOR_MEAN, or a measured agreement `set_prior` gives: layer-skip's depth's),
so undrafted positions inherit the nearest evidence; a request
starts from its proposer's means and keeps its own counts per proposer (`auto` switches arms
within a request; one arm's record says nothing of another's). A proposer keeps counts per
verification mode (greedy, or the coupling: invariant accepts less than standard), each from
its own rows. Counts decay every round
(a mode's when its rows run), so after k = 0 a request relaxes toward its proposer and the
proposer toward the prior. Rounds are queued and folded in at the next read, alike runs at once.
"""
from __future__ import annotations

import numpy as np

from ..batch import RowSlots

PRIOR_MEAN = 0.8        # optimistic: an untried proposer is worth trying, and one round corrects it
PRIOR_N = 2.0           # the proposer prior weighs 2 observations: its first rounds' evidence dominates
ROW_PRIOR_N = 6.0       # a new request borrows 6 rounds of its proposer's record: its own first few
                        # rounds move its estimate, a single lucky or unlucky one does not
ROW_DECAY = 0.95        # per drafted round, a request's window of ~20 rounds (its text's character);
                        # squared per plain round (half-life ~7 rounds): a bad streak is soon forgiven
PROPOSER_DECAY = 0.98   # per round of its mode, drafted or not: ~50 rounds of evidence; after k = 0
                        # the proposer relaxes toward the prior over ~35 rounds


class _RowRecord:
    """One request's own record: its verification mode and, per proposer key, its decayed
    successes and failures at each draft position."""
    __slots__ = ("mode", "counts")

    def __init__(self, mode: str):
        self.mode = mode
        self.counts: dict = {}                      # proposer key -> (2, k_max) successes, failures


class AcceptanceTracker:
    def __init__(self, k_max: int):
        self.k_max = k_max
        self.rows = RowSlots()                      # row -> _RowRecord, set by start; moved and freed
                                                    # by the engine's row table (`row_state`)
        self.keys: dict = {}                        # (proposer key, mode) -> (2, k_max) successes, failures
        self._pos = np.arange(k_max + 1)            # draft positions 0..k_max
        self._queue: list[tuple] = []               # rounds not folded in yet, each with its rows' records
        self.priors: dict = {}                      # (proposer key, mode) -> prior mean at position 1

    def set_prior(self, key, mode: str, mean: float) -> None:
        """Start proposer `key`'s estimates for rows verified in `mode` from `mean` at the first
        draft position instead of PRIOR_MEAN: a measured acceptance (layer-skip's depth's agreement
        with the full depth, build.make_policy), still worth PRIOR_N rounds."""
        self.priors[(key, mode)] = min(max(float(mean), 0.0), 1.0)

    def start(self, row: int, mode: str) -> None:
        self.rows[row] = _RowRecord(mode)

    def _record(self, row: int) -> _RowRecord:
        rec = self.rows.get(row)
        if rec is None:                             # a row never started (a direct caller): greedy-standard
            rec = self.rows[row] = _RowRecord("standard")
        return rec

    def rows_of(self, key, n: int | None = None) -> np.ndarray:
        """(n, 2, k_max) the requests' own decayed successes and failures with proposer `key`
        (a copy: rows [0, n), every started row by default)."""
        self.flush()
        n = max(self.rows, default=-1) + 1 if n is None else n
        zero = np.zeros((2, self.k_max))
        return np.array([self._record(b).counts.get(key, zero) for b in range(n)]).reshape(n, 2, self.k_max)

    def proposer_means(self, key, mode: str) -> np.ndarray:
        """(k_max,) E[a_j] at the proposer level, for rows verified in `mode`."""
        self.flush()
        s, f = self.keys.get((key, mode), np.zeros((2, self.k_max)))
        out, m = [], self.priors.get((key, mode), PRIOR_MEAN)
        for sj, fj in zip(s.tolist(), f.tolist()):       # floats: a short chain, every evaluation
            m = (PRIOR_N * m + sj) / (PRIOR_N + sj + fj)
            out.append(m)
        return np.array(out)

    def row_means(self, key, n: int) -> np.ndarray:
        """(n, k_max) E[a_j] for rows [0, n), each from its own mode's proposer means."""
        counts = self.rows_of(key, n)
        modes, s, f = [self._record(b).mode for b in range(n)], counts[:, 0], counts[:, 1]
        means = {md: self.proposer_means(key, md) for md in set(modes)}
        prior = (next(iter(means.values()))[None] if len(means) == 1                # one mode: (1, k_max)
                 else np.array([means[md] for md in modes]).reshape(n, self.k_max))
        return (ROW_PRIOR_N * prior + s) / (ROW_PRIOR_N + s + f)

    def _reach(self, key, remaining: list[int]) -> np.ndarray:
        """(n, k_max + 1) P(A >= i), i = 0..k_max, per row; 0 where i >= its remaining tokens."""
        p = np.ones((len(remaining), self.k_max + 1))
        np.cumprod(self.row_means(key, len(remaining)), axis=1, out=p[:, 1:])
        p[self._pos[None] >= np.asarray(remaining)[:, None]] = 0.0
        return p

    def expected_tokens(self, key, remaining: list[int]) -> np.ndarray:
        """(k_max + 1,) the sum over rows of E[tokens emitted this round], k = 0..k_max."""
        return np.cumsum(self._reach(key, remaining), axis=1).sum(axis=0)

    def row_tokens(self, key, remaining: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(mean, var), (n, k_max + 1) each: row r's tokens this round, T = min(1 + A, r), for
        k = 0..k_max, from E[T] = sum_i P(T >= i) and E[T^2] = sum_i (2i - 1) P(T >= i)."""
        p = self._reach(key, remaining)
        mean = np.cumsum(p, axis=1)
        return mean, np.maximum(np.cumsum((2 * self._pos + 1) * p, axis=1) - mean * mean, 0.0)

    def record(self, key, num_draft: list[int], accepted: list[int], k: int,
               accept_prob: list[list[float]] | None = None) -> None:
        """A round that asked for k drafts: row b made num_draft[b] and had accepted[b] of them
        accepted; accept_prob[b][j], where given, is draft j's acceptance probability."""
        recs = [self._record(b) for b in range(len(num_draft))]       # the rows as they are now: the
        self._queue.append((key, k, num_draft, accepted, accept_prob, recs))   # table may move them

    def flush(self) -> None:
        """Fold the queued rounds in, in order, each run of rounds alike in kind at once."""
        queue, self._queue = self._queue, []
        kind = lambda r: (r[0], r[1], None if r[4] is None else len(r[4][0]), tuple(map(id, r[5])))  # noqa: E731
        while queue:
            n = next((i for i, r in enumerate(queue) if kind(r) != kind(queue[0])), len(queue))
            self._fold(queue[:n])
            queue = queue[n:]

    def _fold(self, rounds: list[tuple]) -> None:
        key, k, B, R, K = rounds[0][0], rounds[0][1], len(rounds[0][2]), len(rounds), self.k_max
        recs = rounds[0][5]                          # a run alike in kind holds the same requests
        modes = [r.mode for r in recs]
        stats = {md: self.keys.setdefault((key, md), np.zeros((2, K))) for md in set(modes)}  # (s, f) each
        for g in stats.values():
            g *= PROPOSER_DECAY ** R
        for rec in recs:                                 # a request's record ages with its rounds, any arm's
            for counts in rec.counts.values():
                counts *= ROW_DECAY ** (R if k else 2 * R)                       # plain rounds: squared
        if k == 0:                                                               # no evidence: relax
            return
        made, m = (np.array([r[i] for r in rounds])[..., None] for i in (2, 3))   # (R, B, 1) each
        pos = self._pos[:K]
        seen = pos < np.minimum(m + 1, min(k, K))                                # (R, B, K) decided
        if rounds[0][4] is None:
            hit = (pos < m).astype(float)
        else:                                                                    # a draft not made fails
            probs = np.asarray([r[4] for r in rounds], dtype=float)[..., :K]                  # (R, B, <= K)
            hit = np.where(pos < made, np.pad(probs, ((0, 0), (0, 0), (0, K - probs.shape[2]))), 0.0)
        hit = np.where(seen, hit, 0.0)
        both = np.stack([hit, seen - hit])                                       # (2, R, B, K)
        w_row, w_key = (d ** np.arange(R - 1, -1, -1.0) for d in (ROW_DECAY, PROPOSER_DECAY))  # the rounds after
        for rec, add in zip(recs, np.einsum("r,xrbk->bxk", w_row, both)):       # (B, 2, K)
            rec.counts[key] = rec.counts.get(key, 0.0) + add
        for md, g in stats.items():                                              # a mode counts its rows
            g += np.einsum("r,xrbk->xk", w_key, both[:, :, [x == md for x in modes]])
