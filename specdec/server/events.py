"""The response side of a request: the engine's events as text, SSE chunks and usage.

`events` turns a request's engine events into ("text", delta) / ("finish", reason) pairs and
aborts the request when its client leaves; `sse` frames them as OpenAI's server-sent events;
`abort_on_disconnect` watches a non-streaming request's connection.
"""
from __future__ import annotations

import asyncio
import json
import time

from fastapi import Request

from ..errors import SpecdecError
from . import protocol as P
from .text import TextStream
from .handle import Handle
from .worker import Worker


class HTTPError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


async def abort_on_disconnect(request: Request, worker: Worker, h: Handle) -> None:
    """Wait for the client's disconnect and abort `h` then (its rows are freed at once)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            worker.abort(h, "abort")
            return


async def events(request: Request, worker: Worker, h: Handle, stream: TextStream):
    """Yield ("text", delta) then ("finish", reason); abort on disconnect or stop string.
    Raises HTTPError for a failed or timed-out request."""
    finished, reason = False, "abort"
    give_up = time.monotonic() + worker.request_timeout + 10     # if the engine thread died
    try:
        while True:
            try:
                kind, val = await asyncio.wait_for(h.events.get(), timeout=0.5)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return
                if time.monotonic() > give_up or not worker.alive:
                    raise HTTPError(500, "the engine thread stopped answering", "server_error")
                continue
            if kind == "error":
                finished = True
                status = 400 if isinstance(val, SpecdecError) else 500
                raise HTTPError(status, str(val), "invalid_request_error" if status == 400 else "server_error")
            if kind == "tokens":
                delta = stream.push(val)
                if delta:
                    yield "text", delta
                if stream.stopped:
                    reason = "stop"
                    yield "finish", "stop"
                    return
                continue
            finished = True
            if val == "timeout":
                raise HTTPError(408, f"the request timed out after {worker.request_timeout:g} s",
                                "timeout_error")
            tail = stream.flush()
            if tail:
                yield "text", tail
            yield "finish", "stop" if val == "abort" else val
            return
    finally:
        if not finished:
            worker.abort(h, reason)   # frees the request's cache rows at once (no-op if done)


def usage(h: Handle, stream: TextStream) -> P.Usage:
    st = h.seq.stats if h.seq is not None else None
    n = len(stream.ids)
    drafts = st.drafts if st else 0
    return P.Usage(prompt_tokens=len(h.prompt_ids), completion_tokens=n, total_tokens=len(h.prompt_ids) + n,
                   accepted_tokens=st.accepted_tokens if st else 0, draft_tokens=st.draft_tokens if st else 0,
                   mean_acceptance_length=1 + st.accepted_tokens / drafts if drafts else 1.0)


async def sse(request, worker, h, stream, cid, created, model, chat_mode: bool, include_usage: bool,
              echo: str = "", logprobs: bool = False):
    """The request's events as server-sent events; `echo` (completions) is sent first. With
    `logprobs`, each text chunk carries the records of the tokens pushed since the last."""
    def data(obj) -> str:
        return f"data: {json.dumps(obj)}\n\n"

    sent, offset = 0, len(echo)

    def with_logprobs(chunk: dict) -> dict:
        nonlocal sent, offset
        if logprobs and len(stream.ids) > sent:
            ids = stream.ids[sent:]
            body = P.logprobs_body(stream.tok, ids, h.seq.logprobs[sent:len(stream.ids)], chat_mode, offset)
            chunk["choices"][0]["logprobs"] = body
            offset += sum(len(stream.tok.decode([i])) for i in ids)
            sent = len(stream.ids)
        return chunk

    if chat_mode:
        yield data(P.chat_chunk(cid, model, created, {"role": "assistant", "content": ""}, None))
    elif echo:
        yield data(P.completion_chunk(cid, model, created, echo, None))
    try:
        async for kind, val in events(request, worker, h, stream):
            if kind == "text":
                yield data(with_logprobs(P.chat_chunk(cid, model, created, {"content": val}, None) if chat_mode
                                         else P.completion_chunk(cid, model, created, val, None)))
            else:
                yield data(P.chat_chunk(cid, model, created, {}, val) if chat_mode
                           else P.completion_chunk(cid, model, created, "", val))
    except HTTPError as e:
        yield data(P.error_body(e.message, e.type, e.param, e.status))
    if include_usage:
        chunk = (P.chat_chunk if chat_mode else P.completion_chunk)(cid, model, created, "", None, usage(h, stream))
        chunk["choices"] = []
        yield data(chunk)
    yield "data: [DONE]\n\n"
