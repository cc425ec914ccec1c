"""One HTTP request as several engine requests: `n` choices per prompt, and batched prompts.

Choice j of prompt i is OpenAI's choice index i * n + j. Each is an engine request of its own
(its own rows, its own seed), so choices run side by side in the continuous batch.

Seeds: with a request seed s, choice j samples with `choice_seed(s, j)`: s itself for j = 0
(so n = 1 is unchanged), else (s + j * SEED_STRIDE) mod 2^64. The n choices of a seeded
request therefore differ under sampling and reproduce together; every prompt of a batch uses
the same n seeds, as n separate requests with those seeds would.

`collect` gathers whole choices (non-streaming); `sse` merges their streams into one
server-sent-event stream, each chunk tagged with its choice's index.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from . import protocol as P
from .events import HTTPError, abort_on_disconnect, events
from .handle import Handle
from .text import TextStream
from .worker import Worker

# 2^64 / golden ratio, odd: j * SEED_STRIDE mod 2^64 differs for every j < 2^64, and nearby
# choices get far-apart seeds (no overlap with a client's own seed + 1, seed + 2, ...)
SEED_STRIDE = 0x9E3779B97F4A7C15
SEED_MOD = 2 ** 64          # torch's seed range is 64 bits wide (config.SEED_MIN..SEED_MAX)


def choice_seed(seed: int | None, j: int) -> int | None:
    """The seed choice j of a request with `seed` samples with (see the module docstring)."""
    if seed is None or j == 0:
        return seed
    return (seed + j * SEED_STRIDE) % SEED_MOD


@dataclass
class Choice:
    """One choice: its OpenAI index, its engine request and its text so far."""
    index: int
    first_of_prompt: bool          # counts its prompt's tokens in the usage
    handle: Handle
    stream: TextStream
    echo: str = ""                 # completions' `echo`: the prompt's text
    sent: int = 0                  # tokens whose logprobs were streamed
    offset: int = field(default=0)  # text offset of the next streamed logprob

    def __post_init__(self):
        self.offset = len(self.echo)


def usage(choices: list[Choice], upto: Choice | None = None) -> P.Usage:
    """Usage summed over `choices` (each prompt counted once); or, with `upto`, that one
    choice's so far (its prompt and the tokens it has emitted)."""
    if upto is not None:
        choices = [upto]
    prompt = sum(len(c.handle.prompt_ids) for c in choices if c.first_of_prompt or upto is not None)
    done = sum(len(c.stream.ids) for c in choices)
    stats = [c.handle.seq.stats for c in choices if c.handle.seq is not None]
    drafts, accepted = sum(s.drafts for s in stats), sum(s.accepted_tokens for s in stats)
    return P.Usage(prompt_tokens=prompt, completion_tokens=done, total_tokens=prompt + done,
                   accepted_tokens=accepted, draft_tokens=sum(s.draft_tokens for s in stats),
                   mean_acceptance_length=1 + accepted / drafts if drafts else 1.0)


def logprobs_since(c: Choice, chat_mode: bool) -> dict | None:
    """The logprobs body of the tokens `c` emitted since the last call, or None if none."""
    if len(c.stream.ids) <= c.sent:
        return None
    ids = c.stream.ids[c.sent:]
    body = P.logprobs_body(c.stream.tok, ids, c.handle.seq.logprobs[c.sent:len(c.stream.ids)], chat_mode, c.offset)
    c.offset += sum(len(c.stream.tok.decode([i])) for i in ids)
    c.sent = len(c.stream.ids)
    return body


async def collect(request, worker: Worker, choices: list[Choice]) -> list[tuple[str, str | None]]:
    """Run every choice to its end: [(text, finish reason)] in `choices`' order. One failing
    choice cancels (and so aborts) the others and raises its HTTPError."""
    async def one(c: Choice):
        text, reason = "", None
        async for kind, val in events(request, worker, c.handle, c.stream):
            if kind == "text":
                text += val
            else:
                reason = val
        return text, reason
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(c)) for c in choices]
    return [t.result() for t in tasks]


async def merged(request, worker: Worker, choices: list[Choice]):
    """Every choice's events as they come: (choice, kind, value); an HTTPError as ("error", e)."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(c: Choice):
        gen = events(request, worker, c.handle, c.stream)
        try:
            async for kind, val in gen:
                queue.put_nowait((c, kind, val))
        except HTTPError as e:
            queue.put_nowait((c, "error", e))
        finally:
            await gen.aclose()              # aborts the engine request if it is still running
            queue.put_nowait((c, "end", None))

    tasks = [asyncio.create_task(pump(c)) for c in choices]
    try:
        left = len(tasks)
        while left:
            item = await queue.get()
            if item[1] == "end":
                left -= 1
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()


async def sse(request, worker: Worker, choices: list[Choice], cid: str, created: int, model: str,
              chat_mode: bool, include_usage: bool, logprobs: bool, continuous_usage: bool = False):
    """The choices' events as OpenAI's server-sent events. Completions send each choice's
    `echo` first, chat each choice's role; with `logprobs` a text chunk carries the records
    of the tokens pushed since its choice's last chunk; with `continuous_usage` every chunk
    carries its choice's usage so far (vLLM's continuous_usage_stats)."""
    def data(c: Choice, text_or_delta, finish=None, lp=None) -> str:
        build = P.chat_chunk if chat_mode else P.completion_chunk
        chunk = build(cid, model, created, text_or_delta, finish,
                      usage(choices, upto=c) if continuous_usage else None, c.index)
        if lp is not None:
            chunk["choices"][0]["logprobs"] = lp
        return f"data: {json.dumps(chunk)}\n\n"

    for c in choices:
        if chat_mode:
            yield data(c, {"role": "assistant", "content": ""})
        elif c.echo:
            yield data(c, c.echo)
    # the server may not close this generator when its client leaves (it can just drop it):
    # a task of its own hears the disconnect and aborts every choice at once
    watcher = asyncio.create_task(abort_on_disconnect(request, worker, [c.handle for c in choices]))
    source = merged(request, worker, choices)
    try:
        async for c, kind, val in source:
            if kind == "error":
                yield f"data: {json.dumps(P.error_body(val.message, val.type, val.param, val.status))}\n\n"
                break
            if kind == "text":
                yield data(c, {"content": val} if chat_mode else val, None,
                           logprobs_since(c, chat_mode) if logprobs else None)
            else:
                yield data(c, {} if chat_mode else "", val)
    finally:      # closed at once (a client that left aborts every choice now, not at collection)
        watcher.cancel()
        await source.aclose()
    if include_usage:
        chunk = (P.chat_chunk if chat_mode else P.completion_chunk)(cid, model, created, "", None, usage(choices))
        chunk["choices"] = []
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"
