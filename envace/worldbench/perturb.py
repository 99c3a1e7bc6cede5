"""Perturbed calls: a gold call changed in one way that a real environment should refuse.

Each perturbation is a pure function of (call, the tool's argument schema, a seeded rng) and returns the
changed arguments, or None when it does not apply to this call:
- `wrong_id`: one id argument (a string or integer, or a list of them, whose name is `id` or ends in
  `_id` / `_ids`, or whose description calls it an id) gets a different value of the same form: its last
  (up to 3) digits rotated by 5 (7 -> 2, ...), or `_x9` appended to a string that ends in no digit;
- `out_of_range`: one numeric argument made negative and large (-999 / -999.5), or one argument with an
  `enum` given a value outside it;
- `missing_arg`: one required argument dropped.
Whether the environment really refuses is not assumed: the perturbed call is executed, and its response
and error flag are what the environment said (a perturbed call that succeeds is kept as a success).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from envace.worldbench.records import CallKind

_ID_NAME = re.compile(r"(^|_)ids?$", re.IGNORECASE)
_ID_WORD = re.compile(r"\bids?\b", re.IGNORECASE)  # "account id" in a parameter's description
_TRAILING_DIGITS = re.compile(r"(\d{1,3})$")


def tool_parameters(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The `parameters` object of tool `name` among OpenAI (or bare) function schemas; {} when absent."""
    for t in tools:
        fn = t.get("function", t)
        if fn.get("name") == name:
            params = fn.get("parameters") or {}
            return params if isinstance(params, dict) else {}
    return {}


def other_id(value: str) -> str:
    """A different id of the same form: trailing digits rotated by 5 (mod 10), else `_x9` appended."""
    m = _TRAILING_DIGITS.search(value)
    if not m:
        return value + "_x9"
    rotated = "".join(str((int(c) + 5) % 10) for c in m.group(1))
    return value[: m.start()] + rotated


def _is_id(key: str, spec: Any) -> bool:
    desc = spec.get("description", "") if isinstance(spec, dict) else ""
    return bool(_ID_NAME.search(key) or _ID_WORD.search(str(desc)))


def _id_value(v: Any) -> bool:
    return (isinstance(v, str) and bool(v)) or (isinstance(v, int) and not isinstance(v, bool))


def _wrong_id(args: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    props = params.get("properties") or {}
    keys = [k for k, v in args.items() if _is_id(k, props.get(k)) and (
        _id_value(v) or (isinstance(v, list) and v and all(_id_value(x) for x in v)))]
    if not keys:
        return None
    key = rng.choice(sorted(keys))
    v = args[key]
    return {**args, key: [_other(v[0]), *v[1:]] if isinstance(v, list) else _other(v)}


def _other(v: Any) -> Any:
    return int(other_id(str(v))) if isinstance(v, int) else other_id(v)


def _out_of_range(args: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    props = params.get("properties") or {}
    enums = [k for k in args if isinstance(props.get(k), dict) and isinstance(props[k].get("enum"), list)
             and props[k]["enum"]]
    numbers = [k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    keys = sorted(set(enums) | set(numbers))
    if not keys:
        return None
    key = rng.choice(keys)
    if key in numbers:
        return {**args, key: -999 if isinstance(args[key], int) else -999.5}
    allowed = [str(x) for x in props[key]["enum"]]
    value = "not_" + str(args[key])
    while value in allowed:
        value = "not_" + value
    return {**args, key: value}


def _missing_arg(args: dict[str, Any], params: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    required = [k for k in params.get("required") or [] if k in args]
    if not required:
        return None
    key = rng.choice(sorted(required))
    return {k: v for k, v in args.items() if k != key}


PERTURBATIONS: dict[CallKind, Callable[[dict[str, Any], dict[str, Any], random.Random], dict[str, Any] | None]] = {
    CallKind.WRONG_ID: _wrong_id,
    CallKind.OUT_OF_RANGE: _out_of_range,
    CallKind.MISSING_ARG: _missing_arg,
}


def perturb(kind: CallKind, call: dict[str, Any], tools: list[dict[str, Any]],
            rng: random.Random) -> dict[str, Any] | None:
    """The perturbed call ({"name", "arguments"}), or None when `kind` does not apply to it."""
    if kind is CallKind.GOLD:
        raise ValueError("CallKind.GOLD is not a perturbation")
    changed = PERTURBATIONS[kind](dict(call.get("arguments") or {}), tool_parameters(tools, call["name"]), rng)
    return None if changed is None else {"name": call["name"], "arguments": changed}
