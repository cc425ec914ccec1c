"""OpenAI-compatible request and response models (pydantic), plus specdec's extensions.

Extensions over the OpenAI API:
- `top_k` (int, 0 = off), `ignore_eos` and `return_token_ids` on both endpoints;
- `speculative`: {"method": "draft" | "none" | ..., "k": int | "auto" | "heuristic",
  "tree": int | "auto" | "off"} per request;
- `usage.accepted_tokens`, `usage.draft_tokens`, `usage.mean_acceptance_length`.

Types are strict (a string is not an int), so malformed requests fail validation and the
app answers 400 with an OpenAI-style error object.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      field_validator)

from ..config import LOGIT_BIAS_RANGE, MAX_LOGPROBS, PENALTY_RANGE, SEED_MAX, SEED_MIN

Number = Union[StrictInt, StrictFloat]


class _Req(BaseModel):
    # Fields not declared here (metadata such as `user`) are accepted and ignored; every
    # parameter that would change the output is declared, and handled or refused.
    model_config = ConfigDict(extra="ignore")


class SpeculativeOptions(_Req):
    """Per-request speculation. Omitted fields fall back to the server's defaults."""
    method: StrictStr | None = None
    k: StrictInt | Literal["auto", "heuristic"] | None = None
    tree: StrictInt | Literal["off", "auto"] | None = None     # a token tree's node budget (docs/trees.md)


class StreamOptions(_Req):
    include_usage: StrictBool = False              # a last chunk with the whole request's usage
    continuous_usage_stats: StrictBool = False     # vLLM's: every chunk carries its choice's usage


# Parameters that would change the output and that specdec does not implement: a request
# that sets one to anything but its no-op value gets a 400 naming it, never a silent 200.
UNSUPPORTED = {
    "best_of": lambda v: v is None or v == 1,
    "suffix": lambda v: v is None or v == "",
    "tools": lambda v: v is None or v == [],
    "tool_choice": lambda v: v is None or v == "none",
    "response_format": lambda v: v is None or v == {"type": "text"},
}


def unsupported_param(req) -> str | None:
    """The first parameter of UNSUPPORTED that `req` sets to a value that would matter."""
    return next((name for name, noop in UNSUPPORTED.items()
                 if name in type(req).model_fields and not noop(getattr(req, name))), None)


class _Sampling(_Req):
    model: StrictStr | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: Number | None = Field(default=None, ge=0, le=2)
    top_p: Number | None = Field(default=None, gt=0, le=1)
    top_k: StrictInt | None = Field(default=None, ge=0)
    seed: StrictInt | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    stop: StrictStr | list[StrictStr] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt = Field(default=1, ge=1)
    ignore_eos: StrictBool = False   # extension (as in vLLM): generate exactly max_tokens
    return_token_ids: StrictBool = False  # extension: choices[0].token_ids (non-streaming)
    speculative: SpeculativeOptions | None = None
    # extension: "invariant" makes a seed's text independent of speculation (verify/coupling.py)
    sampling_coupling: Literal["standard", "invariant"] = "standard"
    # logit processing, applied alike to the target's p and the draft's q (verify/processors.py)
    logit_bias: dict[StrictStr, Number] | None = None      # OpenAI's: token id (a string) -> bias
    frequency_penalty: Number | None = Field(default=None, ge=-PENALTY_RANGE, le=PENALTY_RANGE)
    presence_penalty: Number | None = Field(default=None, ge=-PENALTY_RANGE, le=PENALTY_RANGE)
    repetition_penalty: Number | None = Field(default=None, gt=0)
    min_tokens: StrictInt | None = Field(default=None, ge=0)
    # declared so that they are refused, not ignored (UNSUPPORTED)
    best_of: Any = None
    tools: Any = None
    tool_choice: Any = None
    response_format: Any = None

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for key, bias in (v or {}).items():
            if not key.isdecimal():
                raise ValueError(f"keys are token ids written as strings, got {key!r}")
            if not -LOGIT_BIAS_RANGE <= bias <= LOGIT_BIAS_RANGE:
                raise ValueError(f"values must be in [-{LOGIT_BIAS_RANGE:g}, {LOGIT_BIAS_RANGE:g}], "
                                 f"got {bias!r} for token {key}")
        return v

    def processing(self) -> dict:
        """The logit-processing settings as SamplingParams keywords (unset ones left out)."""
        out = {name: getattr(self, name) for name in
               ("frequency_penalty", "presence_penalty", "repetition_penalty", "min_tokens")
               if getattr(self, name) is not None}
        if self.logit_bias:
            out["logit_bias"] = {int(k): float(b) for k, b in self.logit_bias.items()}
        return out

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return [s for s in stops if s]


class CompletionRequest(_Sampling):
    prompt: StrictStr | list[StrictInt] | list[StrictStr] | list[list[StrictInt]]
    echo: StrictBool = False
    suffix: Any = None
    # each emitted token's log-probability and this many alternatives (engine/logprobs.py)
    logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    def logprobs_asked(self) -> int | None:
        return self.logprobs


class ChatMessage(_Req):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: StrictStr | list[dict] | None = None

    def text(self) -> str:
        """The message's text; content parts other than text are refused upstream."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    def logprobs_asked(self) -> int | None:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return (self.top_logprobs or 0) if self.logprobs else None


def unencodable(obj, loc: str = "") -> str | None:
    """The location of the first string in a JSON value that UTF-8 cannot encode (JSON allows
    escaped lone surrogates such as "\\ud800"; the tokenizer does not), or None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return loc
        return None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        if isinstance(key, str) and unencodable(key) is not None:
            return loc
        found = unencodable(value, f"{loc}.{key}" if loc else str(key))
        if found is not None:
            return found
    return None


class TokenizeRequest(_Req):
    prompt: StrictStr
    add_special_tokens: StrictBool = True      # the BOS token, as the completions endpoint adds


class DetokenizeRequest(_Req):
    tokens: list[StrictInt]


# ---- responses ---------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    accepted_tokens: int = 0
    draft_tokens: int = 0
    mean_acceptance_length: float = 1.0


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | int | None = None) -> dict:
    """OpenAI's error object: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def completion_chunk(cid: str, model: str, created: int, text: str, finish: str | None,
                     usage: Usage | None = None, index: int = 0) -> dict:
    out = {"id": cid, "object": "text_completion", "created": created, "model": model,
           "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage.model_dump()
    return out


def chat_chunk(cid: str, model: str, created: int, delta: dict, finish: str | None,
               usage: Usage | None = None, index: int = 0) -> dict:
    out = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
           "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage.model_dump()
    return out


def response(cid: str, model: str, created: int, chat_mode: bool, choices: list[dict], usage: Usage) -> dict:
    """A whole (non-streaming) chat.completion or text_completion body."""
    return {"id": cid, "object": "chat.completion" if chat_mode else "text_completion", "created": created,
            "model": model, "choices": choices, "usage": usage.model_dump()}


def choice(index: int, chat_mode: bool, text: str, finish: str | None) -> dict:
    """One choice of a whole response: a chat message or a completion's text."""
    body = {"message": {"role": "assistant", "content": text}} if chat_mode else {"text": text}
    return {"index": index, **body, "logprobs": None, "finish_reason": finish}


def logprobs_body(tokenizer, ids: list[int], records: list, chat_mode: bool, offset: int = 0) -> dict:
    """OpenAI's logprobs object for emitted `ids` and their engine records (logprob, top):
    chat's {"content": [...]} or completions' parallel lists, text offsets from `offset`."""
    piece = lambda i: tokenizer.decode([i])  # noqa: E731
    if chat_mode:
        entry = lambda i, lp: {"token": piece(i), "logprob": lp, "bytes": list(piece(i).encode())}  # noqa: E731
        return {"content": [{**entry(i, lp), "top_logprobs": [entry(a, v) for a, v in top]}
                            for i, (lp, top) in zip(ids, records)]}
    offsets, at = [], offset
    for i in ids:
        offsets.append(at)
        at += len(piece(i))
    return {"tokens": [piece(i) for i in ids], "token_logprobs": [lp for lp, _ in records],
            "top_logprobs": [{piece(a): v for a, v in top} for _, top in records], "text_offset": offsets}
