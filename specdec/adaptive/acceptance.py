"""Live acceptance estimates: Beta posteriors per draft position, per proposer and per request.

a_j = P(draft j accepted | drafts 1..j-1 accepted). A round that drafts n tokens and has
m accepted is m successes at positions 1..m and, if m < n, one failure at position m+1;
later positions are not observed. In sampled rounds the engine also reports beta_j, the
probability with which each draft was accepted given its context; a reached position then
counts beta_j successes and 1 - beta_j failures (unbiased, far less noisy than 0/1).
Under independent Beta posteriors,

    P(A >= i) = prod_{j<=i} E[a_j]            (exact: the mean of a product of independents)
    E[min(1 + A, r) | k] = sum_{i=0}^{min(k, r-1)} P(A >= i)

with r the tokens a request may still emit (the bonus/recovered token is always 1).

Two levels:
- per proposer (key = `proposer.cost_key()`): Beta(PRIOR_N * m_j + s_j, PRIOR_N * (1 - m_j) + f_j),
  whose prior mean chains from the previous position (m_1 = PRIOR_MEAN, m_j = E[a_{j-1}]),
  so positions never drafted inherit the nearest evidence;
- per request row: ROW_PRIOR_N pseudo-rounds at the proposer's means, plus its own counts.

Forgetting. Counts decay by ROW_DECAY / PROPOSER_DECAY per observed round so estimates
track the text, and by ROW_IDLE_DECAY / IDLE_DECAY per round with no drafting: a request's
own bad streak is forgotten within a few rounds, relaxing it toward its proposer's long-run
record, which itself relaxes slowly toward the optimistic prior. A policy that stopped
drafting therefore tries again soon where the proposer usually does well, and rarely where
it never does. Because an exploration round adds fresh evidence, probes
become rarer when they keep failing; their spacing grows with the evidence per round and
with the cost of drafting (docs/adaptive.md, section 5). These constants are part of the
estimator, not user settings.
"""
from __future__ import annotations

import numpy as np

PRIOR_MEAN = 0.8         # optimistic: an untried proposer is worth trying
PRIOR_N = 2.0            # pseudo-observations behind the proposer-level prior
ROW_PRIOR_N = 6.0        # pseudo-rounds a new request borrows from its proposer's estimate
ROW_DECAY = 0.95         # per drafted round (a request's window: ~20 rounds)
PROPOSER_DECAY = 0.98    # per step with drafting (~50 steps of all rows)
IDLE_DECAY = 0.98        # per step without drafting, proposer level (half-life ~35 steps)
ROW_IDLE_DECAY = 0.9     # per step without drafting, request level (half-life ~7 steps)


class AcceptanceTracker:
    def __init__(self, k_max: int):
        self.k_max = k_max
        self.rows_s = np.zeros((0, k_max))          # (R, k_max) decayed successes per position
        self.rows_f = np.zeros((0, k_max))          # (R, k_max) decayed failures
        self.keys: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._pos = np.arange(k_max + 1)[None]      # (1, k_max+1) draft positions 0..k_max
        self._queue: list[tuple] = []               # rounds and positions not folded in yet

    # ---- rows follow the engine's batch --------------------------------------------------
    def start(self, row: int) -> None:
        self.flush()
        if row >= len(self.rows_s):
            grow = row + 1 - len(self.rows_s)
            self.rows_s = np.vstack([self.rows_s, np.zeros((grow, self.k_max))])
            self.rows_f = np.vstack([self.rows_f, np.zeros((grow, self.k_max))])
        self.rows_s[row] = 0.0
        self.rows_f[row] = 0.0

    def move_row(self, src: int, dst: int) -> None:
        self.flush()
        self.rows_s[dst], self.rows_f[dst] = self.rows_s[src], self.rows_f[src]

    # ---- estimates --------------------------------------------------------------------------
    def _key(self, key: str):
        if key not in self.keys:
            self.keys[key] = (np.zeros(self.k_max), np.zeros(self.k_max))
        return self.keys[key]

    def proposer_means(self, key: str) -> np.ndarray:
        """(k_max,) E[a_j] at the proposer level."""
        if self._queue:
            self.flush()
        s, f = self._key(key)
        out, m = [], PRIOR_MEAN
        for sj, fj in zip(s.tolist(), f.tolist()):       # floats: a short chain, every step
            m = (PRIOR_N * m + sj) / (PRIOR_N + sj + fj)
            out.append(m)
        return np.array(out)

    def row_means(self, key: str, n: int) -> np.ndarray:
        """(n, k_max) E[a_j] for rows [0, n)."""
        g = self.proposer_means(key)[None]                                       # (1, k_max)
        s, f = self.rows_s[:n], self.rows_f[:n]
        return (ROW_PRIOR_N * g + s) / (ROW_PRIOR_N + s + f)

    def expected_tokens(self, key: str, remaining: list[int]) -> np.ndarray:
        """(k_max + 1,) sum over rows of E[tokens emitted this round] for k = 0..k_max."""
        return np.cumsum(self._reach(key, remaining), axis=1).sum(axis=0)

    def row_tokens(self, key: str, remaining: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(mean, var), each (n, k_max + 1): row r's tokens emitted this round, T = 1 + A capped
        at its remaining tokens, for k = 0..k_max. E[T] = sum_i P(T >= i) and
        E[T^2] = sum_i (2i - 1) P(T >= i), with P(T >= i) = P(A >= i - 1)."""
        p = self._reach(key, remaining)                                          # (n, k_max+1)
        mean = np.cumsum(p, axis=1)
        second = np.cumsum((2 * self._pos + 1) * p, axis=1)
        return mean, np.maximum(second - mean * mean, 0.0)

    def _reach(self, key: str, remaining: list[int]) -> np.ndarray:
        """(n, k_max + 1) P(A >= i) for i = 0..k_max per row, 0 where i >= its remaining tokens."""
        n = len(remaining)
        a = self.row_means(key, n)                                               # (n, k_max)
        p = np.ones((n, self.k_max + 1))
        np.cumprod(a, axis=1, out=p[:, 1:])                                      # (n, k_max+1)
        r = np.asarray(remaining)[:, None]
        p[self._pos >= r] = 0.0                                                  # cap at r tokens
        return p

    # ---- updates: queued as they come, folded in when an estimate is next read ------------
    def record(self, key: str, num_draft: list[int], accepted: list[int], k: int | None = None,
                accept_prob: list[list[float]] | None = None) -> None:
        """One round: row b drafted num_draft[b] tokens and had accepted[b] of them accepted.
        With `k` (the round's requested length), a row that proposed fewer than k tokens
        counts a failure where its draft ended: for throughput, a draft that a proposer
        (e.g. n-gram lookup without a match) could not make is as good as a rejected one.
        With `accept_prob` (row b: beta_j, the probability that draft j was accepted given its
        context; verify.rejection.acceptance_probability), each position verification
        reached counts beta_j successes and 1 - beta_j failures instead of the 0/1 outcome:
        the same expectation, much less noise at temperature > 0 (Rao-Blackwell).

        The round is queued, and folded in with the rounds queued beside it when an estimate
        is next read: the policy reads every few rounds (policy.py, RECHECK), and folding
        them together costs about what folding one does."""
        if k == 0 or (k is None and not any(num_draft)):
            self.idle(key, len(num_draft))
            return
        self._queue.append((key, k, list(num_draft), list(accepted), accept_prob))

    def record_position(self, key: str, position: int, beta: list[float]) -> None:
        """Row b's acceptance probability at draft `position` (1-based), reached but not
        drafted (engine/lookahead.py); NaN where a row has none. It belongs to the previous
        round: the next round's record() decays it."""
        j = position - 1
        seen = [(b, x) for b, x in enumerate(beta) if x == x]                    # a few rows
        if j < self.k_max and seen:
            self._queue.append((key, j, seen))

    def idle(self, key: str, n: int) -> None:
        """A round without drafting: let the evidence relax toward the prior."""
        self.flush()
        gs, gf = self._key(key)
        gs *= IDLE_DECAY
        gf *= IDLE_DECAY
        self.rows_s[:n] *= ROW_IDLE_DECAY
        self.rows_f[:n] *= ROW_IDLE_DECAY

    def flush(self) -> None:
        """Fold the queued rounds in, in order: runs of rounds alike in proposer, k, batch size
        and kind of evidence (with the position observations between them) at once."""
        queue, self._queue = self._queue, []
        i = 0
        while i < len(queue):
            sig, rounds, looks = None, [], []
            while i < len(queue):
                e = queue[i]
                if len(e) == 3:                                                  # a position
                    if sig is not None and e[0] != sig[0]:
                        break
                    looks.append((len(rounds), e))
                else:
                    width = -1 if e[4] is None else len(e[4][0]) if e[4] else 0
                    s = (e[0], e[1], len(e[2]), width)
                    if sig is not None and s != sig:
                        break
                    sig = s
                    rounds.append(e)
                i += 1
            self._fold(sig[0] if sig else looks[0][1][0], sig[1] if sig else None, rounds, looks)

    def _fold(self, key: str, k: int | None, rounds: list, looks: list) -> None:
        gs, gf = self._key(key)
        K, R = self.k_max, len(rounds)
        after = g = None
        if R:
            nd = np.array([r[2] for r in rounds], dtype=np.int64)                # (R, B)
            m = np.array([r[3] for r in rounds], dtype=np.int64)                 # (R, B) accepted
            B = nd.shape[1]
            want = np.full_like(nd, k) if k is not None else nd                  # asked per row
            active = want > 0
            reached = np.minimum(np.minimum(m + 1, want), K)                     # positions 1..m+1 decided
            pos = np.arange(K)
            seen = (pos < reached[..., None]) & active[..., None]                # (R, B, K)
            if rounds[0][4] is None:
                hit = (pos < m[..., None]).astype(float)
            else:                                                                # beyond the drafts made: a failure
                beta = np.zeros((R, B, K))
                probs = np.asarray([r[4] for r in rounds], dtype=float)          # (R, B, width)
                width = min(K, probs.shape[2]) if probs.ndim == 3 else 0
                if width:
                    beta[..., :width] = probs[..., :width]
                hit = np.where(pos < np.minimum(nd, reached)[..., None], beta, 0.0)
            hit = np.where(seen, hit, 0.0)
            miss = seen - hit
            decay = np.where(active, ROW_DECAY, 1.0)                             # (R, B)
            after = np.ones((R + 1, B))                # after[t]: the decay of rounds t..R-1
            after[:R] = np.cumprod(decay[::-1], axis=0)[::-1]
            self.rows_s[:B] = self.rows_s[:B] * after[0][:, None] + np.einsum("rb,rbk->bk", after[1:], hit)
            self.rows_f[:B] = self.rows_f[:B] * after[0][:, None] + np.einsum("rb,rbk->bk", after[1:], miss)
            g = PROPOSER_DECAY ** np.arange(R, -1, -1.0)                         # g[t] = D^(R-t)
            gs *= g[0]
            gf *= g[0]
            gs += g[1:] @ hit.sum(1)
            gf += g[1:] @ miss.sum(1)
        for t, (_, j, seen_rows) in looks:             # decayed by the rounds after their own
            for b, x in seen_rows:
                w = after[t, b] if after is not None and b < after.shape[1] else 1.0
                wg = g[t] if g is not None else 1.0
                self.rows_s[b, j] += w * x
                self.rows_f[b, j] += w * (1.0 - x)
                gs[j] += wg * x
                gf[j] += wg * (1.0 - x)
