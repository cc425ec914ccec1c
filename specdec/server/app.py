"""The FastAPI app: OpenAI-compatible routes over the engine thread (worker.py).

    app = create_app(models, ServerConfig(...))     # uvicorn.run(app, ...)

Routes: GET /health, GET /metrics, GET /v1/models, POST /v1/completions,
POST /v1/chat/completions. Errors are OpenAI error objects: 400 bad request, 401 bad API
key, 404 unknown model, 408 request timeout, 429 queue full, 503 shutting down.
"""
from __future__ import annotations

import asyncio
import hmac
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import EngineConfig, SamplingParams, SpecConfig
from ..build import Models
from ..engine.validation import check_params
from ..errors import ConfigError, PromptError
from . import protocol as P
from .metrics import ServerMetrics
from .choices import Choice, choice_seed, collect, logprobs_since, sse, usage
from .events import HTTPError, abort_on_disconnect
from ..models.chat_template import ChatTemplate
from .text import TextStream
from .handle import Handle, QueueFull, ShuttingDown
from .speculation import request_spec
from .worker import Worker


@dataclass
class ServerConfig:
    spec: SpecConfig = SpecConfig(method="none", k=0)   # default speculation per request
    max_batch: int = 8
    max_queue: int = 64
    max_model_len: int | None = None                     # default: the model's context length
    api_key: str | None = None
    request_timeout: float = 600.0
    model_name: str = "specdec"
    max_engines: int = 4
    allow_request_speculation: bool = True   # honour a request's `speculative` field
    # A context's worth of text is at most a few hundred KB (2,048 tokens of a few bytes each,
    # or their ids as JSON); 8 MiB leaves room for long chat histories and refuses bodies
    # whose parsing and tokenizing alone would hold the server for seconds.
    max_request_bytes: int = 8 * 2 ** 20
    chat_template: str | None = None          # Jinja source; overrides the checkpoint's


def _err(status: int, message: str, type_: str = "invalid_request_error", param=None) -> JSONResponse:
    return JSONResponse(P.error_body(message, type_, param, status), status_code=status)


def create_app(models: Models, cfg: ServerConfig = ServerConfig()) -> FastAPI:
    mml = min(cfg.max_model_len or models.target.config.max_position_embeddings,
              models.target.config.max_position_embeddings)
    metrics = ServerMetrics(model_name=cfg.model_name)
    worker = Worker(models, cfg.spec, EngineConfig(max_batch=cfg.max_batch, max_model_len=mml),
                    max_queue=cfg.max_queue, request_timeout=cfg.request_timeout, metrics=metrics,
                    max_engines=cfg.max_engines)
    chat = ChatTemplate(models.tokenizer, cfg.chat_template)

    @asynccontextmanager
    async def lifespan(app):
        await asyncio.get_running_loop().run_in_executor(None, worker.start)
        yield
        await asyncio.get_running_loop().run_in_executor(None, worker.stop, 30.0)

    app = FastAPI(title="specdec", lifespan=lifespan)
    app.state.worker, app.state.metrics, app.state.config = worker, metrics, cfg

    @app.exception_handler(HTTPError)
    async def _http_error(request, exc: HTTPError):
        return _err(exc.status, exc.message, exc.type, exc.param)

    @app.exception_handler(StarletteHTTPException)
    async def _routing_error(request, exc: StarletteHTTPException):   # unknown path, wrong method
        return _err(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}",
                    "not_found_error" if exc.status_code == 404 else "invalid_request_error")

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        if cfg.api_key and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {cfg.api_key}".encode()):
                return _err(401, "invalid or missing API key", "authentication_error")
        return await call_next(request)

    @app.get("/health")
    async def health():
        if not worker.alive:
            return _err(503, "the engine thread is not running", "service_unavailable")
        return {"status": "ok", "running": worker.num_running, "waiting": worker.num_waiting}

    @app.get("/metrics")
    async def prom():
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def model_card() -> dict:
        root = str(models.target_path) if models.target_path else cfg.model_name
        return {"id": cfg.model_name, "object": "model", "created": P.now(), "owned_by": "specdec",
                "root": root, "parent": None, "max_model_len": mml}

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str):
        if model_id != cfg.model_name:
            raise HTTPError(404, f"the model `{model_id}` does not exist", "not_found_error", "model")
        return model_card()

    @app.get("/version")
    async def version():
        return {"version": _version()}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        req = await parse(request, P.TokenizeRequest)
        ids = await asyncio.to_thread(models.tokenizer.encode, req.prompt, req.add_special_tokens)
        return {"tokens": ids, "count": len(ids), "max_model_len": mml}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        req = await parse(request, P.DetokenizeRequest)
        V = models.target.config.vocab_size
        if any(t < 0 or t >= V for t in req.tokens):
            raise HTTPError(400, f"token ids must be integers in [0, {V})", param="tokens")
        return {"prompt": models.tokenizer.decode(req.tokens)}

    async def read_body(request: Request) -> bytes:
        """The body, refused with a 413 as soon as it passes max_request_bytes."""
        limit = cfg.max_request_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise HTTPError(413, f"request body of {declared} bytes exceeds the server's {limit}")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise HTTPError(413, f"request body exceeds the server's {limit} bytes")
        return bytes(body)

    async def parse(request: Request, model_cls):
        raw = await read_body(request)
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HTTPError(400, f"request body is not valid JSON: {e}")
        bad = P.unencodable(obj)
        if bad is not None:
            raise HTTPError(400, f"{bad or 'body'}: text is not valid Unicode (a lone surrogate)",
                            param=bad or None)
        try:
            req = model_cls.model_validate(obj)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise HTTPError(400, f"{loc}: {first['msg']}" if loc else first["msg"], param=loc or None)
        if not isinstance(req, P._Sampling):
            return req
        if req.model is not None and req.model != cfg.model_name:
            raise HTTPError(404, f"the model `{req.model}` does not exist", "not_found_error", "model")
        name = P.unsupported_param(req)
        if name is not None:
            raise HTTPError(400, f"`{name}` is not supported by this server; leave it unset", param=name)
        return req

    def sampling(req, max_tokens: int | None, prompt_len: int) -> SamplingParams:
        try:
            params = SamplingParams(temperature=float(1.0 if req.temperature is None else req.temperature),
                                    logprobs=req.logprobs_asked(),
                                    top_p=float(1.0 if req.top_p is None else req.top_p),
                                    top_k=req.top_k or 0, seed=req.seed, ignore_eos=req.ignore_eos,
                                    coupling=req.sampling_coupling, **req.processing(),
                                    max_new_tokens=max_tokens if max_tokens is not None
                                    else max(1, mml - prompt_len))
            check_params(params, models.target.config.vocab_size)
            return params
        except (ConfigError, PromptError, ValueError) as e:
            first = str(e).split(" ")[0]       # the messages start with the field they are about
            raise HTTPError(400, str(e), param=first if first in type(req).model_fields else None)

    def submit(ids: list[int], params: SamplingParams, key) -> Handle:
        try:
            return worker.submit(ids, params, key, asyncio.get_running_loop())
        except PromptError as e:
            raise HTTPError(400, str(e), param="prompt")
        except QueueFull as e:
            raise HTTPError(429, str(e), "rate_limit_error")
        except ShuttingDown as e:
            raise HTTPError(503, str(e), "service_unavailable")

    async def run(request: Request, req, prompts: list[list[int]], max_tokens: int | None, chat_mode: bool):
        """Fan the request out into n choices per prompt (choices.py) and answer for all."""
        total = len(prompts) * req.n
        if total > cfg.max_queue:
            raise HTTPError(400, f"{len(prompts)} prompt(s) x n = {req.n} asks for {total} completions; "
                                 f"this server queues at most {cfg.max_queue}", param="n")
        params = [sampling(req, max_tokens, len(ids)) for ids in prompts]
        key, echo_on = request_spec(req, cfg, models), getattr(req, "echo", False)
        choices: list[Choice] = []
        try:
            for i, ids in enumerate(prompts):
                echo = models.tokenizer.decode(ids) if echo_on else ""
                for j in range(req.n):
                    h = submit(ids, replace(params[i], seed=choice_seed(req.seed, j)), key)
                    choices.append(Choice(i * req.n + j, j == 0, h, TextStream(models.tokenizer, req.stop_list()),
                                          echo))
        except HTTPError:
            for c in choices:
                worker.abort(c.handle)
            raise
        cid, created, logprobs = P.new_id("chatcmpl" if chat_mode else "cmpl"), P.now(), params[0].logprobs is not None
        if req.stream:
            opts = req.stream_options or P.StreamOptions()
            gen = sse(request, worker, choices, cid, created, cfg.model_name, chat_mode,
                      opts.include_usage, logprobs, opts.continuous_usage_stats)
            return StreamingResponse(gen, media_type="text/event-stream")
        # a non-streaming response writes nothing until the end, so nothing would notice a
        # client that left: a task waits for the disconnect message and aborts the requests
        watcher = asyncio.create_task(abort_on_disconnect(request, worker, [c.handle for c in choices]))
        try:
            results = await collect(request, worker, choices)
        except* HTTPError as group:
            raise group.exceptions[0]
        finally:
            watcher.cancel()
        out = []
        for c, (text, reason) in zip(choices, results):
            body = P.choice(c.index, chat_mode, c.echo + text, reason)
            if logprobs:     # the target's, read off the verify forwards
                body["logprobs"] = logprobs_since(c, chat_mode)
            if req.return_token_ids:
                body["token_ids"] = list(c.stream.ids)
            out.append(body)
        return P.response(cid, cfg.model_name, created, chat_mode, out, usage(choices))

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = await parse(request, P.CompletionRequest)
        prompt = req.prompt
        if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int):
            prompt = [prompt]                  # one prompt; else a batch (strings or id lists)
        if any(isinstance(p, str) and not p for p in prompt):
            raise HTTPError(400, "empty prompt", param="prompt")
        # tokenizing long prompts runs off the event loop, so other streams keep flowing
        ids = await asyncio.to_thread(lambda: [models.tokenizer.encode(p) if isinstance(p, str) else list(p)
                                               for p in prompt])
        return await run(request, req, ids, 16 if req.max_tokens is None else req.max_tokens, False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = await parse(request, P.ChatCompletionRequest)
        for i, m in enumerate(req.messages):
            if isinstance(m.content, list) and any(p.get("type") != "text" for p in m.content):
                raise HTTPError(400, "only text content parts are supported", param=f"messages.{i}.content")
        try:
            ids = await asyncio.to_thread(chat.encode, [{"role": m.role, "content": m.text()} for m in req.messages])
        except PromptError as e:
            raise HTTPError(400, str(e), param="messages")
        return await run(request, req, [ids], req.max_completion_tokens or req.max_tokens, True)

    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("specdec")
    except PackageNotFoundError:
        return "unknown"
