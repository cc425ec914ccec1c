"""Chat messages to prompt ids, through the checkpoint's own chat template.

The template comes from, in order: an override (`--chat-template FILE`, `LLM(chat_template=)`),
the checkpoint's `chat_template.jinja` (where transformers writes it now),
`chat_template.json`, `tokenizer_config.json`'s `chat_template` (a string, or a list of named
templates: "default"), or a GGUF file's `tokenizer.chat_template` (all read into the
tokenizer's rules by the loader). A checkpoint with none (the bundled models) gets the default
format: for each message "<Role>: <content>\\n", then "Assistant:".

A template renders as transformers' `apply_chat_template` renders it (a sandboxed Jinja
environment with trim_blocks, lstrip_blocks and loop controls; `raise_exception`,
`strftime_now`; a `tojson` that keeps non-ASCII text), with the special tokens' strings
(bos_token, eos_token, ...) in scope. Its text is encoded without adding special tokens: the
template wrote them. The default format is encoded with them, by the tokenizer's rule.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime

from ..errors import ConfigError, PromptError
from .tokenizer import Tokenizer

SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")   # in scope in every template
Message = Mapping[str, object] | tuple[str, str]


def default_chat_prompt(messages: list[dict]) -> str:
    lines = [f"{m['role'].capitalize()}: {m['content']}\n" for m in messages]
    return "".join(lines) + "Assistant:"


def compile_template(source: str, origin: str = "chat template"):
    """A Jinja chat template, compiled in a sandbox; ConfigError (naming `origin` and the
    line) when it does not parse."""
    from jinja2 import TemplateSyntaxError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(source)
    except TemplateSyntaxError as e:
        raise ConfigError(f"{origin}: not a valid Jinja template (line {e.lineno}: {e.message})") from e


def messages_of(messages: Iterable[Message]) -> list[dict]:
    """Messages as dicts with "role" and "content" (other keys kept): from dicts, or from
    (role, content) pairs. PromptError on anything else."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, tuple) and len(m) == 2:
            m = {"role": m[0], "content": m[1]}
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or "content" not in m:
            raise PromptError(f"message {i}: expected {{'role': str, 'content': ...}}, got {m!r:.80}")
        out.append(dict(m))
    if not out:
        raise PromptError("a chat needs at least one message")
    return out


class ChatTemplate:
    """Renders and encodes chat messages for `tokenizer`'s model; `override`: a template's
    source that replaces the checkpoint's."""

    def __init__(self, tokenizer: Tokenizer, override: str | None = None):
        self.tok = tokenizer
        source = override if override is not None else tokenizer.chat_template
        self.kind = "--chat-template" if override is not None else "checkpoint" if source else "default"
        self.template = compile_template(source, self.kind) if source else None
        self.specials = {n: tokenizer.special_token(n) or "" for n in SPECIAL_NAMES}

    def render(self, messages: Iterable[Message], add_generation_prompt: bool = True) -> str:
        """The prompt text for `messages`; PromptError where the template refuses them."""
        msgs = messages_of(messages)
        if self.template is None:
            return default_chat_prompt(msgs)
        try:
            return self.template.render(messages=msgs, add_generation_prompt=add_generation_prompt,
                                        **self.specials)
        except PromptError:
            raise
        except Exception as e:  # a template error is the request's fault (e.g. role order)
            raise PromptError(f"chat template failed: {e}") from e

    def encode(self, messages: Iterable[Message], add_generation_prompt: bool = True) -> list[int]:
        """Prompt ids for `messages` (module docstring: who adds the special tokens)."""
        text = self.render(messages, add_generation_prompt)
        return self.tok.encode(text, add_special_tokens=self.template is None)


def _raise(msg: str):
    raise PromptError(msg)


def _tojson(value, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)
