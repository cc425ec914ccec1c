"""The Proposer protocol, the Draft it returns, and the registry of proposers.

A proposer guesses up to k next tokens for every row of the running batch:

    draft = proposer.propose(context, k)     # Draft(tokens (B, k), probs (B, k, V) | None)
    ...target verifies...
    proposer.observe(num_accepted)            # (B,) host list: roll back, learn, adapt

`context` is the list of running sequences, row i of the batch being context[i]; each
exposes `token_ids` (prompt + output, ending with the newest token, which the target has
not yet seen). Proposers return only new tokens. A proposer that has no distribution
returns probs=None, which verification treats as a one-hot q (still lossless).
Lifecycle hooks let proposers with state keep per-row caches in step with the engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence as Seq, runtime_checkable

import torch


class Batch(list):
    """The running sequences, row i = self[i], plus their sampling settings as tensors and
    whether the batch is draining (no request waits for a row, so none refills one)."""

    def __init__(self, seqs, sampling, draining: bool = False):
        super().__init__(seqs)
        self.sampling = sampling  # verify.sampling.BatchSampling
        self.draining = draining


@dataclass
class Draft:
    tokens: torch.Tensor                 # (B, k) int64, rows padded past `lengths`
    probs: torch.Tensor | None = None    # (B, k, V) draft distribution q, or None (one-hot)
    lengths: list[int] | None = None     # valid tokens per row; None = k for every row
    # (B, V) the proposer's logits for the token after the previous round's last draft, where
    # it computed them on the way (a draft model catching up after a fully accepted round
    # feeds [d_k, bonus]); rows whose previous round was not fully accepted hold other logits.
    # The engine turns them into an acceptance probability one position past k (lookahead.py).
    lookahead_logits: torch.Tensor | None = None

    def num_tokens(self) -> list[int]:
        B, k = self.tokens.shape
        return self.lengths if self.lengths is not None else [k] * B


@runtime_checkable
class Proposer(Protocol):
    name: str
    needs_cache_rows: bool

    def propose(self, context: Seq, k: int) -> Draft: ...

    def observe(self, num_accepted: list[int]) -> None: ...


class BaseProposer:
    """Default no-op lifecycle hooks; subclasses override what they need."""
    name = "base"
    max_k: int | None = None        # the proposer's own cap on k, if any

    def start(self, row: int, seq) -> None:
        """A request entered batch row `row` (its prompt is seq.token_ids)."""

    def move_row(self, src: int, dst: int) -> None:
        """The engine moved the request in row `src` to row `dst`."""

    def finish(self, row: int) -> None:
        """The request in `row` left the batch."""

    def plan(self, batch) -> None:
        """Called before the policy chooses k; a proposer that decides per round which way
        it will guess (auto) decides here, so that cost_key() describes this round."""

    def observe(self, num_accepted: list[int]) -> None:
        pass

    def cost_key(self) -> str:
        """Identifies this proposer's cost in the cost model (e.g. a draft model's name)."""
        return self.name


class NoProposer(BaseProposer):
    """Plain decoding: never proposes."""
    name = "none"

    def propose(self, context, k):
        return Draft(tokens=torch.zeros(len(context), 0, dtype=torch.long), lengths=[0] * len(context))


def move_row_state(rows: dict, src: int, dst: int) -> None:
    """For proposers that keep per-row state in a dict: the state of `src` now belongs to `dst`."""
    if src in rows:
        rows[dst] = rows.pop(src)
    else:
        rows.pop(dst, None)


_REGISTRY: dict[str, Callable] = {}


def register(name: str):
    """Class decorator: make a proposer constructible by name via `create`."""
    def deco(factory):
        _REGISTRY[name] = factory
        return factory
    return deco


register("none")(lambda target, spec, **resources: NoProposer())


def available() -> list[str]:
    return sorted(_REGISTRY)


def create(name: str, target, spec, **resources):
    """Build proposer `name` for `target` with `spec` (a SpecConfig) and named resources
    such as `draft_model`. Unknown names raise a ConfigError listing the known ones."""
    from ..errors import ConfigError
    from . import _load_builtin  # noqa: F401  (registers the built-in proposers)
    if name not in _REGISTRY:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(available())}")
    return _REGISTRY[name](target, spec, **resources)
