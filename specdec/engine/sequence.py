"""A request as it moves through the engine: tokens, sampling state and statistics."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from enum import Enum

import torch

from ..config import SamplingParams
from .metrics import count_positions

_ids = itertools.count()


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class SeqStats:
    """vLLM's definitions: a draft is one round with >= 1 proposed token for this request."""
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    recovered_tokens: int = 0     # draft rounds that ended at a rejection: one resampled token each
    bonus_tokens: int = 0         # draft rounds that accepted every draft (a tree: to a leaf): one each
    accepted_per_pos: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)  # accepted count of each draft round
    draft_lengths: list[int] = field(default_factory=list)     # proposed count of each draft round
    tree_nodes: list[int] = field(default_factory=list)        # node count of each tree round
    target_forwards: int = 0
    t_arrival: float = field(default_factory=time.perf_counter)
    t_first_token: float | None = None
    t_end: float | None = None

    def record(self, num_draft: int, num_accepted: int, depth: int | None = None,
               bonus: bool | None = None) -> None:
        """One round: `num_draft` tokens scored, `num_accepted` kept. A tree round gives its
        depth (per-position counts run over depths) and whether its branch ended at a leaf
        (a bonus token; a chain's is accepting every draft)."""
        self.target_forwards += 1
        if num_draft <= 0:
            return
        self.drafts += 1
        self.draft_tokens += num_draft
        self.accepted_tokens += num_accepted
        if bonus if bonus is not None else num_accepted >= num_draft:
            self.bonus_tokens += 1
        else:
            self.recovered_tokens += 1
        self.accepted_lengths.append(num_accepted)
        self.draft_lengths.append(num_draft)
        if depth is not None:
            self.tree_nodes.append(num_draft)
        count_positions(self.accepted_per_pos, depth or num_draft, num_accepted)

    def as_dict(self, num_output: int) -> dict:
        wall = (self.t_end or time.perf_counter()) - self.t_arrival
        return {
            "target_forwards": self.target_forwards,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "recovered_tokens": self.recovered_tokens,
            "bonus_tokens": self.bonus_tokens,
            "acceptance_rate": self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0,
            "mean_acceptance_length": 1 + self.accepted_tokens / self.drafts if self.drafts else 1.0,
            "per_position_acceptance": [a / self.drafts for a in self.accepted_per_pos] if self.drafts else [],
            **({"tree_nodes": list(self.tree_nodes)} if self.tree_nodes else {}),
            "tokens_per_s": num_output / wall if wall > 0 else 0.0,
            "wall_s": wall,
        }


class Sequence:
    def __init__(self, prompt_ids: list[int], params: SamplingParams, stop_ids: tuple[int, ...] = ()):
        self.id = next(_ids)
        self.token_ids = list(prompt_ids)    # prompt + output; the last one is not yet in the target cache
        self.prompt_len = len(prompt_ids)
        self.params = params
        self.stop_ids = () if params.ignore_eos else tuple(set(stop_ids) | set(params.stop_token_ids))
        seed = params.seed if params.seed is not None else torch.seed() % (2**63)
        self.seed = seed
        self.generator = None if params.greedy else torch.Generator().manual_seed(seed)
        self.noise = None                    # verify.coupling.CoupledNoise for coupled requests
        self.status = Status.WAITING
        self.finish_reason: str | None = None
        self.row = -1
        self.stats = SeqStats()
        self.new_tokens: list[int] = []      # tokens produced by the latest step (for streaming)
        self.logprobs: list = []             # engine.logprobs.TokenLogprob per output token, if asked
        self.new_logprobs: list = []         # the latest step's share of them

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len:]

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.prompt_len

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def append(self, tokens: list[int], logprobs: list | None = None) -> None:
        """Add accepted tokens, stopping at a stop token or at max_new_tokens; `logprobs`,
        if given, holds one record per token of `tokens`."""
        out = []
        for t in tokens:
            if self.num_output + len(out) >= self.params.max_new_tokens:
                break
            if t in self.stop_ids:
                self.finish_reason = "stop"
                break
            out.append(t)
        self.token_ids.extend(out)
        self.new_tokens.extend(out)
        if logprobs is not None:
            self.logprobs.extend(logprobs[:len(out)])
            self.new_logprobs.extend(logprobs[:len(out)])
        if self.stats.t_first_token is None:
            self.stats.t_first_token = time.perf_counter()
        if self.finish_reason is None and self.num_output >= self.params.max_new_tokens:
            self.finish_reason = "length"
        if self.finish_reason is not None:
            self.status = Status.FINISHED
            self.stats.t_end = time.perf_counter()
