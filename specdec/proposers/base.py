"""The Proposer interface, the Draft it returns, and the registry.

A proposer guesses up to k next tokens for every row of the running batch:

    draft = proposer.propose(batch, k)      # Draft(tokens (B, k), probs (B, k, V) | None),
                                            # or a tree of n nodes (tokens (B, n) and parents)
    ...the target verifies...
    proposer.rollback(num_accepted)          # (B,) host list: keep the accepted prefix

Row i of the batch is `batch[i]`, a sequence whose `token_ids` (prompt + output) end with
the newest token, which the target has not yet seen. Proposers return only new tokens. A
proposer without a distribution returns probs=None, which verification treats as a
one-hot q (still lossless). The lifecycle hooks keep per-row state in step with the
engine's rows.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import torch

from ..batch import Batch
from ..costs.key import CostKey


@dataclass
class Draft:
    tokens: torch.Tensor                 # (B, k) int64, rows padded past `lengths`
    probs: torch.Tensor | None = None    # (B, k, V) draft distribution q, or None (one-hot)
    lengths: list[int] | None = None     # valid tokens per row; None = k for every row
    parents: list[list[int]] | None = None  # (B, n) a token tree's node parents (-1: the root,
                                            # the pending token), earlier nodes first; None: a chain
    paths: list[list[int]] | None = None    # a tree's accepted branch per row (node indices), set
                                            # by the engine after verification, before rollback()

    def num_tokens(self) -> list[int]:
        B, k = self.tokens.shape
        return self.lengths if self.lengths is not None else [k] * B


class Proposer(ABC):
    """Guesses tokens for the target to verify. Subclasses implement `propose` and override
    the hooks they need; the defaults keep no state."""
    name = "base"
    max_k: int | None = None        # the proposer's own cap on k, if any
    uses_features = False           # the target hands it its final hidden states (take_features)
    one_forward = False             # drafts k tokens in one forward of its model (k + 1 positions),
                                    # priced so by the cost model, not as k steps

    @abstractmethod
    def propose(self, batch: Batch, k: int) -> Draft:
        """Up to k tokens for every row of `batch`."""

    def rollback(self, num_accepted: list[int]) -> None:
        """After verification: row b kept `num_accepted[b]` of its drafts. Drop the rest of
        the proposer's state (a draft model truncates its cache) and learn from it."""

    def start(self, row: int, seq) -> None:
        """A request entered batch row `row` (its prompt is seq.token_ids)."""

    def start_rows(self, rows: list[int], seqs: list) -> None:
        """Requests entered consecutive batch rows together (one admission): `start` for each,
        unless the proposer batches its own prefill."""
        for row, seq in zip(rows, seqs):
            self.start(row, seq)

    def take_features(self, rows: list[int], features: list[torch.Tensor]) -> None:
        """For a proposer that `uses_features`: the target's final normed hidden states of the
        positions it just committed in each row, features[i] (n_i, hidden), in order: a
        prompt's at admission (before start_rows), a round's accepted positions (the pending
        token and the accepted drafts) after verification."""

    def finish(self, row: int) -> None:
        """The request in `row` left the batch (called before the row table frees the row's
        state, so the proposer can still read it)."""

    def row_state(self) -> list:
        """The proposer's per-row state, which the row table moves and frees: its `RowSlots`
        (batch.py) and its KV caches (`move_row`, `reset`). The proposer never moves a row."""
        return []

    def plan(self, batch: Batch) -> None:
        """Before the policy chooses k; a proposer that decides per round which way it will
        guess (auto) decides here, so that cost_key() describes this round."""

    def cost_key(self) -> CostKey:
        """Which cost and acceptance record this round's drafting belongs to."""
        return CostKey(self.name)


class NoProposer(Proposer):
    """Plain decoding: never proposes."""
    name = "none"

    def propose(self, batch, k):
        return Draft(tokens=torch.zeros(len(batch), 0, dtype=torch.long), lengths=[0] * len(batch))


_REGISTRY: dict[str, Callable] = {}


def register(name: str):
    """Decorator: make a proposer factory `fn(target, spec, **resources)` constructible by name."""
    def deco(factory):
        _REGISTRY[name] = factory
        return factory
    return deco


register("none")(lambda target, spec, **resources: NoProposer())


def available() -> list[str]:
    return sorted(_REGISTRY)


def create(name: str, target, spec, **resources) -> Proposer:
    """Build proposer `name` for `target` with `spec` (a SpecConfig) and named resources
    such as `draft_model`. Unknown names raise a ConfigError listing the known ones."""
    from ..errors import ConfigError
    if name not in _REGISTRY:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(available())}")
    return _REGISTRY[name](target, spec, **resources)
