"""Engine-wide speculative-decoding counters, with vLLM's definitions and names."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..verify.tree import ends_at_leaf


def mean_acceptance_length(accepted: int, drafts: int) -> float:
    """vLLM's: tokens gained per draft round, 1 + accepted / drafts (1.0 without drafts)."""
    return 1 + accepted / drafts if drafts else 1.0


def acceptance_rate(accepted: int, proposed: int) -> float:
    """Accepted over proposed draft tokens (0.0 without drafts)."""
    return accepted / proposed if proposed else 0.0


def count_positions(accepted_per_pos: list[int], num_draft: int, num_accepted: int) -> None:
    """vLLM's per-position count: a round that drafted `num_draft` tokens and had the first
    `num_accepted` accepted adds one at positions 0..num_accepted-1 (grown as needed)."""
    if len(accepted_per_pos) < num_draft:
        accepted_per_pos.extend([0] * (num_draft - len(accepted_per_pos)))
    for j in range(num_accepted):
        accepted_per_pos[j] += 1


@dataclass
class EngineMetrics:
    num_drafts: int = 0                 # vllm:spec_decode_num_drafts
    num_draft_tokens: int = 0           # vllm:spec_decode_num_draft_tokens
    num_accepted_tokens: int = 0        # vllm:spec_decode_num_accepted_tokens
    accepted_per_pos: list[int] = field(default_factory=list)  # ..._num_accepted_tokens_per_pos
    accepted_length_hist: dict[int, int] = field(default_factory=dict)  # accepted count -> rounds
    target_forwards: int = 0
    steps: int = 0
    generated_tokens: int = 0
    step_time_s: float = 0.0
    k_hist: dict[int, int] = field(default_factory=dict)
    tree_rounds: int = 0                # rows' rounds that drafted a token tree
    tree_nodes: int = 0                 # the nodes those trees held (also in num_draft_tokens)
    branch_accepts: int = 0             # accepted tree nodes that were not their parent's first child
    t_start: float = field(default_factory=time.perf_counter)

    def record_row(self, num_draft: int, num_accepted: int, depth: int | None = None) -> None:
        """One row's round: `num_draft` tokens scored (a tree's nodes), `num_accepted` kept.
        Per-position counts run over the draft's positions: a tree's depths (`depth`)."""
        if num_draft <= 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        count_positions(self.accepted_per_pos, depth or num_draft, num_accepted)
        self.accepted_length_hist[num_accepted] = self.accepted_length_hist.get(num_accepted, 0) + 1

    def record_tree(self, path: list[int], parents: list[int]) -> None:
        """A row's tree round: its node count and its accepted branch (node indices)."""
        self.tree_rounds += 1
        self.tree_nodes += len(parents)
        self.branch_accepts += sum(parents.index(parents[j]) != j for j in path)

    def record_round(self, k: int, dt: float) -> None:
        """A decode round (one target forward) with k drafts asked per row took dt seconds."""
        self.target_forwards += 1
        self.steps += 1
        self.step_time_s += dt
        self.k_hist[k] = self.k_hist.get(k, 0) + 1

    @property
    def mean_acceptance_length(self) -> float:
        return mean_acceptance_length(self.num_accepted_tokens, self.num_drafts)

    @property
    def acceptance_rate(self) -> float:
        return acceptance_rate(self.num_accepted_tokens, self.num_draft_tokens)

    def as_dict(self) -> dict:
        return {
            "num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": list(self.accepted_per_pos),
            "per_position_acceptance": [a / self.num_drafts for a in self.accepted_per_pos]
            if self.num_drafts else [],
            "accepted_length_hist": dict(sorted(self.accepted_length_hist.items())),
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate,
            "target_forwards": self.target_forwards, "steps": self.steps,
            "generated_tokens": self.generated_tokens, "step_time_s": self.step_time_s,
            "k_hist": dict(sorted(self.k_hist.items())),
            "tree_rounds": self.tree_rounds, "tree_nodes": self.tree_nodes,
            "branch_accepts": self.branch_accepts,
        }


def record_row(metrics: EngineMetrics, seq, drafted: int, accepted: int, k: int, path: list[int],
               parents: list[int] | None) -> None:
    """Count one row's round in the sequence's and the engine's statistics: a chain's, or a
    token tree's (`parents`: the row's node parents; its accepted `path`, drafted to depth k)."""
    if parents is None:
        seq.stats.record(drafted, accepted)
        metrics.record_row(drafted, accepted)
        return
    seq.stats.record(drafted, accepted, depth=k, bonus=ends_at_leaf(path, parents))
    metrics.record_row(drafted, accepted, depth=k)
    if parents:
        metrics.record_tree(path, parents)
