"""What `LLM.generate` returns: one RequestOutput per prompt, with the request's
speculative-decoding statistics under vLLM's names and definitions."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.metrics import acceptance_rate, mean_acceptance_length
from ..engine.sequence import Sequence
from ..models.tokenizer import Tokenizer


@dataclass(frozen=True)
class SpecStats:
    """One request's acceptance metrics, as vLLM defines them (`vllm:spec_decode_*`): a
    draft is one round that proposed at least one token for this request."""
    num_drafts: int = 0                 # rounds that proposed >= 1 token
    num_draft_tokens: int = 0           # tokens proposed, over all rounds
    num_accepted_tokens: int = 0        # proposed tokens the target accepted
    num_accepted_tokens_per_pos: tuple[int, ...] = ()  # rounds whose draft position j was accepted
    num_recovered_tokens: int = 0       # draft rounds that ended at a rejection (one resampled token)
    num_bonus_tokens: int = 0           # draft rounds that accepted every draft (one bonus token)
    target_forwards: int = 0            # target passes: the prefill and one per round
    wall_s: float = 0.0                 # from arrival to the last token
    num_output_tokens: int = 0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens gained per draft round: 1 + accepted / drafts (1.0 without drafts)."""
        return mean_acceptance_length(self.num_accepted_tokens, self.num_drafts)

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed tokens (0.0 without drafts)."""
        return acceptance_rate(self.num_accepted_tokens, self.num_draft_tokens)

    @property
    def per_position_acceptance(self) -> list[float]:
        """For each draft position j, the share of draft rounds that accepted it."""
        return [a / self.num_drafts for a in self.num_accepted_tokens_per_pos] if self.num_drafts else []

    @property
    def tokens_per_s(self) -> float:
        return self.num_output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """The `stats` object that `specdec generate --json` prints, key for key."""
        return {"target_forwards": self.target_forwards, "drafts": self.num_drafts,
                "draft_tokens": self.num_draft_tokens, "accepted_tokens": self.num_accepted_tokens,
                "recovered_tokens": self.num_recovered_tokens, "bonus_tokens": self.num_bonus_tokens,
                "acceptance_rate": self.acceptance_rate, "mean_acceptance_length": self.mean_acceptance_length,
                "per_position_acceptance": self.per_position_acceptance, "tokens_per_s": self.tokens_per_s,
                "wall_s": self.wall_s}

    @classmethod
    def of(cls, seq: Sequence) -> SpecStats:
        s = seq.stats
        wall = (s.t_end if s.t_end is not None else s.t_arrival) - s.t_arrival
        return cls(num_drafts=s.drafts, num_draft_tokens=s.draft_tokens, num_accepted_tokens=s.accepted_tokens,
                   num_accepted_tokens_per_pos=tuple(s.accepted_per_pos),
                   num_recovered_tokens=s.recovered_tokens, num_bonus_tokens=s.bonus_tokens, target_forwards=s.target_forwards,
                   wall_s=wall, num_output_tokens=seq.num_output)


@dataclass(frozen=True)
class RequestOutput:
    """One finished request. finish_reason: "stop" (an end-of-sequence or stop token),
    "length" (max_new_tokens reached) or "abort"."""
    request_id: str
    prompt: str | None                  # None when the prompt was given as token ids
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]                # the generated tokens, without the prompt
    finish_reason: str | None
    stats: SpecStats = field(default_factory=SpecStats)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @classmethod
    def of(cls, seq: Sequence, prompt: str | None, tokenizer: Tokenizer) -> RequestOutput:
        return cls(request_id=str(seq.id), prompt=prompt, prompt_token_ids=list(seq.token_ids[:seq.prompt_len]),
                   text=tokenizer.decode(seq.output_ids), token_ids=list(seq.output_ids),
                   finish_reason=seq.finish_reason, stats=SpecStats.of(seq))
