"""Qwen3 / Hermes tool-call parsing and rendering.

The Act role writes zero or more `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks,
optionally after a `<think>...</think>` section. Model output is untrusted: `parse_tool_calls` never
raises; every failure is a classified `ErrorCode`. Like the reference parser, one malformed block makes
the whole message an error (a partial execution of a half-valid message would be silently lossy).
`parameters` is accepted as an alias of `arguments` (some Hermes fine-tunes emit it).
Text goes through envace.untrusted first (lone surrogates -> U+FFFD, size limit) and the JSON is strict
(`loads_strict`: no NaN / 1e400, no `\\ud83d` lone-surrogate escapes, bounded depth). Tags are found by
`str.find` scans, linear in the text (a lazy `<tool_call>(.*?)</tool_call>` regex is quadratic on
repeated openers).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from envace.types import ErrorCode, ToolCall
from envace.untrusted import MAX_TOOL_CALLS, StrictJSONError, clean_text, loads_strict, short, too_long

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Chat end-of-turn markers an engine may leave at the end of decoded text; they are never content.
END_MARKERS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
# Trailing whitespace and end markers, matched on the REVERSED text from its start: one anchored match,
# linear (stripping them one at a time from the end copies the string each time: quadratic). Possessive
# quantifiers (Python >= 3.11): nothing follows the loop, so no backtracking state is kept.
_TRAILING_REVERSED = re.compile("(?:\\s++|" + "|".join(re.escape(m[::-1]) for m in END_MARKERS) + ")*+")


@dataclass
class ParsedAct:
    """Result of parsing one Act output."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""  # the visible text outside tool-call blocks, think stripped
    error: ErrorCode | None = None
    detail: str = ""

    @property
    def is_final_reply(self) -> bool:
        return self.error is ErrorCode.NO_TOOL_CALL


def strip_end_markers(text: str) -> str:
    """Drop trailing end-of-turn markers and the whitespace around them from decoded model text."""
    cut = _TRAILING_REVERSED.match(text[::-1]).end()  # type: ignore[union-attr]  # `*` always matches
    return text[: len(text) - cut]


def strip_think(text: str) -> str:
    """The text outside `<think>...</think>` sections (each opener closes at the first closer after it);
    an unterminated `<think>` hides everything after it; stray closers are dropped. Linear."""
    out: list[str] = []
    pos = 0
    while True:
        start = text.find(THINK_OPEN, pos)
        if start < 0:
            out.append(text[pos:])
            break
        out.append(text[pos:start])
        end = text.find(THINK_CLOSE, start + len(THINK_OPEN))
        if end < 0:  # unterminated: the rest is hidden reasoning
            break
        pos = end + len(THINK_CLOSE)
    visible = "".join(out)
    cut = visible.find(THINK_OPEN)  # an opener formed by joining the pieces ("<thi" + "nk>") also hides the rest
    return (visible if cut < 0 else visible[:cut]).replace(THINK_CLOSE, "")


def split_blocks(text: str) -> tuple[list[str], str]:
    """(inner texts of the `<tool_call>` ... `</tool_call>` blocks, the text outside them), pairing each
    opener with the first closer after it, left to right (what a lazy regex does, in linear time). An
    opener without a closer stays in the outside text."""
    blocks: list[str] = []
    outside: list[str] = []
    pos = 0
    while True:
        start = text.find(OPEN_TAG, pos)
        if start < 0:
            break
        end = text.find(CLOSE_TAG, start + len(OPEN_TAG))
        if end < 0:
            break
        outside.append(text[pos:start])
        blocks.append(text[start + len(OPEN_TAG):end])
        pos = end + len(CLOSE_TAG)
    outside.append(text[pos:])
    return blocks, "".join(outside)


def _parse_block(raw: str, allowed: set[str] | None) -> ToolCall | tuple[ErrorCode, str]:
    try:
        obj = loads_strict(raw)
    except StrictJSONError as exc:
        if exc.syntax:
            return ErrorCode.JSON_DECODE, short(f"tool call is not valid JSON: {exc}")
        return ErrorCode.NON_SERIALIZABLE_ARGUMENTS, short(f"tool call is not strict JSON: {exc}")
    if not isinstance(obj, dict):
        return ErrorCode.JSON_DECODE, f"tool call must be a JSON object, got {type(obj).__name__}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ErrorCode.MISSING_NAME, "tool call has no string 'name'"
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        return ErrorCode.MISSING_ARGUMENTS, short(f"tool call {name!r} has no 'arguments'")
    if isinstance(args, str):  # OpenAI style: arguments as a JSON string
        try:
            args = loads_strict(args) if args.strip() else {}
        except StrictJSONError as exc:
            code = ErrorCode.JSON_DECODE if exc.syntax else ErrorCode.NON_SERIALIZABLE_ARGUMENTS
            return code, short(f"arguments of {name!r} are a string that is not strict JSON: {exc}")
    if not isinstance(args, dict):
        return ErrorCode.MISSING_ARGUMENTS, short(f"arguments of {name!r} must be an object")
    if allowed is not None and name not in allowed:
        return ErrorCode.UNKNOWN_TOOL, short(f"tool {name!r} is not one of {sorted(allowed)}")
    return ToolCall(name=name, arguments=args)


def parse_tool_calls(text: str, tool_names: list[str] | set[str] | None = None) -> ParsedAct:
    """Parse every `<tool_call>` block of an Act output. Never raises; linear in the text.

    With `tool_names` given, a call to any other tool is classified UNKNOWN_TOOL.
    A message without any block is a final reply (error NO_TOOL_CALL, content = the reply).
    """
    try:
        text = text if isinstance(text, str) else str(text)
        over = too_long(text)
        if over is not None:
            return ParsedAct(error=ErrorCode.OUTPUT_TOO_LONG, detail=over)
        visible = strip_think(clean_text(text))
        allowed = set(tool_names) if tool_names is not None else None
        blocks, leftover = split_blocks(visible)
        content = leftover.strip()
        if OPEN_TAG in leftover or CLOSE_TAG in leftover:
            return ParsedAct(content=content, error=ErrorCode.INVALID_TOOL_CALL_FORMAT,
                             detail="unbalanced <tool_call> tags")
        if not blocks:
            return ParsedAct(content=content, error=ErrorCode.NO_TOOL_CALL, detail="no tool call")
        if len(blocks) > MAX_TOOL_CALLS:  # bounds the per-call work; no rollout allows this many anyway
            return ParsedAct(content=content, error=ErrorCode.INVALID_TOOL_CALL_FORMAT,
                             detail=f"{len(blocks)} tool calls in one output, over the limit of {MAX_TOOL_CALLS}")
        calls: list[ToolCall] = []
        for raw in blocks:
            if OPEN_TAG in raw:
                return ParsedAct(content=content, error=ErrorCode.INVALID_TOOL_CALL_FORMAT,
                                 detail="nested <tool_call> tags")
            parsed = _parse_block(raw.strip(), allowed)
            if isinstance(parsed, tuple):
                return ParsedAct(calls=calls, content=content, error=parsed[0], detail=parsed[1])
            calls.append(parsed)
        return ParsedAct(calls=calls, content=content)
    except Exception as exc:  # pragma: no cover - belt and braces: model output must never crash us
        return ParsedAct(error=ErrorCode.INVALID_TOOL_CALL_FORMAT, detail=short(f"parser failure: {exc!r}"))


def render_tool_call(call: ToolCall) -> str:
    """The Hermes text of one call, as Qwen3's chat template writes it."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def tool_schema(name: str, properties: dict[str, dict[str, Any]], required: list[str] | None = None,
                description: str = "") -> dict[str, Any]:
    """An OpenAI function schema."""
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    fn["parameters"] = {"type": "object", "properties": properties,
                        "required": list(properties) if required is None else required}
    return {"type": "function", "function": fn}


def render_signature(tool: dict[str, Any]) -> str:
    """One-line form of a tool schema, `name(arg: type, ...) - description`, used where the tiny model
    pays for every prompt token (its chat template and the compact Rehearse prompt)."""
    fn = tool.get("function", tool)
    props = (fn.get("parameters") or {}).get("properties") or {}
    args = ", ".join(f"{k}: {(v or {}).get('type', 'any')}" for k, v in props.items())
    desc = fn.get("description") or ""
    return f"{fn.get('name', '')}({args})" + (f" - {desc}" if desc else "")


def schema_of(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for t in tools:
        fn = t.get("function", t)
        if fn.get("name") == name:
            return fn
    return None


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "object": dict, "array": list}


def check_arguments(call: ToolCall, tools: list[dict[str, Any]]) -> tuple[ErrorCode, str] | None:
    """Check a call against the sample's whitelist and JSON schema (required keys, unknown keys,
    primitive types, enums). Returns an (error, detail) pair or None when the call is valid."""
    fn = schema_of(tools, call.name)
    if fn is None:
        return ErrorCode.UNKNOWN_TOOL, f"tool {call.name!r} is not available"
    params = fn.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    for key in params.get("required") or []:
        if key not in call.arguments:
            return ErrorCode.INVALID_PARAMETERS, f"missing required argument {key!r}"
    for key, value in call.arguments.items():
        if key not in props:
            return ErrorCode.INVALID_PARAMETERS, f"unknown argument {key!r}"
        spec = props[key] or {}
        expected = _JSON_TYPES.get(spec.get("type", ""))
        if expected is not None:
            bad_bool = isinstance(value, bool) and spec.get("type") in ("integer", "number")
            if bad_bool or not isinstance(value, expected):
                return ErrorCode.INVALID_PARAMETERS, f"argument {key!r} must be {spec['type']}"
        if "enum" in spec and value not in spec["enum"]:
            return ErrorCode.INVALID_PARAMETERS, f"argument {key!r} must be one of {spec['enum']}"
    return None
