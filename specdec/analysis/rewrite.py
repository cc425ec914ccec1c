"""`chat-rewrite`: a chat turn that hands the model a passage and asks for it back, rewritten
or proofread: text a chat model can largely copy (the seed's predictable regime on a chat
model, regimes.py).

Built deterministically from held-out ShareGPT conversations (corpus.is_held_out of the id:
the split `specdec train` never reads). The passage is a conversation's first assistant reply,
whole, never cut; the user turn is an instruction (the two below, in turn), a blank line and
the passage, rendered through the target's chat template. Which conversations, in which
order, depends only on the seed: nothing here looks at what the model answers.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

INSTRUCTIONS = (
    "Rewrite the following text in clearer English, keeping its meaning and its structure:",
    "Correct any spelling and grammar mistakes in the following text, and reply with the corrected text only:",
)
# A passage longer than the 64 tokens an analysis decodes (quick and full grids), so that the
# answer is still going through the passage when the measurement ends, not past its end.
MIN_PASSAGE_TOKENS = 96


def first_reply(conversation: Sequence[dict]) -> str | None:
    """The first assistant turn after the first user turn, stripped; None where there is none."""
    seen_user = False
    for m in conversation:
        if m["role"] == "user":
            seen_user = True
        elif m["role"] == "assistant" and seen_user and m["content"].strip():
            return m["content"].strip()
    return None


def rewrite_messages(conversations: Sequence[Sequence[dict]], n: int, seed: int,
                     passage_tokens: Callable[[str], int], prompt_tokens: Callable[[list[dict]], int],
                     max_tokens: int) -> list[list[dict]]:
    """Up to `n` one-turn chats [{"role": "user", "content": instruction + passage}], from the
    conversations in a seeded order: those whose first reply has at least MIN_PASSAGE_TOKENS
    tokens (`passage_tokens`) and whose chat renders to at most `max_tokens` (`prompt_tokens`)."""
    order = list(range(len(conversations)))
    random.Random(f"chat-rewrite:{seed}").shuffle(order)
    out: list[list[dict]] = []
    for i in order:
        passage = first_reply(conversations[i])
        if passage is None or passage_tokens(passage) < MIN_PASSAGE_TOKENS:
            continue
        msgs = [{"role": "user", "content": f"{INSTRUCTIONS[len(out) % len(INSTRUCTIONS)]}\n\n{passage}"}]
        if prompt_tokens(msgs) <= max_tokens:
            out.append(msgs)
            if len(out) == n:
                break
    return out


def rewrite_workload(tokenizer, n: int, max_tokens: int, seed: int = 0) -> list[list[int]]:
    """`n` chat-rewrite prompts as token ids through the target's chat template (fewer where the
    held-out conversations hold fewer that fit `max_tokens`)."""
    from ..models.chat_template import ChatTemplate
    from .conversations import held_out_conversations
    template = ChatTemplate(tokenizer)
    msgs = rewrite_messages(held_out_conversations(), n, seed,
                            lambda text: len(tokenizer.encode(text, add_special_tokens=False)),
                            lambda m: len(template.encode(m)), max_tokens)
    return [template.encode(m) for m in msgs]
