"""`envace serve`: a small OpenAI-compatible HTTP server (FastAPI + uvicorn) for any local HF model dir
(the tiny model, or a real local Qwen3 / SmolLM2 dir), so the same `OpenAIChatClient` path that talks to
`vllm serve ... --enable-auto-tool-choice --tool-call-parser hermes` on a GPU machine is exercised here.

Endpoints: `GET /v1/models`, `POST /v1/chat/completions` (model, messages, tools, tool_choice auto|none,
temperature, top_p, max_tokens / max_completion_tokens, seed, stop, n, response_format,
chat_template_kwargs). Hermes `<tool_call>` blocks become OpenAI `tool_calls` with
`finish_reason: "tool_calls"`; `<think>` text goes to `reasoning_content` (as vLLM's reasoning parser
does); usage counts are returned. Errors use OpenAI's `{"error": {message, type, code}}` shape: 400 for a
bad request, 404 for an unknown model name (as vLLM), 500 when generation fails.

Departures from vLLM: no streaming (`stream: true` is refused with 400), no constrained decoding
(`response_format` json_schema / json_object is best effort, see chat_model.py), requests are served one
at a time, and unknown request fields are ignored. Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

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

from envace.engines.chat_model import ChatRequestError, LocalChatModel


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
    seed: int | None = None
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


def create_app(model_dir: str | Path | None = None, *, chat: LocalChatModel | None = None,
               served_model_name: str | None = None, device: str | None = None,
               max_model_len: int | None = None) -> FastAPI:
    """The FastAPI app serving `model_dir` (or an already-built `chat` model)."""
    if chat is None:
        if model_dir is None:
            raise ValueError("create_app needs model_dir or chat")
        chat = LocalChatModel.from_dir(model_dir, name=served_model_name, device=device, max_model_len=max_model_len)
    elif served_model_name:
        chat.name = served_model_name
    app = FastAPI(title="envace serve", version="1")
    app.state.chat = chat

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": chat.name, "object": "model", "created": 0, "owned_by": "envace"}]}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        try:
            req = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return _error(400, f"invalid request: {fields}")
        if req.model and req.model != chat.name:
            return _error(404, f"The model `{req.model}` does not exist; this server serves `{chat.name}`",
                          "NotFoundError")
        try:
            # Generation is CPU/GPU-bound and serialised by the model's lock; run it off the event loop.
            from starlette.concurrency import run_in_threadpool

            return JSONResponse(await run_in_threadpool(chat_completion, chat, req))
        except ChatRequestError as exc:
            return _error(400, str(exc))
        except Exception as exc:  # a failing generation must answer, not drop the connection
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}", "InternalServerError")

    return app


def run_server(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, *,
               served_model_name: str | None = None, device: str | None = None,
               max_model_len: int | None = None, log_level: str = "info") -> None:
    """Serve until interrupted."""
    import uvicorn

    app = create_app(model_dir, served_model_name=served_model_name, device=device, max_model_len=max_model_len)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


@contextmanager
def background_server(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                      startup_timeout: float = 60.0) -> Iterator[str]:
    """Run `app` with uvicorn in a daemon thread; yields its base URL (`http://host:port`) and stops it on
    exit. Port 0 picks a free port; the socket is bound here first, so there is no race for it."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
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
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def serve(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """The `envace serve MODEL_DIR [--host] [--port]` entry point."""
    run_server(model_dir, host=host, port=port, **options)
