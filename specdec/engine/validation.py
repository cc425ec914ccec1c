"""The checks a request passes before it is queued: one place for the engine and the server."""
from __future__ import annotations

from ..errors import PromptError


def check_request(prompt_ids: list[int], max_new_tokens: int, vocab: int, max_model_len: int,
                  budget_name: str = "max_new_tokens") -> None:
    """Raise PromptError for an empty prompt, a token id outside [0, vocab), or a prompt
    that with `max_new_tokens` overruns the context (`budget_name` is how the caller's API
    spells that parameter)."""
    if not prompt_ids:
        raise PromptError("empty prompt")
    if any((not isinstance(t, int)) or t < 0 or t >= vocab for t in prompt_ids):
        raise PromptError(f"prompt token ids must be integers in [0, {vocab})")
    total = len(prompt_ids) + max_new_tokens
    if total > max_model_len:
        raise PromptError(f"prompt ({len(prompt_ids)} tokens) + {budget_name} ({max_new_tokens}) "
                          f"= {total} exceeds the context length {max_model_len}")


def check_params(params, vocab: int) -> None:
    """Raise PromptError for sampling settings that name tokens outside [0, vocab) (the
    vocabulary-free checks are SamplingParams' own)."""
    bad = [t for t, _ in params.logit_bias if t >= vocab]
    if bad:
        raise PromptError(f"logit_bias token ids must be integers in [0, {vocab}), got {bad[0]}")
