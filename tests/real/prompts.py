"""Prompts for the real-model tier: plain texts and chats built from the standard library's
pydoc topics (prose), with edge cases a tokenizer gets wrong first (whitespace runs, digits,
non-ASCII, special-token strings written in the text)."""
from __future__ import annotations

import random

EDGE_TEXTS = [
    "Hello world", " leading space", "trailing space ", "  two  spaces  ", "\n\nnewlines\n\n", "\ttab\tseparated",
    "1234567890", "3.14159 and 2.71828", "naïve café — ünïcode ✓ 漢字 😀", "def f(x):\n    return x * 2\n",
    "<|im_start|>user\nHi<|im_end|>\n", "a<|im_end|>b", "<|endoftext|>", "Mixed CASE and snake_case_names",
    "http://example.com/path?q=1&r=2", "   ", "x",
]


def _topics() -> list[str]:
    from pydoc_data.topics import topics
    return [t for _, t in sorted(topics.items()) if len(t) > 200]


def plain_texts(n: int, seed: int = 0) -> list[str]:
    """`n` texts: the edge cases, then pieces of pydoc topics (a random start, 20-400 chars)."""
    rng, topics = random.Random(seed), _topics()
    out = list(EDGE_TEXTS)
    while len(out) < n:
        t = rng.choice(topics)
        i = rng.randrange(len(t) - 20)
        out.append(t[i:i + rng.randrange(20, 400)])
    return out[:n]


QUESTIONS = ["Explain this in one sentence:", "Summarise:", "What does this mean?", "Give an example of this:",
             "Is this true?"]


def chats(n: int, seed: int = 0) -> list[list[dict]]:
    """`n` conversations: single user turns, with and without a system message, and
    multi-turn ones ending on a user turn."""
    rng, texts = random.Random(seed), plain_texts(n * 3 + len(EDGE_TEXTS), seed + 1)[len(EDGE_TEXTS):]
    out = []
    for i in range(n):
        user = f"{rng.choice(QUESTIONS)} {texts[3 * i][:160]}"
        msgs = [{"role": "user", "content": user}]
        if i % 3 == 1:
            msgs.insert(0, {"role": "system", "content": "You are brief and precise."})
        if i % 3 == 2:
            msgs = [{"role": "user", "content": texts[3 * i + 1][:120]},
                    {"role": "assistant", "content": texts[3 * i + 2][:80]}, *msgs]
        out.append(msgs)
    return out
