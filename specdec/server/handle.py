"""A request as the asyncio side and the engine thread both see it, and the worker's refusals."""
from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field

from ..config import SamplingParams

SpecKey = tuple[str, object, int]   # method, k, tree node budget (0: a chain)


class QueueFull(Exception):
    """The waiting queue is full (HTTP 429)."""


class ShuttingDown(Exception):
    """The server is draining (HTTP 503)."""


@dataclass
class Handle:
    """One request as the two sides see it. Fields after `events` belong to the engine thread."""
    prompt_ids: list[int]
    params: SamplingParams
    key: SpecKey
    deadline: float
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    id: int = field(default_factory=itertools.count().__next__)
    t_submit: float = field(default_factory=time.perf_counter)
    seq: object = None                 # engine.sequence.Sequence once admitted
    sent: int = 0                      # output tokens already delivered
    t_last: float | None = None
    done: bool = False

    def post(self, kind: str, value=None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:           # the event loop is closed: nobody is listening
            pass
