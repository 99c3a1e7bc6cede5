"""`Trajectory` -> rows of the store's tables, in storage form (enum values, JSON text, child tuples in
column order) so ingest.py hands them to the driver as they are; a `Bundle` (one trajectory with its turns,
items and fidelity pairs) commits all-or-nothing. Built on the caller's thread: a snapshot.

A USER row (from the task) opens each user turn. A generation keeps its `Turn.id` and `Turn.answers` link
(turn_id, answers_turn, answers_call), so it reads back paired as the rollout paired it; its fidelity
pair is `turn_fidelity(turn)`, the in-memory verdict. Untrusted text: NUL and lone surrogates become
U+FFFD, non-finite floats NULL, non-JSON values strings. Conversion is the larger half of the writer's
CPU time, hence the inlined fast paths (ASCII text, finite floats).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envace.fidelity import parse_rehearsed, turn_fidelity
from envace.store.models import ROLE_BITS, TrajectoryMode, utcnow
from envace.types import Mode, Observation, Role, TerminationReason, ToolCall, Trajectory, Turn

# Column order of the child rows (their table's columns after `trajectory_id`, which ingest.py prepends
# once the parent's id is known; ingest.py checks the order against the tables).
TURN_COLUMNS = ("turn_index", "role", "user_turn", "text", "tool_calls", "parse_error", "call", "observation",
                "real_observation", "n_tokens", "logprob_mean", "logprob_min", "temperature", "advantage",
                "trainable", "turn_id", "answers_turn", "answers_call")
ITEM_COLUMNS = ("position", "user_turn", "item_id", "weight", "passed", "question")
PAIR_COLUMNS = ("turn_index", "tool_name", "call", "rehearsed_text", "rehearsed", "real", "exact_match",
                "json_valid", "schema_ok", "field_f1")


@dataclass(slots=True)
class Bundle:
    """Rows in storage form, ready for a driver-level bulk insert: enum values as strings, JSON columns as
    JSON text; `trajectory` is a dict keyed by column name (`created_at` a datetime: its storage form is
    the dialect's), the children are tuples in `TURN_COLUMNS` / `ITEM_COLUMNS` / `PAIR_COLUMNS` order."""

    trajectory: dict[str, Any]
    turns: list[tuple] = field(default_factory=list)
    items: list[tuple] = field(default_factory=list)
    pairs: list[tuple] = field(default_factory=list)
    tts_commits: list[tuple] = field(default_factory=list)  # test-time rehearsal rows (envace.store.tts)
    tts_rehearsals: list[tuple] = field(default_factory=list)
    _key: tuple | None = None

    def key(self) -> tuple:
        """The natural key (run, step, mode, prompt_index, sample_index, split)."""
        if self._key is None:
            t = self.trajectory
            self._key = (t["run_id"], t["step"], t["mode"], t["prompt_index"], t["sample_index"], t["split"])
        return self._key


_SURROGATE = re.compile("[\ud800-\udfff]")

_std_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode

try:  # orjson (a dependency of prefect and dvc-data) encodes 5-10x faster
    import orjson

    _dumps = orjson.dumps  # -> UTF-8 bytes
    _ENCODE_ERRORS: tuple = (TypeError, ValueError, RecursionError, orjson.JSONEncodeError)
except ImportError:  # pragma: no cover
    def _dumps(v: Any) -> bytes:
        return _std_encode(v).encode("utf-8", "surrogatepass")

    _ENCODE_ERRORS = (TypeError, ValueError, RecursionError)


def _encode(v: Any) -> str:
    """JSON text of an already cleaned value; json takes what orjson cannot (integers beyond 64 bits)."""
    try:
        return _dumps(v).decode()
    except _ENCODE_ERRORS:
        return _std_encode(v)


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


def json_text(v: Any) -> str | None:
    """`v` serialised as strict JSON (no NaN/inf, NUL or lone surrogates; non-JSON objects as strings).
    One C-speed encode in the common case; the cleaning walk only runs when that encode fails or shows a
    bad character."""
    if v is None:
        return None
    try:
        text = _dumps(v).decode()
    except _ENCODE_ERRORS:  # NaN (stdlib), surrogates (orjson), non-JSON objects, non-str keys
        return _encode(_clean_json(v))
    if "\\u0000" in text or (not text.isascii() and _SURROGATE.search(text)):
        return _encode(_clean_json(v))
    return text


def call_dict(c: ToolCall | None) -> dict[str, Any] | None:
    if c is None:
        return None
    out = {"name": c.name, "arguments": c.arguments}
    if c.id:
        out["id"] = c.id
    return out


def obs_dict(o: Observation | None) -> dict[str, Any] | None:
    return None if o is None else o.to_dict()


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


def _text(s: Any) -> str:
    """`clean_text` with the common case (plain ASCII without NUL) inlined."""
    if type(s) is str and s.isascii() and "\x00" not in s:
        return s
    return clean_text(s)


def _float(x: Any) -> float | None:
    """`clean_float` with the common case (a finite float) inlined."""
    if type(x) is float and math.isfinite(x):
        return x
    return clean_float(x)


_isfinite = math.isfinite
_USER = Role.USER.value


def _turn_row(t: Turn, index: int, position: int) -> tuple:
    """A TurnRow in TURN_COLUMNS order (without trajectory_id). `position`: the turn's place in
    `Trajectory.turns`, its id when the turn has none (a trajectory built by hand)."""
    lps = t.logprobs
    if lps and type(lps) is list:  # fast path: finite floats (what every engine produces)
        try:
            lp_mean, lp_min = sum(lps) / len(lps), min(lps)
            if not (_isfinite(lp_mean) and _isfinite(lp_min) and type(lp_mean) is float and type(lp_min) is float):
                lp_mean, lp_min = _logprob_stats(lps)
        except TypeError:
            lp_mean, lp_min = _logprob_stats(lps)
    else:
        lp_mean, lp_min = _logprob_stats(lps)
    calls = t.tool_calls
    call, obs, real, ref = t.call, t.observation, t.real_observation, t.answers
    return (index, t.role._value_, int(t.user_turn), _text(t.text),
            json_text([call_dict(c) for c in calls]) if calls else None,
            None if t.parse_error is None else t.parse_error._value_,
            None if call is None else json_text(call_dict(call)),
            None if obs is None else json_text(obs_dict(obs)),
            None if real is None else json_text(obs_dict(real)),
            len(t.response_ids), lp_mean, lp_min, _float(t.temperature),
            None if t.advantage is None else _float(t.advantage), bool(t.trainable),
            position if t.id is None else int(t.id),
            None if ref is None else int(ref.act_turn), None if ref is None else int(ref.call_index))


def _user_row(text: str, user_turn: int, index: int) -> tuple:
    return (index, _USER, user_turn, _text(text), None, None, None, None, None, 0, None, None, None, None, False,
            None, None, None)


def _items(breakdown: dict[str, Any]) -> list[tuple]:
    raw = breakdown.get("items") if isinstance(breakdown, dict) else None
    if not isinstance(raw, list):
        return []
    out = []
    for pos, it in enumerate(raw):
        if not isinstance(it, dict):
            raise ValueError(f"reward_breakdown['items'][{pos}] is {type(it).__name__}, expected a dict with "
                             f"user_turn, item_id, weight, passed, question")
        passed = it.get("passed")
        out.append((pos, int(it.get("user_turn") or 0), _text(it.get("item_id", it.get("id", ""))),
                    clean_float(it.get("weight", 1.0)) or 0.0, None if passed is None else bool(passed),
                    _text(it.get("question", ""))))
    return out


def role_mask(roles: Iterable[Role]) -> int:
    mask = 0
    for r in roles:
        mask |= ROLE_BITS.get(r, 0)
    return mask


def _enum_value(v: Any, cls: type, name: str, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if isinstance(v, cls):
        return v._value_
    try:
        return cls(v)._value_
    except ValueError:
        raise ValueError(f"Trajectory.{name}={v!r} is not one of {[m.value for m in cls]}") from None


def to_bundle(traj: Trajectory, run_id: str, step: int, mode: TrajectoryMode, split: str,
              now: datetime | None = None) -> Bundle:
    """Rows of one trajectory. Raises ValueError naming the field when the record itself is malformed."""
    if not isinstance(traj, Trajectory):
        raise TypeError(f"TrajectoryWriter.put expects envace.types.Trajectory objects, got {type(traj).__name__}")
    task = traj.task
    user_texts = task.user_turns if task is not None else []
    n_users = len(user_texts)
    turns: list[tuple] = []
    pairs: list[tuple] = []
    seen_user: set[int] = set()
    mask = 0
    n_calls = 0
    for position, t in enumerate(traj.turns):
        u = t.user_turn
        if u not in seen_user and 0 <= u < n_users:
            seen_user.add(u)
            turns.append(_user_row(user_texts[u], u, len(turns)))
        index = len(turns)
        turns.append(_turn_row(t, index, position))
        mask |= ROLE_BITS.get(t.role, 0)
        n_calls += len(t.tool_calls)
        if t.role is Role.REHEARSE and t.call is not None and t.real_observation is not None:
            sc = turn_fidelity(t)  # the verdict computed in memory, from the rollout's one parse
            real = t.real_observation.agent_value()
            rehearsed = parse_rehearsed(t.text, t.observation)[1]
            pairs.append((index, _text(t.call.name), json_text(call_dict(t.call)), _text(t.text),
                          json_text(rehearsed), json_text(real), sc["exact_match"], sc["json_valid"],
                          sc["schema_ok"], sc["field_f1"]))
    if seen_user:
        mask |= ROLE_BITS[Role.USER]
    breakdown = traj.reward_breakdown if isinstance(traj.reward_breakdown, dict) else {}
    rest = {k: v for k, v in breakdown.items() if k != "items"}
    row = {
        "run_id": run_id, "step": int(step), "split": split,
        "prompt_id": _text(task.uuid if task is not None else ""),
        "prompt_index": int(traj.prompt_index), "sample_index": int(traj.sample_index),
        "mode": _enum_value(mode, TrajectoryMode, "mode"),
        "rollout_mode": _enum_value(traj.mode, Mode, "mode"),
        "domain": _text(task.domain if task is not None else ""),
        "reward": _float(traj.reward),
        "termination": _enum_value(traj.termination, TerminationReason, "termination", optional=True),
        "n_turns": len(traj.turns), "n_tool_calls": n_calls, "env_calls": int(traj.env_calls),
        "role_mask": mask, "reward_breakdown": json_text(rest) if rest else None,
        "created_at": now or utcnow(),
    }
    bundle = Bundle(row, turns, _items(breakdown), pairs)
    if traj.tts:
        from envace.store.tts import tts_rows  # only for test-time rehearsal records

        bundle.tts_commits, bundle.tts_rehearsals = tts_rows(traj, row, json_text)
    return bundle
