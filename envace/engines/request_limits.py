"""Bounds on an `envace serve` request: the count of objects and arrays on the raw bytes (`check_raw`,
before decoding), then, on the decoded JSON before validation, templating or tokenising: nesting depth,
the size of every string (value or key, anywhere in the body: the field budget of envace.input_budget),
number of messages and stop strings, size of each tool call's arguments, lone surrogates, the role (one
of system, user, assistant, tool) and the shape of every message and tool call (so `tool_calls: [5]` is
a 400 naming the field, not a 500 from the template). The raw body is already capped at
`max_request_bytes` before it is decoded.

`template_chars` counts every character the chat template may copy into the prompt: each message's
fields (content, role, name, tool calls, tool_call_id, ...), the tool schemas, the response_format
schema (written into the system prompt) and the chat_template_kwargs strings, so a request whose text
cannot fit the context is refused without rendering it: rendering and tokenising megabytes of text was
what cost memory and time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from envace.input_budget import FIELD_BYTES, text_chars, utf8_size

ROLES = ("system", "user", "assistant", "tool")
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
    max_field_bytes: int = field(default_factory=FIELD_BYTES.value)  # any one string of the body, as UTF-8
    max_stop: int = 16  # stop strings per request


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


def _check_size(text: str, where: str, limits: RequestLimits) -> None:
    if len(text) * 4 > limits.max_field_bytes:  # 1 to 4 bytes a character: shorter strings fit unmeasured
        size = utf8_size(text)
        if size > limits.max_field_bytes:
            raise RequestLimitError(str(FIELD_BYTES.error("", f"{where} is", size, "shorten it",
                                                          limit=limits.max_field_bytes)))


def check_body(body: Any, limits: RequestLimits) -> None:
    """Depth, string sizes and lone surrogates over the whole body, iteratively (no recursion on hostile
    input)."""
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(body, (), 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            _check_size(value, _path(where), limits)
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
                if isinstance(k, str):
                    _check_size(k, f"a key of {_path(where)}", limits)
                    if _SURROGATE.search(k):
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


def _check_stop(stop: Any, limits: RequestLimits) -> None:
    if isinstance(stop, list):
        if len(stop) > limits.max_stop:
            raise RequestLimitError(f"stop has {len(stop)} strings; this server allows {limits.max_stop}")
        bad = next((i for i, s in enumerate(stop) if not isinstance(s, str)), None)
        if bad is not None:
            raise RequestLimitError(f"stop[{bad}] is {type(stop[bad]).__name__}; send strings")
    elif stop is not None and not isinstance(stop, str):
        raise RequestLimitError(f"stop is {type(stop).__name__}; send a string or a list of strings")


def template_chars(body: dict[str, Any], limits: RequestLimits) -> int:
    """Check the messages', tools' and stop strings' shape and sizes; return the characters the template may
    copy into the prompt (see the module docstring)."""
    messages, tools = body.get("messages"), body.get("tools")
    if not isinstance(messages, list) or not messages:
        raise RequestLimitError("messages must be a non-empty list of message objects")
    if len(messages) > limits.max_messages:
        raise RequestLimitError(f"messages has {len(messages)} entries; this server allows {limits.max_messages}")
    _check_stop(body.get("stop"), limits)
    n = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestLimitError(f"messages[{i}] is {type(m).__name__}, not an object")
        role = m.get("role")
        if not isinstance(role, str):
            raise RequestLimitError(f"messages[{i}].role must be a string (system, user, assistant or tool), "
                                    f"not {type(role).__name__}")
        if role not in ROLES:
            shown = repr(role) if len(role) <= 20 else f"a {len(role)}-character string"
            raise RequestLimitError(f"messages[{i}].role is {shown}; it must be system, user, assistant or tool")
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
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            raise RequestLimitError(f"messages[{i}].name is {type(name).__name__}; send a string")
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise RequestLimitError(f"messages[{i}].tool_calls must be a list")
            n += sum(_check_call(c, f"messages[{i}].tool_calls[{j}]", limits) for j, c in enumerate(calls))
        # every other field (role, name, tool_call_id, ...): a template may write any of them
        n += sum(text_chars(v) for k, v in m.items() if k not in ("content", "tool_calls"))
    if tools is not None:
        if not isinstance(tools, list) or len(tools) > limits.max_tools:
            raise RequestLimitError(f"tools must be a list of at most {limits.max_tools} tool objects")
        for j, t in enumerate(tools):
            if not isinstance(t, dict):
                raise RequestLimitError(f"tools[{j}] is {type(t).__name__}, not an object")
            n += len(json.dumps(t, ensure_ascii=False))
    fmt = body.get("response_format")
    if fmt is not None:  # a JSON schema is written into the system prompt as JSON
        n += len(json.dumps(fmt, ensure_ascii=False)) if isinstance(fmt, dict) else 0
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict):  # template variables: their strings may be written into the prompt
        n += sum(text_chars(v) for v in kwargs.values())
    return n
