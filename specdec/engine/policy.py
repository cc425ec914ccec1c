"""How many tokens to draft each round: fixed k, HF's +2/-1 heuristic, or adaptive.

A policy returns the batch's k and, optionally, a per-row cap (rows may differ).
The adaptive policy (adaptive.py) maximises expected tokens per second from a measured
cost model and live acceptance; the other two are the baselines it is compared with.
"""
from __future__ import annotations

from ..config import SpecConfig


class FixedK:
    """Policy interface: choose(batch) -> k; row_caps() -> per-row caps or None; start/finish/
    move_row follow the engine's rows; observe(batch, k, num_draft, accepted, dt, accept_prob,
    lookahead) after each round. When `learns_from_beta` is set, accept_prob (B, k) host lists
    are the drafts' acceptance probabilities (sampled rows) and lookahead, when not None, is
    (position j, per-row beta_j or NaN) one past the previous round's k (lookahead.py)."""
    name = "fixed"
    learns_from_beta = False

    def __init__(self, k: int):
        self.k = k

    def choose(self, batch) -> int:
        return self.k

    def row_caps(self):
        return None

    def start(self, row, seq): ...
    def finish(self, row): ...
    def move_row(self, src, dst): ...
    def observe(self, batch, k, num_draft, accepted, dt, accept_prob=None, lookahead=None): ...


class HeuristicK(FixedK):
    """Hugging Face's schedule: +2 after a round where every draft was accepted, else -1
    (never below 1), per request. The batch drafts max(row k); rows are capped at their own."""
    name = "heuristic"

    def __init__(self, k0: int, k_max: int):
        super().__init__(k0)
        self.k0, self.k_max = k0, k_max
        self.rows: list[int] = []

    def choose(self, batch) -> int:
        return max(self.rows[:len(batch)], default=self.k0)

    def row_caps(self):
        return self.rows

    def start(self, row, seq):
        while len(self.rows) <= row:
            self.rows.append(self.k0)
        self.rows[row] = self.k0

    def move_row(self, src, dst):
        self.rows[dst] = self.rows[src]

    def observe(self, batch, k, num_draft, accepted, dt, accept_prob=None, lookahead=None):
        for b, (nd, n) in enumerate(zip(num_draft, accepted)):
            if nd > 0:
                self.rows[b] = min(self.k_max, self.rows[b] + 2) if n == nd else max(1, self.rows[b] - 1)


def make_policy(spec: SpecConfig, proposer, target, cost_model=None, draft=None):
    if spec.k == "auto":
        from .adaptive import AdaptiveK
        return AdaptiveK(spec, proposer, target, cost_model, draft)
    if spec.k == "heuristic":
        return HeuristicK(min(5, spec.k_max), spec.k_max)
    return FixedK(spec.k)
