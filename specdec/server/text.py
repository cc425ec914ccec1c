"""Text around the token stream: chat templates and incremental detokenization with stop strings.

Chat template: `specdec serve --chat-template FILE`, else the checkpoint's
tokenizer_config.json `chat_template`, else the default: BOS, then for each message "<Role>: <content>\\n" (Role = System, User,
Assistant, Tool or Developer), then "Assistant:" to prompt the reply.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError, PromptError
from ..models.tokenizer import Tokenizer


def default_chat_prompt(messages: list[tuple[str, str]]) -> str:
    lines = [f"{role.capitalize()}: {content}\n" for role, content in messages]
    return "".join(lines) + "Assistant:"


def compile_template(source: str, origin: str = "chat template"):
    """A Jinja chat template, compiled in a sandbox; ConfigError (naming `origin` and the
    line) when it does not parse."""
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    try:
        return env.from_string(source)
    except TemplateSyntaxError as e:
        raise ConfigError(f"{origin}: not a valid Jinja template (line {e.lineno}: {e.message})") from e


class ChatFormatter:
    """Renders messages to prompt ids with a Jinja template (`template`, else the checkpoint's
    tokenizer_config.json `chat_template`), or the default format."""

    def __init__(self, tokenizer: Tokenizer, checkpoint: Path | None, template: str | None = None):
        self.tok = tokenizer
        self.template, self.origin = None, "default"
        cfg_path = Path(checkpoint) / "tokenizer_config.json" if checkpoint else None
        cfg = json.loads(cfg_path.read_text()) if cfg_path is not None and cfg_path.exists() else {}
        tmpl = cfg.get("chat_template")
        if isinstance(tmpl, list):  # [{"name": "default", "template": ...}, ...]
            tmpl = next((t.get("template") for t in tmpl if t.get("name") == "default"), None)
        if template is not None:
            tmpl, self.origin = template, "--chat-template"
        elif tmpl:
            self.origin = "checkpoint"
        if tmpl:
            self.template = compile_template(tmpl, self.origin)
            self.bos_token = _token_str(cfg.get("bos_token"), "<s>")
            self.eos_token = _token_str(cfg.get("eos_token"), "</s>")

    @property
    def kind(self) -> str:
        """Where the template came from: "--chat-template", "checkpoint" or "default"."""
        return self.origin

    def encode(self, messages: list[tuple[str, str]]) -> list[int]:
        if self.template is None:
            return self.tok.encode(default_chat_prompt(messages))
        try:
            text = self.template.render(messages=[{"role": r, "content": c} for r, c in messages],
                                        add_generation_prompt=True, bos_token=self.bos_token,
                                        eos_token=self.eos_token)
        except PromptError:
            raise
        except Exception as e:  # a template error is the request's fault (e.g. role order)
            raise PromptError(f"chat template failed: {e}") from e
        # A template that writes the BOS itself must not get a second one.
        bos = not text.startswith(self.bos_token)
        return self.tok.encode(text, bos=bos)


def _raise(msg: str):
    raise PromptError(msg)


def _token_str(tok, default: str) -> str:
    if isinstance(tok, dict):
        return tok.get("content", default)
    return tok if isinstance(tok, str) else default


class TextStream:
    """Turns token ids into text deltas; holds back partial UTF-8 and possible stop-string
    starts; cuts the text at the first stop string."""

    def __init__(self, tokenizer: Tokenizer, stops: list[str]):
        self.tok, self.stops = tokenizer, [s for s in stops if s]
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0            # characters already returned
        self.stopped = False

    def push(self, ids: list[int]) -> str:
        """Add tokens; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        self.text = self.tok.decode(self.ids)
        if self.stops:
            hit = min((i for i in (self.text.find(s, max(0, self.sent - len(s) + 1)) for s in self.stops)
                       if i >= 0), default=-1)
            if hit >= 0:
                self.stopped = True
                self.text = self.text[:hit]
                return self._take(len(self.text))
        safe = len(self.text)
        while safe > self.sent and self.text[safe - 1] == "\ufffd":
            safe -= 1
        hold = 0                 # keep back a suffix that could start a stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, safe - self.sent), hold, -1):
                if s.startswith(self.text[safe - n:safe]):
                    hold = n
                    break
        return self._take(safe - hold)

    def flush(self) -> str:
        """The request finished: return everything not yet shown."""
        return self._take(len(self.text))

    def _take(self, upto: int) -> str:
        out = self.text[self.sent:upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return out
