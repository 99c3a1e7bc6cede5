"""A client for any OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, `envace serve`, a hosted API),
used for the policy under evaluation, the user simulator and the judge.

Tool calls come from the response's `tool_calls` when the server parsed them, else from Hermes
`<tool_call>` blocks in the text (`envace.toolcall.parse_tool_calls`); no tool-name whitelist (an unknown
tool is the benchmark's to score). Malformed output becomes `ChatResult.parse_error`, never an exception;
transport errors (connection, timeout, 429, 5xx) are retried with backoff, 4xx are not, and the final
`ChatClientError` names the URL, status and message. `complete(...) -> str` serves the checklist judge;
`OpenAIPolicy` adapts the client to `envace.engines.reply.BenchPolicy`.
Departure from the OpenAI SDK: no streaming, and `temperature` defaults to 0 (the API's default is 1).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from envace.engines.reply import AssistantReply
from envace.secrets import api_key_from_env, mask_text
from envace.toolcall import parse_tool_calls, strip_think
from envace.types import ErrorCode, ToolCall

RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
MAX_RETRY_AFTER_S = 30.0


class ChatClientError(RuntimeError):
    """The endpoint could not be reached or refused the request; names the URL, status and message."""

    def __init__(self, message: str, url: str, status: int | None = None, body: str = "") -> None:
        super().__init__(mask_text(message))  # a token in the URL is never printed
        self.url, self.status, self.body = mask_text(url), status, body


@dataclass
class ChatChoice:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    parse_error: ErrorCode | None = None
    detail: str = ""
    reasoning: str = ""


@dataclass
class ChatResult:
    """The first choice's fields at the top level; all `n` choices in `choices`."""

    text: str
    tool_calls: list[ToolCall]
    finish_reason: str
    usage: dict[str, int]
    raw: dict[str, Any]
    parse_error: ErrorCode | None = None
    detail: str = ""
    reasoning: str = ""
    choices: list[ChatChoice] = field(default_factory=list)


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_choice(choice: Mapping[str, Any]) -> ChatChoice:
    """Turn one response choice into text + ToolCalls. Never raises on model-produced content."""
    msg = choice.get("message") or {}
    text = msg.get("content") or ""
    if not isinstance(text, str):  # content parts: keep the text parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    finish = choice.get("finish_reason") or "stop"
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    raw_calls = msg.get("tool_calls") or []
    if raw_calls:
        calls: list[ToolCall] = []
        for i, raw in enumerate(raw_calls):
            fn = (raw or {}).get("function") or {}
            name, args = fn.get("name"), fn.get("arguments", {})
            if not isinstance(name, str) or not name:
                return ChatChoice(text, [], finish, ErrorCode.MISSING_NAME, f"tool call {i} has no name", reasoning)
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except (json.JSONDecodeError, RecursionError, ValueError) as exc:
                    return ChatChoice(text, [], finish, ErrorCode.JSON_DECODE,
                                      f"arguments of {name!r} are not JSON: {exc}", reasoning)
            if not isinstance(args, dict):
                return ChatChoice(text, [], finish, ErrorCode.MISSING_ARGUMENTS,
                                  f"arguments of {name!r} must be an object", reasoning)
            calls.append(ToolCall(name=name, arguments=args, id=raw.get("id") or _call_id()))
        return ChatChoice(text, calls, finish, None, "", reasoning)
    parsed = parse_tool_calls(text)
    if parsed.error is ErrorCode.NO_TOOL_CALL:
        return ChatChoice(text, [], finish, None, "", reasoning)
    if parsed.error is not None:
        return ChatChoice(text, [], finish, parsed.error, parsed.detail, reasoning)
    for c in parsed.calls:
        c.id = _call_id()
    return ChatChoice(parsed.content, parsed.calls, "tool_calls", None, "", reasoning)


class OpenAIChatClient:
    """Synchronous chat-completions client (thread-safe: one pooled httpx.Client)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60,
                 max_retries: int = 4, backoff: float = 0.5, transport: httpx.BaseTransport | None = None,
                 *, api_key_env: str | None = None) -> None:
        """`api_key_env` names the environment variable holding the key (configs name the variable, never
        the key itself; an unset variable is an error naming it)."""
        if api_key is None and api_key_env:
            api_key = api_key_from_env(api_key_env, mask_text(base_url))
        if max_retries < 0:
            raise ValueError(f"max_retries {max_retries} must be >= 0")
        if timeout <= 0:
            raise ValueError(f"timeout {timeout} must be > 0 seconds")
        base = base_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.model = model
        self.max_retries, self.backoff = max_retries, backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    # -- plumbing ---------------------------------------------------------------------------------
    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.base_url + path
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                resp = self._http.request(method, url, json=payload)
            except httpx.TimeoutException as exc:
                last, status = f"timed out after {self._http.timeout.read}s ({type(exc).__name__})", None
            except httpx.TransportError as exc:
                last, status = f"connection failed ({type(exc).__name__}: {exc})", None
            else:
                status = resp.status_code
                if status < 400:
                    try:
                        return resp.json()
                    except ValueError as exc:
                        raise ChatClientError(f"{url} answered {status} with a body that is not JSON: "
                                              f"{resp.text[:300]!r}", url, status, resp.text) from exc
                last = f"HTTP {status}: {_error_message(resp)}"
                if status not in RETRY_STATUSES:
                    raise ChatClientError(f"{method} {url} failed with {last}", url, status, resp.text)
                retry_after = _retry_after(resp)
            if attempt < self.max_retries:
                time.sleep(retry_after if retry_after is not None else self.backoff * (2 ** attempt))
        raise ChatClientError(f"{method} {url} failed after {self.max_retries + 1} attempts; last error: {last}",
                              url, status)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIChatClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- API --------------------------------------------------------------------------------------
    def models(self) -> list[str]:
        return [m["id"] for m in self._request("GET", "/models").get("data", [])]

    def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
             json_schema: dict[str, Any] | None = None, temperature: float = 0.0, top_p: float = 1.0,
             max_tokens: int | None = None, seed: int | None = None, n: int = 1,
             stop: list[str] | None = None, extra_body: Mapping[str, Any] | None = None) -> ChatResult:
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature,
                                   "top_p": top_p, "n": n}
        if tools:
            payload["tools"] = tools
        if json_schema is not None:
            payload["response_format"] = {"type": "json_schema", "json_schema": {
                "name": str(json_schema.get("title", "response")), "schema": json_schema, "strict": True}}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if seed is not None:
            payload["seed"] = seed
        if stop:
            payload["stop"] = stop
        payload.update(extra_body or {})
        data = self._request("POST", "/chat/completions", payload)
        choices = [parse_choice(c) for c in data.get("choices") or []]
        if not choices:
            raise ChatClientError(f"{self.base_url}/chat/completions answered without choices: "
                                  f"{json.dumps(data)[:300]}", self.base_url + "/chat/completions", 200)
        first = choices[0]
        return ChatResult(text=first.text, tool_calls=first.tool_calls, finish_reason=first.finish_reason,
                          usage=dict(data.get("usage") or {}), raw=data, parse_error=first.parse_error,
                          detail=first.detail, reasoning=first.reasoning, choices=choices)

    def complete(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        """The reply text only (reasoning stripped): the judge's `ChatBackend` shape."""
        return strip_think(self.chat(messages, json_schema=json_schema, temperature=temperature).text).strip()


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:300]
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", err))
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:300]
    return json.dumps(body)[:300]


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None


class OpenAIPolicy:
    """`BenchPolicy` over an `OpenAIChatClient`: fixed sampling settings, one reply per call."""

    def __init__(self, client: OpenAIChatClient, temperature: float = 0.0, top_p: float = 1.0,
                 max_tokens: int | None = None, name: str | None = None,
                 extra_body: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.extra_body = dict(extra_body or {})
        self.name = name or f"{client.model} @ {mask_text(client.base_url)}"

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        r = self.client.chat(messages, tools=tools or None, temperature=self.temperature, top_p=self.top_p,
                             max_tokens=self.max_tokens, seed=seed, extra_body=self.extra_body)
        return AssistantReply(content=r.text, tool_calls=r.tool_calls, finish_reason=r.finish_reason,
                              usage=r.usage, parse_error=r.parse_error, detail=r.detail, reasoning=r.reasoning)
