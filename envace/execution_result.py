"""The Rehearse output format, `<execution_result>` JSON `</execution_result>`: the one parser and the
renderer. Every reader of Rehearse text (the rollout via envace.roles.rehearse, envace.fidelity, the
store) uses `parse_execution_result`, so an observation and a fidelity verdict on the same text agree.

Parsing is strict and never raises: after a leading `<think>` section the text must be exactly one block
(surrounding whitespace and trailing end-of-turn markers tolerated) holding a non-empty JSON object or
array. Departures from the reference: the JSON is strict (envace.untrusted.loads_strict); a scalar is a
decode error and `{}` / `null` are empty; prose around the block and bare JSON are rejected. Scanning is
linear in the text.

`is_error_value` is the one predicate of "this tool response says the call failed", whoever wrote it
(the real world's `{"error": ...}`, a rehearsed `error_tool_call`, the parser's error object): the
rollout's episode rules, the checklist's failed-call rule and fidelity's error prediction all ask it.
"""

from __future__ import annotations

import json
from typing import Any

from envace.toolcall import strip_end_markers
from envace.types import ErrorCode, Observation, Role
from envace.untrusted import StrictJSONError, clean_text, loads_strict, short, too_long

RESULT_OPEN, RESULT_CLOSE = "<execution_result>", "</execution_result>"
ERROR_KEY = "error_tool_call"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


WORLD_ERROR_KEY = "error"  # the real environment's wording (CM2 convention)


def is_error_value(value: Any) -> bool:
    """True when a tool response value (the JSON the Act role sees) reports a failed call: an object with an
    "error" or "error_tool_call" key, or an array holding such an object. Pure; never raises."""
    if isinstance(value, dict):
        return WORLD_ERROR_KEY in value or ERROR_KEY in value
    if isinstance(value, list):
        return any(isinstance(v, dict) and (WORLD_ERROR_KEY in v or ERROR_KEY in v) for v in value)
    return False


def is_error_text(text: Any) -> bool:
    """`is_error_value` of a tool message's JSON text; text that is not JSON is not an error report."""
    if not isinstance(text, str):
        return False
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError, ValueError, RecursionError):
        return False
    return is_error_value(value)


def render_execution_result(obj: Any) -> str:
    """The exact Rehearse target text: the SFT writes it, `parse_execution_result` inverts it."""
    return f"{RESULT_OPEN}\n{json.dumps(obj, sort_keys=True)}\n{RESULT_CLOSE}"


def _error_detail(value: Any) -> str:
    if isinstance(value, dict):
        code, msg = value.get("code", ""), value.get("message", "")
        return short(f"{code}: {msg}".strip(": ") or "rehearsed error")
    return short(f"rehearsed error: {value!r}", 200)


def _rehearsed_error(obj: Any) -> Any:
    """The error payload when the result is (or, for a list, holds) an `error_tool_call` object."""
    if isinstance(obj, dict) and ERROR_KEY in obj:
        return obj[ERROR_KEY]
    if isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict) and ERROR_KEY in item:
                return item[ERROR_KEY]
    return None


def _strip_leading_think(text: str) -> str:
    """Drop reasoning written before the result block. Only a leading `<think>` section is removed:
    the JSON itself may legitimately hold the string "<think>"."""
    body = text.lstrip()
    if body.startswith(THINK_OPEN):
        end = body.find(THINK_CLOSE)
        return "" if end < 0 else body[end + len(THINK_CLOSE):]
    return body


def _fail(code: ErrorCode, detail: str) -> Observation:
    return Observation(content=None, source=Role.REHEARSE, error=code, detail=detail)


def parse_execution_result(text: str) -> Observation:
    """Classify one Rehearse output. Never raises; `source` is always Role.REHEARSE; linear in the text."""
    try:
        if not isinstance(text, str):
            return _fail(ErrorCode.NO_EXECUTION_RESULT_TAG, f"output is {type(text).__name__}, not text")
        over = too_long(text)
        if over is not None:
            return _fail(ErrorCode.OUTPUT_TOO_LONG, over)
        body = strip_end_markers(_strip_leading_think(clean_text(text))).strip()
        if not body.startswith(RESULT_OPEN) or not body.endswith(RESULT_CLOSE) \
                or len(body) < len(RESULT_OPEN) + len(RESULT_CLOSE):
            return _fail(ErrorCode.NO_EXECUTION_RESULT_TAG,
                         f"output must be exactly {RESULT_OPEN}\\n<JSON>\\n{RESULT_CLOSE}")
        inner = body[len(RESULT_OPEN): len(body) - len(RESULT_CLOSE)]
        try:
            obj = loads_strict(inner)
        except StrictJSONError as exc:
            return _fail(ErrorCode.RESULT_JSON_DECODE, short(f"result is not strict JSON: {exc}"))
        if obj is None or obj == {}:
            return _fail(ErrorCode.RESULT_EMPTY, "result is empty")
        if not isinstance(obj, (dict, list)):
            return _fail(ErrorCode.RESULT_JSON_DECODE,
                         f"result must be a JSON object or array, got {type(obj).__name__}")
        # C-speed substring tests before the Python walk ("\\u": the key may be written with escapes)
        err = _rehearsed_error(obj) if ERROR_KEY in inner or "\\u" in inner else None
        if err is not None:
            return Observation(content=obj, source=Role.REHEARSE, error=ErrorCode.REHEARSED_ERROR,
                               detail=_error_detail(err))
        return Observation(content=obj, source=Role.REHEARSE)
    except Exception as exc:  # pragma: no cover - model output must never crash a rollout
        return _fail(ErrorCode.RESULT_JSON_DECODE, short(f"parser failure: {exc!r}"))
