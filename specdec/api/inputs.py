"""Prompts and sampling parameters as `LLM.generate` accepts them, checked and paired up.

A prompt is a string, a list of token ids, or vLLM's dict form ({"prompt": str} or
{"prompt_token_ids": [int, ...]}). `generate` takes one prompt or a list of them, and one
SamplingParams for all or a list with one per prompt.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from ..config import SamplingParams
from ..errors import ConfigError, PromptError
from ..models.tokenizer import Tokenizer

PromptInput = Union[str, Sequence[int], Mapping[str, Any]]
Prompts = Union[str, Mapping[str, Any], Sequence[PromptInput]]
Params = Union[SamplingParams, Sequence[SamplingParams], None]


def prompt_list(prompts: Prompts) -> list[PromptInput]:
    """One prompt or a list of them, as a list."""
    if isinstance(prompts, (str, Mapping)):
        return [prompts]
    if not isinstance(prompts, Sequence):
        raise PromptError(f"prompts must be a string or a list of prompts, got {type(prompts).__name__}")
    items = list(prompts)
    if items and all(isinstance(p, int) for p in items):
        raise PromptError("a flat list of token ids is ambiguous: pass [[ids...]] or {'prompt_token_ids': [ids...]}")
    return items


def encode(prompt: PromptInput, tokenizer: Tokenizer) -> tuple[str | None, list[int]]:
    """(text or None, token ids) of one prompt; an empty prompt is refused as the CLI refuses it."""
    value: object = prompt
    if isinstance(prompt, Mapping):
        if set(prompt) - {"prompt", "prompt_token_ids"} or len(prompt) != 1:
            raise PromptError("a prompt dict has exactly one key: 'prompt' or 'prompt_token_ids'")
        value = prompt.get("prompt", prompt.get("prompt_token_ids"))
    if isinstance(value, str):
        if not value:
            raise PromptError("empty prompt")
        return value, tokenizer.encode(value)
    if isinstance(value, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        if not value:
            raise PromptError("empty prompt")
        return None, [int(t) for t in value]
    raise PromptError(f"a prompt is a string or a list of token ids, got {type(value).__name__}")


def params_list(params: Params, n: int) -> list[SamplingParams]:
    """One SamplingParams per prompt: the default, one shared, or one each."""
    if params is None:
        return [SamplingParams()] * n
    if isinstance(params, SamplingParams):
        return [params] * n
    items = list(params) if isinstance(params, Sequence) else None
    if items is None or not all(isinstance(p, SamplingParams) for p in items):
        raise ConfigError("sampling_params must be a SamplingParams or a list of them")
    if len(items) != n:
        raise ConfigError(f"got {len(items)} sampling params for {n} prompts")
    return items
