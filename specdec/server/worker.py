"""The engine thread: one background thread owns every Engine and steps them.

Per-request speculation: one Engine per distinct (method, k), created lazily, all sharing
the loaded target (and draft) weights; each has its own KV cache and continuous batch. The
thread steps every engine with work once per loop, so requests join and leave their batch
between steps. At most `max_batch` requests run at once over all engines; the rest wait in
one FIFO queue of at most `max_queue` (beyond that `submit` raises QueueFull -> HTTP 429).
An engine a request asks for is built in a thread of its own (its calibration may take
seconds), so requests for the engines that exist keep running; idle engines beyond
`max_engines` are dropped to bound memory, never the default one.

The asyncio side talks to the thread only through queues: `submit`/`abort` put commands on
a thread-safe inbox; the thread answers on each request's asyncio.Queue via
`loop.call_soon_threadsafe`, with events ("tokens", ids), ("done", reason) or ("error", exc).
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque

from ..config import EngineConfig, SamplingParams, SpecConfig
from ..build import Models, make_engine
from ..engine.engine import Engine
from ..engine.validation import check_request
from .handle import Handle, QueueFull, ShuttingDown, SpecKey
from .metrics import ServerMetrics

class Worker:
    def __init__(self, models: Models, default_spec: SpecConfig, config: EngineConfig,
                 max_queue: int = 64, request_timeout: float = 600.0, metrics: ServerMetrics | None = None,
                 max_engines: int = 4):
        self.models, self.default_spec, self.config = models, default_spec, config
        self.max_queue, self.request_timeout, self.max_engines = max_queue, request_timeout, max_engines
        self.max_model_len = min(config.max_model_len, models.target.config.max_position_embeddings)
        self.metrics = metrics or ServerMetrics()
        self.metrics.bind_gauges(lambda: self.num_running, lambda: self.num_waiting, self.kv_cache_usage)
        self.engines: dict[SpecKey, Engine] = {}
        self._snaps: dict[SpecKey, dict] = {}
        self._active: dict[SpecKey, dict[int, Handle]] = {}   # key -> seq id -> handle
        self._pending: deque[Handle] = deque()
        self._inbox: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._queued = 0                   # submitted, not yet in an engine (guarded by _lock)
        self._running = 0
        self._closing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specdec-engine", daemon=True)
        self._default: SpecKey | None = None      # never evicted
        self._building: set[SpecKey] = set()       # engines being made off the engine thread

    # ---- asyncio side ----------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return self._running

    @property
    def num_waiting(self) -> int:
        return self._queued

    def kv_cache_usage(self) -> float:
        """Fraction of the engines' target KV cache (rows x positions) holding tokens; read
        from another thread, so it copies the engine list (a scrape is a snapshot)."""
        caches = [e.cache for e in list(self.engines.values())]
        size = sum(c.num_rows * c.max_len for c in caches)
        return sum(sum(c.lengths) for c in caches) / size if size else 0.0

    def start(self) -> None:
        """Build the default speculative config's engine (an adaptive policy may measure its
        cost model here, before any request waits on it), then start the engine thread."""
        spec = self.default_spec
        self._default = ("none", 0, 0) if spec.method == "none" or spec.k == 0 else (spec.method, spec.k, spec.tree)
        self._install(self._default, self._make(self._default))
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: SamplingParams, key: SpecKey,
               loop: asyncio.AbstractEventLoop) -> Handle:
        check_request(prompt_ids, params.max_new_tokens, self.models.target.config.vocab_size,
                      self.max_model_len, budget_name="max_tokens")
        with self._lock:
            if self._closing:
                raise ShuttingDown("the server is shutting down")
            if self._queued >= self.max_queue:
                raise QueueFull(f"the request queue is full ({self.max_queue} waiting); retry later")
            self._queued += 1
        h = Handle(prompt_ids, params, key, time.perf_counter() + self.request_timeout, loop)
        self._inbox.put(("add", h, None))
        return h

    def abort(self, h: Handle, reason: str = "abort") -> None:
        """Stop `h` (client gone: "abort"; stop string reached: "stop"); frees its rows."""
        self._inbox.put(("abort", h, reason))

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new requests, let running ones finish for up to `timeout` s, abort the rest."""
        with self._lock:
            self._closing = True
        end = time.monotonic() + timeout
        while self._thread.is_alive() and (self._queued or self._running) and time.monotonic() < end:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(timeout=10)

    def leaks(self) -> list[str]:
        """Describe leaked state (running rows, non-empty caches); [] when idle and clean.
        Call only while no request is in flight."""
        out = []
        for key, eng in list(self.engines.items()):
            if eng.running or eng.waiting:
                out.append(f"{key}: {len(eng.running)} running, {len(eng.waiting)} waiting")
            if any(eng.cache.lengths):
                out.append(f"{key}: target cache lengths {eng.cache.lengths}")
            pc = getattr(eng.proposer, "cache", None)
            if pc is not None and any(pc.lengths):
                out.append(f"{key}: proposer cache lengths {pc.lengths}")
            if self._active.get(key):
                out.append(f"{key}: {len(self._active[key])} handles still tracked")
        if self._pending:
            out.append(f"{len(self._pending)} pending")
        return out

    # ---- engine thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            busy = any(e.has_unfinished() for e in self.engines.values())
            stuck = all(h.key in self._building for h in self._pending)   # only builds to wait for
            self._drain_inbox(block=not busy and stuck)
            self._admit()
            self._expire()
            for key, eng in list(self.engines.items()):
                if eng.has_unfinished():
                    self._step(key, eng)
        for key in list(self._active):
            for h in list(self._active[key].values()):
                self._finish(key, h, "abort", abort=True)
        for h in list(self._pending):
            self._drop_pending(h, "abort")

    def _drain_inbox(self, block: bool) -> None:
        try:
            cmd = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, h, reason = cmd
            if kind == "built":              # h is the key, reason the engine or its error
                self._building.discard(h)
                if isinstance(reason, Exception):
                    for p in [p for p in self._pending if p.key == h]:
                        self._drop_pending(p, None, error=reason)
                else:
                    self._install(h, reason)
            elif kind == "add":
                self._pending.append(h)
            elif kind == "abort" and not h.done:
                if h.seq is None:
                    self._drop_pending(h, reason)
                else:
                    self._finish(h.key, h, reason, abort=True)
            try:
                cmd = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _engine(self, key: SpecKey) -> Engine | None:
        """The engine for `key`; None while it is being built (in a thread of its own, so
        that building and calibrating it stalls no other request) or while every slot is
        busy. Idle engines other than the default are evicted to make room."""
        if key in self.engines:
            return self.engines[key]
        if key in self._building:
            return None
        if len(self.engines) + len(self._building) >= self.max_engines:
            idle = [k for k, e in self.engines.items()
                    if k != self._default and not e.has_unfinished() and not self._active.get(k)]
            if not idle:
                return None
            del self.engines[idle[0]], self._snaps[idle[0]]
            self._active.pop(idle[0], None)
        self._building.add(key)
        threading.Thread(target=self._build, args=(key,), name=f"specdec-build-{key[0]}", daemon=True).start()
        return None

    def _make(self, key: SpecKey) -> Engine:
        method, k, tree = key
        spec = SpecConfig(method=method, k=k, k_max=self.default_spec.k_max, options=self.default_spec.options,
                          tree=tree)
        return make_engine(self.models, spec, self.config)

    def _build(self, key: SpecKey) -> None:
        """Off the engine thread: make the engine, then hand it (or the error) to the loop."""
        try:
            self._inbox.put(("built", key, self._make(key)))
        except Exception as e:  # a bad config: the requests that asked for it fail
            self._inbox.put(("built", key, e))

    def _install(self, key: SpecKey, eng: Engine) -> None:
        self.engines[key] = eng
        self._snaps[key], self._active[key] = {}, {}

    def _admit(self) -> None:
        for h in list(self._pending):
            if self._running >= self.config.max_batch:
                return
            try:
                eng = self._engine(h.key)
                if eng is None:
                    continue
                h.seq = eng.add_request(h.prompt_ids, h.params)
            except Exception as e:  # a bad speculative config or prompt: that request fails
                self._drop_pending(h, None, error=e)
                continue
            self._pending.remove(h)
            self._active[h.key][h.seq.id] = h
            with self._lock:
                self._queued -= 1
                self._running += 1
            self.metrics.prompt_tokens.inc(len(h.prompt_ids))

    def _drop_pending(self, h: Handle, reason: str | None, error: Exception | None = None) -> None:
        """End a request that never got a row (aborted, timed out or refused while queued);
        it is counted like any finished request."""
        if h in self._pending:
            self._pending.remove(h)
            with self._lock:
                self._queued -= 1
        h.done = True
        self.metrics.e2e.observe(time.perf_counter() - h.t_submit)
        self.metrics.request_success.labels(finished_reason=reason or "error").inc()
        h.post("error", error) if error is not None else h.post("done", reason)

    def _expire(self) -> None:
        now = time.perf_counter()
        for h in [h for h in self._pending if h.deadline < now]:
            self._drop_pending(h, "timeout")
        for key, table in list(self._active.items()):
            for h in [h for h in table.values() if h.deadline < now]:
                self._finish(key, h, "timeout", abort=True)

    def _step(self, key: SpecKey, eng: Engine) -> None:
        try:
            eng.step()
        except Exception as e:  # an engine bug must not hang clients: fail its requests, rebuild
            for h in list(self._active[key].values()):
                self._finish(key, h, None, error=e)
            del self.engines[key], self._snaps[key]
            self._active.pop(key, None)
            return
        self._snaps[key] = self.metrics.add_engine_delta(eng.metrics, self._snaps[key])
        now = time.perf_counter()
        for h in list(self._active[key].values()):
            new = h.seq.output_ids[h.sent:]
            if new:
                if h.t_last is None:
                    self.metrics.ttft.observe(now - h.t_submit)
                else:
                    for _ in new:
                        self.metrics.itl.observe((now - h.t_last) / len(new))
                h.t_last, h.sent = now, h.sent + len(new)
                h.post("tokens", new)
            if h.seq.finished:
                self._finish(key, h, h.seq.finish_reason)
        eng.collect_finished()

    def _finish(self, key: SpecKey, h: Handle, reason: str | None, abort: bool = False,
                error: Exception | None = None) -> None:
        """Retire a running request: free its rows (abort) and tell the asyncio side."""
        eng = self.engines.get(key)
        if abort and eng is not None:
            eng.abort(h.seq.id)
            eng.collect_finished()
        self._active.get(key, {}).pop(h.seq.id, None)
        with self._lock:
            self._running -= 1
        h.done = True
        self.metrics.e2e.observe(time.perf_counter() - h.t_submit)
        self.metrics.request_success.labels(finished_reason=reason or "error").inc()
        h.post("error", error) if error is not None else h.post("done", reason)
