"""Bounds on an `envace serve` request: the count of objects and arrays on the raw bytes (`check_raw`,
before decoding), then, on the decoded JSON before validation, templating or tokenising: nesting depth,
number of messages, size of each tool call's arguments, lone surrogates, and the shape of every message
and tool call (so `tool_calls: [5]` is a 400 naming the field, not a 500 from the template). The raw body
is already capped at `max_request_bytes` before it is decoded.

`template_chars` counts every character the chat template copies into the prompt (content, tool-call
names and arguments, tool schemas), so a request whose text cannot fit the context is refused without
rendering it: rendering and tokenising megabytes of tool-call JSON was what cost memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestLimitError(ValueError):
    """A request over a limit or of the wrong shape; the message names the field (answered 400)."""


@dataclass(frozen=True)
class RequestLimits:
    max_depth: int = 32  # nesting of JSON objects / arrays in the whole body
    max_messages: int = 2048
    max_tool_call_bytes: int = 1_000_000  # one call's arguments, as UTF-8 JSON
    max_tools: int = 512
    max_containers: int = 100_000  # `{` + `[` bytes in the raw body: bounds what decoding allocates


def check_raw(raw: bytes, limits: RequestLimits) -> None:
    """Before decoding: an upper bound on the objects and arrays the body decodes into (brackets inside
    strings count too, so this over-counts; a request that near the bound cannot fit a context anyway)."""
    n = raw.count(b"{") + raw.count(b"[")
    if n > limits.max_containers:
        raise RequestLimitError(f"the body holds up to {n} JSON objects and arrays; this server allows "
                                f"{limits.max_containers}")


def _path(parts: tuple[Any, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def check_body(body: Any, limits: RequestLimits) -> None:
    """Depth and lone surrogates over the whole body, iteratively (no recursion on hostile input)."""
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(body, (), 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise RequestLimitError(f"{_path(where)} holds a lone surrogate (not valid Unicode text); "
                                        "send UTF-8 text")
            continue
        if isinstance(value, (dict, list)):
            if depth >= limits.max_depth:
                raise RequestLimitError(f"{_path(where)} is nested more than {limits.max_depth} levels deep; "
                                        "flatten the request")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(k, str) and _SURROGATE.search(k):
                    raise RequestLimitError(f"{_path(where)} has a key with a lone surrogate; send UTF-8 text")
                stack.append((v, (*where, k), depth + 1))
    if not isinstance(body, dict):
        raise RequestLimitError(f"the request body is a JSON {type(body).__name__}, not an object")


def _check_call(call: Any, where: str, limits: RequestLimits) -> int:
    if not isinstance(call, dict):
        raise RequestLimitError(f"{where} is {type(call).__name__}, not an object "
                                '({"type": "function", "function": {"name": ..., "arguments": ...}})')
    fn = call.get("function", call)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RequestLimitError(f"{where}.function needs a string name")
    args = fn.get("arguments")
    if args is not None and not isinstance(args, (str, dict)):
        raise RequestLimitError(f"{where}.function.arguments is {type(args).__name__}; send a JSON object "
                                "or a JSON string")
    size = len(args.encode("utf-8", "surrogatepass")) if isinstance(args, str) else \
        len(json.dumps(args, ensure_ascii=False).encode("utf-8", "surrogatepass")) if args is not None else 0
    if size > limits.max_tool_call_bytes:
        raise RequestLimitError(f"{where}.function.arguments is {size} bytes; this server allows "
                                f"{limits.max_tool_call_bytes} per tool call")
    return size + len(fn["name"])


def template_chars(body: dict[str, Any], limits: RequestLimits) -> int:
    """Check the messages' and tools' shape and sizes; return the characters the template will copy."""
    messages, tools = body.get("messages"), body.get("tools")
    if not isinstance(messages, list) or not messages:
        raise RequestLimitError("messages must be a non-empty list of message objects")
    if len(messages) > limits.max_messages:
        raise RequestLimitError(f"messages has {len(messages)} entries; this server allows {limits.max_messages}")
    n = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestLimitError(f"messages[{i}] is {type(m).__name__}, not an object")
        if not isinstance(m.get("role"), str):
            raise RequestLimitError(f"messages[{i}].role must be a string (system, user, assistant or tool)")
        content = m.get("content")
        if isinstance(content, str):
            n += len(content)
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                    raise RequestLimitError(f"messages[{i}].content[{j}] must be an object with a string text")
                n += len(part.get("text", ""))
        elif content is not None:
            raise RequestLimitError(f"messages[{i}].content is {type(content).__name__}; send a string")
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise RequestLimitError(f"messages[{i}].tool_calls must be a list")
            n += sum(_check_call(c, f"messages[{i}].tool_calls[{j}]", limits) for j, c in enumerate(calls))
    if tools is not None:
        if not isinstance(tools, list) or len(tools) > limits.max_tools:
            raise RequestLimitError(f"tools must be a list of at most {limits.max_tools} tool objects")
        for j, t in enumerate(tools):
            if not isinstance(t, dict):
                raise RequestLimitError(f"tools[{j}] is {type(t).__name__}, not an object")
            n += len(json.dumps(t, ensure_ascii=False))
    return n
