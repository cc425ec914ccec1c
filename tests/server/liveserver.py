"""Helpers: a live specdec server on loopback (uvicorn in a thread, random free port)."""
from __future__ import annotations

import contextlib
import socket
import threading
import time

import uvicorn

from specdec.server.app import ServerConfig, create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(models, **cfg):
    """Yield (base_url, app); the server stops (gracefully) on exit."""
    app = create_app(models, ServerConfig(**cfg))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=5))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    end = time.time() + 30
    while not server.started:
        if time.time() > end or not t.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        t.join(timeout=30)


def wait_idle(app, timeout: float = 10.0) -> None:
    """Wait until the engine thread has no request in flight; fail loudly if it never is."""
    w = app.state.worker
    end = time.time() + timeout
    while w.num_running or w.num_waiting:
        if time.time() > end:
            raise AssertionError(f"the server was still busy after {timeout:g} s "
                                 f"({w.num_running} running, {w.num_waiting} waiting)")
        time.sleep(0.02)


def prompts(n: int, seed: int = 0, vocab: int = 8192, lo: int = 3, hi: int = 30) -> list[list[int]]:
    """Deterministic random token prompts (ids >= 2: no BOS/EOS inside)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(2, vocab, (L,), generator=g).tolist() for L in lens]


def offline_greedy(models, prompt_ids: list[list[int]], max_new: int) -> list[list[int]]:
    """What Engine.generate gives offline (plain greedy decoding, batched)."""
    from specdec.config import EngineConfig, SamplingParams, SpecConfig
    from specdec.engine.engine import Engine
    eng = Engine(models.target, SpecConfig(method="none", k=0), EngineConfig(max_batch=8, max_model_len=512))
    seqs = eng.generate(prompt_ids, SamplingParams(max_new_tokens=max_new, ignore_eos=True))
    return [s.output_ids for s in seqs]
