"""How many tokens to draft each round: the KPolicy interface and its simple policies.

The adaptive policy (`specdec.adaptive`, built above the engine and handed to it) maximises
expected tokens per second; fixed k and Hugging Face's +2/-1 heuristic are its baselines,
and a table of k by batch size is what a deployment fixes after an analysis.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ..batch import Batch, RowSlots
from ..config import KTable, SpecConfig
from ..errors import ConfigError
from .round import RoundResult


class KPolicy(ABC):
    """Chooses k each round and learns from what the round did."""
    name = "policy"
    # ask the engine for each draft's acceptance probability (RoundResult.accept_prob): a
    # softmax overlap per draft, paid only by a policy that learns from it
    wants_accept_prob = False

    @abstractmethod
    def choose(self, batch: Batch) -> int:
        """The number of tokens to draft for every row this round (0: plain decoding)."""

    def row_caps(self) -> list[int] | None:
        """Per-row caps on the drafts verified (rows [0, B)), or None for none."""
        return None

    def observe(self, result: RoundResult) -> None:
        """After every decode round."""

    def start(self, row: int, seq) -> None:
        """A request entered batch row `row`."""

    def finish(self, row: int) -> None:
        """The request in `row` left the batch."""

    def row_state(self) -> list:
        """The policy's per-row `RowSlots` (batch.py), which the row table moves and frees."""
        return []


class FixedK(KPolicy):
    name = "fixed"

    def __init__(self, k: int):
        self.k = k

    def choose(self, batch) -> int:
        return self.k


class HeuristicK(KPolicy):
    """Hugging Face's schedule: +2 after a round where every draft was accepted, else -1
    (never below 1), per request. The batch drafts max(row k); rows are capped at their own."""
    name = "heuristic"

    def __init__(self, k0: int, k_max: int):
        self.k0, self.k_max = k0, k_max
        self.rows = RowSlots()                          # row -> its k

    def choose(self, batch) -> int:
        return max((self.rows[b] for b in range(len(batch))), default=self.k0)

    def row_caps(self):
        return [self.rows[b] for b in range(len(self.rows))]

    def row_state(self):
        return [self.rows]

    def start(self, row, seq):
        self.rows[row] = self.k0

    def observe(self, result):
        for b, (nd, n) in enumerate(zip(result.num_draft, result.accepted)):
            if nd > 0:
                self.rows[b] = min(self.k_max, self.rows[b] + 2) if n == nd else max(1, self.rows[b] - 1)


class TableK(KPolicy):
    """k by the number of running rows, from a fixed table (`config.KTable`): vLLM's
    `num_speculative_tokens_per_batch_size`, which `specdec analyze` emits."""
    name = "table"

    def __init__(self, table: KTable, k_max: int):
        self.table, self.k_max = table, k_max

    def choose(self, batch) -> int:
        return min(self.k_max, self.table.k_for(len(batch)))


HEURISTIC_K0 = 5        # Hugging Face's num_assistant_tokens default


def simple_policy(spec: SpecConfig) -> KPolicy:
    """The policy for a fixed or heuristic k; k = "auto" is built above the engine."""
    if spec.k == "auto":
        raise ConfigError('k="auto" needs the adaptive policy: build the engine with '
                          "specdec.build.make_engine, or pass policy= to Engine")
    if isinstance(spec.k, KTable):
        return TableK(spec.k, spec.k_max)
    if spec.k == "heuristic":
        return HeuristicK(min(HEURISTIC_K0, spec.k_max), spec.k_max)
    return FixedK(spec.k)
