"""The one sanitising step for untrusted model output, shared by every parser (Act tool calls, Rehearse
results, fidelity) and applied where model text or tool results enter a prompt or a record. Each rule is
linear in the input size:
- text: lone surrogates become U+FFFD, as a byte-level decoder does (`clean_text`; never rejects);
- size: outputs over `MAX_OUTPUT_CHARS` are `ErrorCode.OUTPUT_TOO_LONG` unscanned (`too_long`), Act
  outputs over `MAX_TOOL_CALLS` blocks are format errors, details are cut to `MAX_DETAIL_CHARS`;
- JSON (`loads_strict`): NaN/Infinity, doubles that overflow, integers over `MAX_INT_DIGITS` digits,
  nesting over `MAX_JSON_DEPTH` and lone-surrogate escapes raise `StrictJSONError`. Invalid values are
  classified, never repaired: training on a call the model did not write would be wrong.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from envace.types import Observation

MAX_OUTPUT_CHARS = 4_000_000  # ~1M tokens: above any max_new_tokens; a longer output is not scanned
MAX_TOOL_CALLS = 256  # per Act output; far above any max_calls_per_turn, bounds the per-call JSON work
MAX_DETAIL_CHARS = 300  # error details go back into the Act prompt: keep them short
MAX_JSON_DEPTH = 100  # far above any tool schema; below the recursion limits of json / jinja / shape walks
MAX_INT_DIGITS = 300  # every accepted integer converts to a finite float (fidelity compares numbers so)

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # may over-match (an escaped backslash): then we walk


class StrictJSONError(ValueError):
    """Model-written JSON that is not strict JSON (see the module docstring). `syntax` is True for text
    that is not JSON at all, False for grammatical JSON holding a value strict JSON forbids (non-finite
    or oversized number, lone surrogate, too deep)."""

    def __init__(self, message: str, syntax: bool = False):
        super().__init__(message)
        self.syntax = syntax


def clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD; the same object when there is none."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # only surrogates fail to encode: C-speed check, then one regex pass
        return _SURROGATE.sub("\ufffd", text)
    return text


def has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def too_long(text: str) -> str | None:
    """A detail message when `text` is over the size limit, else None."""
    if len(text) > MAX_OUTPUT_CHARS:
        return f"output has {len(text):,} characters, over the limit of {MAX_OUTPUT_CHARS:,}"
    return None


def short(detail: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """An error detail cut to `limit` characters (and cleaned: details quote model output)."""
    detail = clean_text(detail)
    return detail if len(detail) <= limit else detail[: limit - 3] + "..."


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"non-finite number {name} is not JSON")


def _strict_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {literal[:40]} overflows a double")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_strict_float)  # built once: cheap calls
_INT_LIMIT = 10**MAX_INT_DIGITS
# A run of more than MAX_INT_DIGITS digits, found from run starts only (the lookbehind): linear. A pre-filter
# (it also sees digits inside strings and long fractions); the walk in json_problem decides.
_LONG_DIGITS = re.compile(rf"(?<![0-9])[0-9]{{{MAX_INT_DIGITS + 1}}}")


def json_problem(value: Any) -> str | None:
    """Why a decoded JSON value is not strict (non-finite float, non-string key, lone surrogate, nesting
    deeper than MAX_JSON_DEPTH), or None. Iterative: no recursion limit is reached on deep values."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        t = type(v)
        if t is str:
            if not v.isascii() and _SURROGATE.search(v):
                return "a string holds a lone surrogate (not valid Unicode)"
        elif t is dict or t is list:
            if depth >= MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            if t is dict:
                for k, x in v.items():
                    if type(k) is not str:
                        return "an object key is not a string"
                    if not k.isascii() and _SURROGATE.search(k):
                        return "an object key holds a lone surrogate (not valid Unicode)"
                    push((x, depth + 1))
            else:
                for x in v:
                    push((x, depth + 1))
        elif t is float:
            if not math.isfinite(v):
                return "a number is not finite"
        elif t is int:
            if not -_INT_LIMIT < v < _INT_LIMIT:
                return f"an integer has more than {MAX_INT_DIGITS} digits"
        elif t is bool or v is None:
            pass
        else:  # subclasses and foreign types: only JSON's own types are accepted
            return f"a value of type {t.__name__} is not JSON"
    return None


def loads_strict(text: str) -> Any:
    """Decode model-written JSON strictly. Raises StrictJSONError with a short reason."""
    try:
        value = _DECODER.decode(text)
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise StrictJSONError(short(str(exc)), syntax=True) from None
    except ValueError as exc:  # int() refuses literals over sys.get_int_max_str_digits() digits
        raise StrictJSONError(short(str(exc))) from None
    if text.count("{") + text.count("[") < MAX_JSON_DEPTH and not has_surrogate(text) \
            and not _SURROGATE_ESCAPE.search(text) and not _LONG_DIGITS.search(text):
        return value  # no surrogate, bounded nesting, no long integer: nothing for the walk to find
    problem = json_problem(value)
    if problem is not None:
        raise StrictJSONError(problem)
    return value


def clean_value(value: Any) -> Any:
    """A JSON-like value with lone surrogates in strings and keys replaced by U+FFFD (for results of a
    real environment, which may echo model text); the same object when nothing needed cleaning."""
    if json_problem(value) is None:
        return value
    return _clean(value, 0)


def _clean(v: Any, depth: int) -> Any:
    if isinstance(v, str):
        return clean_text(v)
    if depth >= MAX_JSON_DEPTH:  # deeper than any real tool result: kept as its (ASCII-escaped) text
        return json.dumps(v, default=repr)[:MAX_DETAIL_CHARS]
    if isinstance(v, dict):
        return {clean_text(k) if isinstance(k, str) else k: _clean(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x, depth + 1) for x in v]
    return v


def clean_observation(obs: Observation) -> Observation:
    """An environment's observation with its text fields cleaned (`clean_value`, `clean_text`)."""
    content, detail = clean_value(obs.content), clean_text(obs.detail) if isinstance(obs.detail, str) else obs.detail
    if content is obs.content and detail is obs.detail:
        return obs
    return Observation(content=content, source=obs.source, error=obs.error, detail=detail)
