"""`envace serve`: a small OpenAI-compatible HTTP server (FastAPI + uvicorn) for a local HF model dir, so the
`OpenAIChatClient` path that talks to `vllm serve --tool-call-parser hermes` on a GPU machine runs here.

`GET /v1/models` and `POST /v1/chat/completions`: Hermes `<tool_call>` blocks become OpenAI `tool_calls`,
`<think>` text goes to `reasoning_content`, errors use OpenAI's `{"error": ...}` shape (400 bad request,
404 unknown model, 413 body over `max_request_bytes`, 500 generation failed, 503 cancelled). Requests are
bounded before they are templated or tokenised (depth, messages, tool-call size, shape, lone surrogates:
envace.engines.request_limits, with the field and prompt budgets of envace.input_budget; two bodies
decoded at a time): prompt + max_tokens must fit
`max_model_len`, max_tokens above `max_tokens_limit` is refused (never clamped), and a disconnected
client or SIGTERM cancels its generation. Control strings in request text stay text (envace.chat_tokens).
Departures from vLLM: no streaming, `response_format` is best effort (see chat_model.py), one request at
a time, unknown request fields ignored. Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envace.engines.chat_model import ChatRequestError, LocalChatModel, longest_token_chars
from envace.engines.request_limits import RequestLimitError, RequestLimits, check_body, check_raw, template_chars
from envace.input_budget import PROMPT_CHARS

__all__ = ["MAX_SEED", "background_server", "check_limits", "create_app", "longest_token_chars", "run_server",
           "serve"]

MAX_SEED = 2**63 - 1
DEFAULT_MAX_REQUEST_BYTES = 8_000_000
DISCONNECT_POLL_S = 0.05  # how often a waiting handler asks whether its client is still connected
GRACEFUL_SHUTDOWN_S = 10  # uvicorn's backstop after a signal; cancelled generations end well before


class GenerationCancelled(Exception):
    """Raised inside the model's forward pass when the request was cancelled (client gone, shutdown)."""


class _Cancellation:
    """Per-thread cancel events checked by a forward pre-hook on the served model (one per model, however
    many apps serve it). Generation runs synchronously in the request's worker thread, so the hook sees
    that request's event."""

    def __init__(self) -> None:
        self.local = threading.local()

    @classmethod
    def of(cls, chat: LocalChatModel) -> _Cancellation:
        existing = getattr(chat, "_envace_cancellation", None)
        if existing is not None:
            return existing
        made = cls()
        model = getattr(chat.engine, "model", None)
        if model is not None and hasattr(model, "register_forward_pre_hook"):
            model.register_forward_pre_hook(made.hook)
        chat._envace_cancellation = made  # type: ignore[attr-defined]
        return made

    def hook(self, _module: Any, _args: Any) -> None:
        event = getattr(self.local, "event", None)
        if event is not None and event.is_set():
            raise GenerationCancelled("generation cancelled")

    def run(self, event: threading.Event, fn: Any, *args: Any) -> Any:
        self.local.event = event
        try:
            return fn(*args)
        finally:
            self.local.event = None


class _InFlight:
    """One app's running generations, so a shutdown can cancel them all and refuse new ones."""

    def __init__(self) -> None:
        self.events: set[threading.Event] = set()
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def add(self, event: threading.Event) -> None:
        with self.lock:
            self.events.add(event)
            if self.stopping.is_set():
                event.set()

    def discard(self, event: threading.Event) -> None:
        with self.lock:
            self.events.discard(event)

    def stop(self) -> None:
        with self.lock:
            self.stopping.set()
            for event in self.events:
                event.set()


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": status}})


def _schema_of(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a response_format asks for ({} = any JSON object), or None."""
    if not fmt:
        return None
    kind = fmt.get("type")
    if kind == "json_schema":
        spec = fmt.get("json_schema") or {}
        return spec.get("schema") or {}
    if kind == "json_object":
        return {"type": "object"}
    if kind in (None, "text"):
        return None
    raise ChatRequestError(f"response_format type {kind!r} is not supported; use text, json_object or json_schema")


def check_limits(chat: LocalChatModel, req: ChatCompletionRequest, max_tokens_limit: int | None,
                 token_chars: int, text_chars: int = 0) -> None:
    """Refuse, before any tokenising, what cannot fit (raises ChatRequestError -> 400). `text_chars`: the
    characters the template copies into the prompt (envace.engines.request_limits.template_chars)."""
    asked = req.max_completion_tokens or req.max_tokens
    if max_tokens_limit is not None and asked is not None and asked > max_tokens_limit:
        raise ChatRequestError(f"max_tokens={asked} is more than this server allows ({max_tokens_limit}); "
                               f"ask for at most {max_tokens_limit} (envace serve --max-tokens-limit)")
    if req.seed is not None and req.seed + req.n - 1 > MAX_SEED:
        raise ChatRequestError(f"seed={req.seed} with n={req.n} needs seeds up to {req.seed + req.n - 1}; "
                               f"use a seed in [0, {MAX_SEED - req.n + 1}]")
    if text_chars > PROMPT_CHARS.value():
        raise ChatRequestError(str(PROMPT_CHARS.error("", "the request's text is", text_chars,
                                                      "shorten the messages")))
    if chat.max_model_len is not None:
        least = -(-text_chars // token_chars)  # ceil: tokens the message text needs at least
        if least >= chat.max_model_len:
            raise ChatRequestError(f"this model's maximum context length is {chat.max_model_len} tokens; the "
                                   f"messages hold at least {least} tokens of text; shorten them")


def chat_completion(chat: LocalChatModel, req: ChatCompletionRequest) -> dict[str, Any]:
    """The OpenAI response body for one request (raises ChatRequestError on bad input)."""
    if req.stream:
        raise ChatRequestError("stream=true is not supported by envace serve; send stream=false")
    if req.tool_choice not in (None, "auto", "none"):
        raise ChatRequestError(f"tool_choice {req.tool_choice!r} is not supported; use 'auto' or 'none'")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    choices, prompt_tokens = chat.generate(
        req.messages, tools=req.tools, temperature=req.temperature, top_p=req.top_p,
        max_tokens=req.max_completion_tokens or req.max_tokens, seed=req.seed, n=req.n, stop=stop,
        json_schema=_schema_of(req.response_format), parse_tools=req.tool_choice != "none",
        chat_template_kwargs=req.chat_template_kwargs)
    out_choices = []
    for i, c in enumerate(choices):
        message: dict[str, Any] = {"role": "assistant", "content": c.content or None}
        if c.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                for call in c.tool_calls]
        else:
            message["content"] = c.content
        if c.reasoning:
            message["reasoning_content"] = c.reasoning
        out_choices.append({"index": i, "message": message, "finish_reason": c.finish_reason, "logprobs": None})
    completion = sum(c.completion_tokens for c in choices)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": chat.name, "choices": out_choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion}}


def model_max_len(chat: LocalChatModel) -> int | None:
    """The served model's own context length (config.max_position_embeddings), when it declares one."""
    config = getattr(getattr(chat.engine, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is larger than `limit` bytes (read no further than that)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(model_dir: str | Path | None = None, *, chat: LocalChatModel | None = None,
               served_model_name: str | None = None, device: str | None = None,
               max_model_len: int | None = None, max_tokens_limit: int | None = None,
               max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, request_limits: RequestLimits | None = None,
               max_decoding: int = 2) -> FastAPI:
    """The FastAPI app serving `model_dir` (or an already-built `chat` model). `max_model_len` defaults to
    the model's max_position_embeddings and `max_tokens_limit` to max_model_len (see the module doc);
    `request_limits` bounds depth, messages and tool-call size; `max_decoding` requests are read and
    decoded at once (the others wait), so memory stays bounded however many large bodies arrive."""
    request_limits = request_limits or RequestLimits()
    decoding = asyncio.Semaphore(max_decoding)
    if chat is None:
        if model_dir is None:
            raise ValueError("create_app needs model_dir or chat")
        chat = LocalChatModel.from_dir(model_dir, name=served_model_name, device=device, max_model_len=max_model_len)
    elif served_model_name:
        chat.name = served_model_name
    if max_model_len is not None:
        chat.max_model_len = max_model_len
    elif chat.max_model_len is None:
        chat.max_model_len = model_max_len(chat)
    limit = max_tokens_limit if max_tokens_limit is not None else chat.max_model_len
    token_chars = longest_token_chars(chat.tokenizer)
    cancellation, inflight = _Cancellation.of(chat), _InFlight()
    app = FastAPI(title="envace serve", version="1")
    app.state.chat = chat
    app.state.inflight = inflight
    app.state.limits = {"max_model_len": chat.max_model_len, "max_tokens_limit": limit,
                        "max_request_bytes": max_request_bytes}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": chat.name, "object": "model", "created": 0, "owned_by": "envace"}]}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        async with decoding:  # at most `max_decoding` bodies held and decoded at once: bounded memory
            raw = await _read_body(request, max_request_bytes)
            if raw is None:
                return _error(413, f"request body is larger than this server's limit of {max_request_bytes} "
                                   f"bytes; send a shorter request (envace serve --max-request-bytes)")
            try:
                check_raw(raw, request_limits)
                body = json.loads(raw)
                del raw
                check_body(body, request_limits)
                text_chars = template_chars(body, request_limits)
            except (ValueError, RecursionError) as exc:  # RequestLimitError is a ValueError
                return _error(400, str(exc) if isinstance(exc, RequestLimitError) else "request body is not JSON")
        try:
            req = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return _error(400, f"invalid request: {fields}")
        if req.model and req.model != chat.name:
            return _error(404, f"The model `{req.model}` does not exist; this server serves `{chat.name}`",
                          "NotFoundError")
        if inflight.stopping.is_set():
            return _error(503, "the server is shutting down", "ServiceUnavailableError")
        try:
            check_limits(chat, req, limit, token_chars, text_chars)
            return JSONResponse(await _generate_unless_disconnected(request, chat, req, cancellation, inflight))
        except ChatRequestError as exc:
            return _error(400, str(exc))
        except GenerationCancelled:
            # the client is gone (nobody reads this) or the server is stopping
            return _error(503, "generation cancelled: the server is shutting down or the client disconnected",
                          "ServiceUnavailableError")
        except Exception as exc:  # a failing generation must answer, not drop the connection
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}", "InternalServerError")

    return app


async def _generate_unless_disconnected(request: Request, chat: LocalChatModel, req: ChatCompletionRequest,
                                        cancellation: _Cancellation, inflight: _InFlight) -> dict[str, Any]:
    """Run the generation in a worker thread (it is CPU/GPU-bound and serialised by the model's lock)
    while watching the connection; a disconnect (or a shutdown) sets the request's cancel event."""
    from starlette.concurrency import run_in_threadpool

    event = threading.Event()
    inflight.add(event)
    task = asyncio.ensure_future(run_in_threadpool(cancellation.run, event, chat_completion, chat, req))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                event.set()
                break
        return await task
    finally:
        event.set()  # the handler itself was cancelled (forced shutdown): stop the thread too
        inflight.discard(event)


class _Server:
    """uvicorn.Server whose signal handling first cancels in-flight generations, so a SIGTERM is obeyed at
    once instead of waiting for them (uvicorn would wait for the handlers until a second signal)."""

    @staticmethod
    def make(app: FastAPI, **config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                inflight = getattr(app.state, "inflight", None)
                if inflight is not None:
                    inflight.stop()
                super().handle_exit(sig, frame)

        return Server(uvicorn.Config(app, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, **config))


def run_server(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, *,
               served_model_name: str | None = None, device: str | None = None,
               max_model_len: int | None = None, max_tokens_limit: int | None = None,
               max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, log_level: str = "info") -> None:
    """Serve until interrupted (SIGINT / SIGTERM cancel in-flight generations and exit)."""
    app = create_app(model_dir, served_model_name=served_model_name, device=device, max_model_len=max_model_len,
                     max_tokens_limit=max_tokens_limit, max_request_bytes=max_request_bytes)
    _Server.make(app, host=host, port=port, log_level=log_level).run()


@contextmanager
def background_server(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                      startup_timeout: float = 60.0) -> Iterator[str]:
    """Run `app` with uvicorn in a daemon thread; yields its base URL (`http://host:port`) and stops it on
    exit. Port 0 picks a free port; the socket is bound here first, so there is no race for it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = _Server.make(app, log_level="warning", lifespan="off")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"envace-serve-{bound}")
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the server on {host}:{bound} did not start within {startup_timeout}s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.handle_exit(0, None)  # as on SIGTERM: cancel in-flight generations, then stop
        thread.join(timeout=30)
        sock.close()


def serve(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """The `envace serve MODEL_DIR [--host] [--port]` entry point."""
    run_server(model_dir, host=host, port=port, **options)
