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
    """Wait until the engine thread has no request in flight."""
    w = app.state.worker
    end = time.time() + timeout
    while (w.num_running or w.num_waiting) and time.time() < end:
        time.sleep(0.02)
