"""The response side of one engine request: its events as text, and its client's departure.

`events` turns a request's engine events into ("text", delta) / ("finish", reason) pairs and
aborts the request when its client leaves; `abort_on_disconnect` watches a non-streaming
request's connection. choices.py assembles one or several of them into a response.
"""
from __future__ import annotations

import asyncio
import time

from fastapi import Request

from ..errors import SpecdecError
from .text import TextStream
from .handle import Handle
from .worker import Worker


class HTTPError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


async def abort_on_disconnect(request: Request, worker: Worker, handles: list[Handle]) -> None:
    """Wait for the client's disconnect and abort `handles` then (their rows are freed at once)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            for h in handles:
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
