"""Serve local checkpoints on loopback for the duration of a `with` block (remote analysis
without --endpoint measures specdec's own server on this machine)."""
from __future__ import annotations

import contextlib
import socket
import threading
import time


@contextlib.contextmanager
def serving(args, host: str = "127.0.0.1", k=4, max_batch: int = 32):
    """Yield the base URL of a specdec server on --target/--draft (defaults: bundled models),
    whose default speculation is `k` (an int or a KTable) and which runs `max_batch` rows."""
    import uvicorn

    from ..config import SpecConfig
    from ..build import default_pair, load_models
    from ..errors import ConfigError
    from ..server.app import ServerConfig, create_app

    target, draft = default_pair(getattr(args, "target", None), getattr(args, "draft", None), getattr(args, "method", None))
    models = load_models(target, draft, device=getattr(args, "device", "cpu") or "cpu",
                         threads=getattr(args, "threads", None), compile=getattr(args, "compile", None),
                         weights=getattr(args, "dtype", None), draft_weights=getattr(args, "draft_dtype", None))
    method = getattr(args, "method", None) or ("draft" if models.draft is not None else "none")
    if method == "none":
        raise ConfigError("measuring speculation locally needs a draft model or --method")
    app = create_app(models, ServerConfig(spec=SpecConfig(method=method, k=k), max_batch=max_batch,
                                                 max_queue=1024))
    with socket.socket() as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.time() + 60
    while not server.started:
        if not thread.is_alive() or time.time() > end:
            raise RuntimeError("the local server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
