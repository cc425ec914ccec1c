"""`specdec serve`: an OpenAI-compatible HTTP server (see docs/serving.md).

The server-wide --method/--k set the default speculation; each request may override it
with the `speculative` extension. SIGTERM/SIGINT drain in-flight requests (up to
--shutdown-timeout seconds) before exiting; during start-up (loading, building the default
engine, measuring what it needs) they end the process at once, with status 0.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from ..defaults import default_draft, default_parallel_draft, default_target
from ..errors import ConfigError
from .common import add_load_args, load_kwargs, add_method_args, read_template, spec_from_args


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve an OpenAI-compatible API with speculative decoding")
    p.add_argument("--target", type=Path, help="target checkpoint dir (default: bundled target)")
    p.add_argument("--draft", type=Path, help="draft checkpoint dir (default: bundled draft when "
                                              "--target is not given; otherwise none)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1/* routes")
    p.add_argument("--max-batch", type=int, default=8, help="requests running at once")
    p.add_argument("--max-queue", type=int, default=64, help="requests waiting; beyond this: 429")
    p.add_argument("--max-model-len", type=int, help="prompt + output cap (default: model context)")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--max-request-bytes", type=int, default=8 * 2 ** 20,
                   help="largest request body; beyond it: 413 (default 8 MiB)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds to let in-flight requests finish on SIGTERM")
    p.add_argument("--served-model-name", default=None, help="model id in the API (default: target dir name)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--log-level", default="info")
    p.add_argument("--chat-template", type=Path, metavar="FILE",
                   help="a Jinja chat template for /v1/chat/completions, overriding the checkpoint's own")
    p.add_argument("--allow-request-speculation", action=argparse.BooleanOptionalAction, default=True,
                   help="honour a request's `speculative` field (default: yes; each new (method, k) "
                        "builds an engine of its own)")
    add_load_args(p)
    add_method_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.method and args.method != "draft" and args.draft is not None:
        raise ConfigError("--draft and --method NAME (other than draft) are mutually exclusive")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be in 1..65535, got {args.port}")
    for name in ("max_batch", "max_queue"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    template = read_template(args.chat_template)
    target = args.target or default_target()
    draft = args.draft if args.draft or args.target else (
        default_parallel_draft() if args.method == "parallel" else default_draft())
    if args.method not in (None, "draft", "parallel") and args.draft is None:
        draft = None
    load = load_kwargs(args)
    if load["head"] is None and args.method not in ("eagle", "mtp"):
        from ..build import find_head
        load["head"] = find_head(Path(target))   # the target's shipped head: requests may ask for eagle
    with _stop_at_once():                  # until the server is ready (then uvicorn's handlers)
        _serve(args, target, draft, load, template)
    return 0


def _serve(args, target, draft, load: dict, template: str | None) -> None:
    """Load, build the app and serve until a signal (run's arguments, checked)."""
    import uvicorn

    from ..build import load_models, require_cache_memory
    from ..config import EngineConfig
    from ..server.app import ServerConfig, create_app

    models = load_models(target, draft, **load)
    spec = spec_from_args(args, has_draft=models.draft is not None)
    context = args.max_model_len or models.target.config.max_position_embeddings
    require_cache_memory(models, spec, EngineConfig(max_batch=args.max_batch, max_model_len=context))
    cfg = ServerConfig(spec=spec, max_batch=args.max_batch, max_queue=args.max_queue,
                       max_model_len=args.max_model_len, api_key=args.api_key,
                       request_timeout=args.request_timeout, max_request_bytes=args.max_request_bytes,
                       model_name=args.served_model_name or Path(target).resolve().name,
                       allow_request_speculation=args.allow_request_speculation, chat_template=template)
    app = create_app(models, cfg)
    # SIGTERM/SIGINT: stop accepting, let open requests finish (bounded by
    # timeout_graceful_shutdown), run the lifespan shutdown (stops the engine thread), exit 0.
    server = _graceful_server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                    timeout_graceful_shutdown=args.shutdown_timeout))
    server.run()


@contextlib.contextmanager
def _stop_at_once():
    """SIGTERM and SIGINT end the process at once (`_exit_now`) inside, where the main thread
    can install handlers; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _exit_now) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _exit_now(signum, frame=None) -> None:
    """A stop signal during start-up: nothing is in flight, so the process ends now, without
    waiting for a thread that builds (and may be measuring for) the default engine. Nothing is
    left half-written: cache files are replaced whole."""
    print(f"specdec: stopped during start-up ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
    os._exit(0)


def _graceful_server(config):
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, minus re-raising the signal after a graceful shutdown (which
        would make a clean SIGTERM exit look like a kill), and stopping at once on a signal
        before it has started (the lifespan builds the default engine: `_exit_now`)."""

        def handle_exit(self, sig, frame):
            if not self.started:
                _exit_now(sig, frame)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in old.items():
                    signal.signal(s, handler)
    return Server(config)
