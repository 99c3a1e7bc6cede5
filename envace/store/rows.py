"""Conversion of `envace.types.Trajectory` objects into plain row dicts for the store's tables.

A `Bundle` is one trajectory with its turns, checklist items and fidelity pairs: the writer commits a
bundle all-or-nothing. Conversion happens on the caller's thread, so the rows are a snapshot: the
trainer may mutate or free its trajectories right after `put` returns.

Stored turns are the policy's generations (`Trajectory.turns`) with, before the first generation of each
user turn, a USER row holding that user message (from the task), so the dashboard can show the whole
conversation. Model output is untrusted: NUL characters (PostgreSQL rejects them) and lone surrogates
(not encodable as UTF-8) become U+FFFD, non-finite floats become NULL, and values that are not JSON
become strings.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envace.store.models import ROLE_BITS, TrajectoryMode, utcnow
from envace.tracking.fidelity import parse_rehearsed, score_parsed
from envace.types import Observation, Role, ToolCall, Trajectory, Turn


@dataclass
class Bundle:
    """`trajectory` holds Python values (it is inserted through SQLAlchemy); the child rows are already
    in storage form (enum values as strings, JSON columns as `JsonText`) for the driver-level bulk insert."""

    trajectory: dict[str, Any]
    turns: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)

    def key(self) -> tuple:
        t = self.trajectory
        return (t["run_id"], t["step"], t["mode"].value, t["prompt_index"], t["sample_index"], t["split"])


_SURROGATE = re.compile("[\ud800-\udfff]")

try:  # orjson (a dependency of prefect and dvc-data) encodes 5-10x faster; NaN/inf become null in both
    import orjson

    def _encode(v: Any) -> str:
        return orjson.dumps(v).decode()

    _ENCODE_ERRORS: tuple = (TypeError, ValueError, RecursionError, orjson.JSONEncodeError)
except ImportError:  # pragma: no cover
    _encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
    _ENCODE_ERRORS = (TypeError, ValueError, RecursionError)


class JsonText(str):
    """Strict JSON text, already serialised for a JSON column (the bulk insert passes it through)."""


def clean_text(s: Any) -> str:
    """Text any database accepts: NUL (PostgreSQL rejects it) and lone surrogates (not UTF-8) become U+FFFD."""
    if s is None:
        return ""
    s = s if isinstance(s, str) else str(s)
    if "\x00" in s:
        s = s.replace("\x00", "\ufffd")
    if not s.isascii() and _SURROGATE.search(s):
        s = _SURROGATE.sub("\ufffd", s)
    return s


def clean_float(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _clean_json(v: Any, depth: int = 0) -> Any:
    if depth > 64:
        return clean_text(repr(v))
    if v is None or isinstance(v, bool) or isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        return clean_text(v)
    if isinstance(v, dict):
        return {clean_text(k): _clean_json(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean_json(x, depth + 1) for x in v]
    if isinstance(getattr(v, "value", None), (str, int)):  # enums
        return v.value
    return clean_text(str(v))


def json_text(v: Any) -> JsonText | None:
    """`v` serialised as strict JSON (no NaN/inf, NUL or lone surrogates; non-JSON objects as strings).
    One C-speed encode in the common case; the cleaning walk only runs when that encode fails or shows a
    bad character."""
    if v is None:
        return None
    try:
        text = _encode(v)
    except _ENCODE_ERRORS:  # NaN (stdlib), surrogates (orjson), non-JSON objects, non-str keys
        return JsonText(_encode(_clean_json(v)))
    if "\\u0000" in text or (not text.isascii() and _SURROGATE.search(text)):
        return JsonText(_encode(_clean_json(v)))
    return JsonText(text)


def jsonable(v: Any) -> Any:
    """`v` as a strict-JSON Python value (for columns written through SQLAlchemy)."""
    text = json_text(v)
    return None if text is None else json.loads(text)


def call_dict(c: ToolCall | None) -> dict[str, Any] | None:
    if c is None:
        return None
    out = {"name": c.name, "arguments": c.arguments}
    if c.id:
        out["id"] = c.id
    return out


def obs_dict(o: Observation | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {"content": o.content, "source": o.source.value if o.source else None,
            "error": o.error.value if o.error else None, "detail": o.detail}


def real_value(o: Observation) -> Any:
    """The JSON value an agent would have seen from the real environment (cf. Observation.to_text)."""
    if o.error is not None and o.content is None:
        return {"error_tool_call": {"code": o.error.value, "message": o.detail}}
    return o.content


def _logprob_stats(lps: list[float]) -> tuple[float | None, float | None]:
    """(mean, min) over the finite log-probs; None when there are none."""
    if not lps:
        return None, None
    try:
        mean, low = sum(lps) / len(lps), min(lps)
        if math.isfinite(mean) and math.isfinite(low):  # then every value is finite
            return float(mean), float(low)
    except TypeError:
        pass
    ok = [f for f in (clean_float(x) for x in lps) if f is not None]
    return (sum(ok) / len(ok), min(ok)) if ok else (None, None)


def _turn_row(t: Turn, index: int) -> dict[str, Any]:
    lp_mean, lp_min = _logprob_stats(t.logprobs)
    return {
        "turn_index": index, "role": t.role.value, "user_turn": int(t.user_turn), "text": clean_text(t.text),
        "tool_calls": json_text([call_dict(c) for c in t.tool_calls]) if t.tool_calls else None,
        "parse_error": t.parse_error.value if t.parse_error else None, "call": json_text(call_dict(t.call)),
        "observation": json_text(obs_dict(t.observation)), "real_observation": json_text(obs_dict(t.real_observation)),
        "n_tokens": len(t.response_ids), "logprob_mean": lp_mean, "logprob_min": lp_min,
        "temperature": clean_float(t.temperature),
        "advantage": clean_float(t.advantage), "trainable": bool(t.trainable),
    }


def _user_row(text: str, user_turn: int, index: int) -> dict[str, Any]:
    return {"turn_index": index, "role": Role.USER.value, "user_turn": user_turn, "text": clean_text(text),
            "tool_calls": None, "parse_error": None, "call": None, "observation": None,
            "real_observation": None, "n_tokens": 0, "logprob_mean": None, "logprob_min": None,
            "temperature": None, "advantage": None, "trainable": False}


def _items(breakdown: dict[str, Any]) -> list[dict[str, Any]]:
    raw = breakdown.get("items") if isinstance(breakdown, dict) else None
    if not isinstance(raw, list):
        return []
    out = []
    for pos, it in enumerate(raw):
        if not isinstance(it, dict):
            raise ValueError(f"reward_breakdown['items'][{pos}] is {type(it).__name__}, expected a dict with "
                             f"user_turn, item_id, weight, passed, question")
        passed = it.get("passed")
        out.append({"position": pos, "user_turn": int(it.get("user_turn") or 0),
                    "item_id": clean_text(it.get("item_id", it.get("id", ""))),
                    "weight": clean_float(it.get("weight", 1.0)) or 0.0,
                    "passed": None if passed is None else bool(passed),
                    "question": clean_text(it.get("question", ""))})
    return out


def role_mask(roles: Iterable[Role]) -> int:
    mask = 0
    for r in roles:
        mask |= ROLE_BITS.get(r, 0)
    return mask


def to_bundle(traj: Trajectory, run_id: str, step: int, mode: TrajectoryMode, split: str,
              now: datetime | None = None) -> Bundle:
    """Rows of one trajectory. Raises ValueError naming the field when the record itself is malformed."""
    if not isinstance(traj, Trajectory):
        raise TypeError(f"TrajectoryWriter.put expects envace.types.Trajectory objects, got {type(traj).__name__}")
    user_texts = traj.task.user_turns if traj.task is not None else []
    turns: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    seen_user: set[int] = set()
    for t in traj.turns:
        if t.user_turn not in seen_user and 0 <= t.user_turn < len(user_texts):
            seen_user.add(t.user_turn)
            turns.append(_user_row(user_texts[t.user_turn], t.user_turn, len(turns)))
        index = len(turns)
        turns.append(_turn_row(t, index))
        if t.role is Role.REHEARSE and t.call is not None and t.real_observation is not None:
            real = real_value(t.real_observation)
            valid, rehearsed = parse_rehearsed(t.text)
            scores = score_parsed(valid, rehearsed, real)
            pairs.append({"turn_index": index, "tool_name": clean_text(t.call.name),
                          "call": json_text(call_dict(t.call)),
                          "rehearsed_text": clean_text(t.text), "rehearsed": json_text(rehearsed),
                          "real": json_text(real), **scores})
    breakdown = traj.reward_breakdown if isinstance(traj.reward_breakdown, dict) else {}
    rest = {k: v for k, v in breakdown.items() if k != "items"}
    row = {
        "run_id": run_id, "step": int(step), "split": split,
        "prompt_id": clean_text(traj.task.uuid if traj.task is not None else ""),
        "prompt_index": int(traj.prompt_index), "sample_index": int(traj.sample_index),
        "mode": mode, "rollout_mode": traj.mode,
        "domain": clean_text(traj.task.domain if traj.task is not None else ""),
        "reward": clean_float(traj.reward), "termination": traj.termination,
        "n_turns": len(traj.turns), "n_tool_calls": sum(len(t.tool_calls) for t in traj.turns),
        "env_calls": int(traj.env_calls),
        "role_mask": role_mask([t.role for t in traj.turns] + [Role.USER] * bool(seen_user)),
        "reward_breakdown": jsonable(rest) if rest else None,
        "created_at": now or utcnow(),
    }
    return Bundle(row, turns, _items(breakdown), pairs)
