"""Benchmark trajectories (BFCL, τ², VitaBench, FinMCP) as rows of the trajectory store.

A `BenchmarkResult` holds one per-task record per (task, attempt) (`envace.benchmarks.base`). Each record
becomes one trajectory row with mode `eval`, rollout mode `env` (the benchmark's own environment answered
every call) and:

  benchmark     = the benchmark's name           split  = the record's set / category
  prompt_id     = the task id                     domain = the set as well (the dashboard's domain column)
  sample_index  = the attempt (0 … k-1)           step   = the evaluation's base seed
  prompt_index  = a 31-bit hash of the task id (benchmarks name tasks by string; the store keys by int)
  reward        = the record's `score`, else `reward`, else `valid` as 0/1; an errored task scores 0
  error         = the record's `task_error` as "stage: Type: message" (or its `error` string; NULL: it ran)
  reward_breakdown = {"record": the record without its messages}

Its messages become turns: system → SYSTEM, user → USER (the user simulator's or the benchmark's turns),
assistant → ACT (the policy), tool → ENV (the benchmark's environment); the record's `judge_messages`
(a rubric / LLM judge's prompt and verdict) follow as JUDGE turns, the role each had in the judge's chat
kept in the turn's observation as {"judge_role": ...}. The store's natural key (run, step, mode, prompt_index,
sample_index, split) then makes a re-put of the same result a no-op. Two different task ids of one set whose
hashes collide would share a key; `check_collisions` raises on that instead of silently keeping one (about one in
4 million for a set of 100 tasks).

Records are untrusted model output plus benchmark data: text is cleaned (rows.py), values that are not
JSON become strings, and a record that is not a mapping raises ValueError naming its position.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from envace.store.ingest import insert_bundles, is_transient
from envace.store.models import ROLE_BITS, TrajectoryMode, TrajectoryRow, utcnow
from envace.store.rows import TURN_COLUMNS, Bundle, clean_float, clean_text, json_text
from envace.types import Mode, Role, ToolCall

ROLE_OF_MESSAGE: dict[str, Role] = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER,
                                    "assistant": Role.ACT, "tool": Role.ENV, "function": Role.ENV,
                                    "observation": Role.ENV, "judge": Role.JUDGE}
MAX_SPLIT = 64  # trajectories.split
MAX_BENCHMARK = 32  # trajectories.benchmark


def task_index(task_id: str) -> int:
    """The store's integer key of a task id: 31 bits of its BLAKE2b hash (stable across runs and limits)."""
    return int.from_bytes(hashlib.blake2b(task_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big") & 0x7FFFFFFF


def record_score(rec: Mapping[str, Any]) -> float | None:
    """The score of one record: `score`, else `reward`, else `valid` as 0/1; 0 for an errored task without
    a score; None when the record carries none of these (unscored)."""
    for key in ("score", "reward"):
        if rec.get(key) is not None:
            return clean_float(rec[key])
    if rec.get("valid") is not None:
        return 1.0 if rec["valid"] else 0.0
    return 0.0 if rec.get("error") else None


def record_error(rec: Mapping[str, Any]) -> str | None:
    """The task's error as one line: `task_error` ({"stage", "type", "message"}) as "stage: Type: message";
    a record without a `task_error` field may carry a plain `error` string instead (a record that has
    `task_error` keeps `error` for the benchmark's own verdict, e.g. BFCL's checker message: not an error of
    the task's run). None when the task ran."""
    if "task_error" in rec:
        err = rec["task_error"]
        if isinstance(err, Mapping):
            parts = [clean_text(err.get(k)) for k in ("stage", "type", "message") if err.get(k)]
            return ": ".join(parts) or "error"
        return None if err in (None, "", False) else clean_text(err)
    err = rec.get("error")
    if err in (None, "", False):
        return None
    return clean_text(err) if isinstance(err, str) else (json_text(err) or "error")


def _judge_message(m: Any) -> dict[str, Any]:
    """A judge's prompt or verdict as a JUDGE turn; the role it had in the judge's own chat is kept."""
    m = dict(m) if isinstance(m, Mapping) else {"content": str(m)}
    return {**m, "role": "judge", "judge_role": str(m.get("role", ""))}


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw  # the model's malformed arguments, kept as written
    return raw


def tool_call_dict(c: Any) -> dict[str, Any]:
    """One tool call as the store keeps it ({"name", "arguments", "id"?}) from OpenAI's form
    ({"id", "type", "function": {"name", "arguments": "<json>"}}), the flat form, or a `ToolCall`."""
    if isinstance(c, ToolCall):
        out: dict[str, Any] = {"name": c.name, "arguments": c.arguments}
        cid = c.id
    elif isinstance(c, Mapping):
        fn = c.get("function") if isinstance(c.get("function"), Mapping) else c
        out = {"name": clean_text(fn.get("name", "")), "arguments": _arguments(fn.get("arguments"))}
        cid = c.get("id")
    else:
        return {"name": "", "arguments": clean_text(repr(c))}
    if cid:
        out["id"] = clean_text(cid)
    return out


def _content(m: Mapping[str, Any]) -> str:
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, Mapping) else str(p) for p in c)
    return json_text(c) or ""


def _observation(m: Mapping[str, Any], text: str) -> dict[str, Any]:
    """A tool message as an observation dict (the shape rows.obs_dict writes): its content parsed as JSON
    when it is JSON, plus the call it answers."""
    try:
        content = json.loads(text) if text else None
    except ValueError:
        content = text
    out = {"content": content, "source": "env", "error": None, "detail": ""}
    for key in ("tool_call_id", "name"):
        if m.get(key):
            out[key] = clean_text(m[key])
    return out


_TURN_DEFAULTS = {"user_turn": 0, "text": "", "n_tokens": 0, "trainable": False}


def message_turns(messages: Sequence[Any]) -> tuple[list[tuple], int, int, int, int]:
    """(turn rows in TURN_COLUMNS order, role mask, policy generations, tool calls, tool results)."""
    rows: list[tuple] = []
    mask = n_gen = n_calls = n_env = 0
    user_turn = -1
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            m = {"role": getattr(m, "role", "assistant"), "content": getattr(m, "content", None) or str(m),
                 "tool_calls": getattr(m, "tool_calls", None)}
        role = ROLE_OF_MESSAGE.get(str(getattr(m.get("role"), "value", m.get("role"))).lower(), Role.ACT)
        if role is Role.USER:
            user_turn += 1
        text = _content(m)
        d: dict[str, Any] = {"turn_index": i, "role": role.value, "user_turn": max(user_turn, 0),
                             "text": clean_text(text)}
        calls = m.get("tool_calls") or []
        if role is Role.ACT:
            n_gen += 1
            if calls:
                d["tool_calls"] = json_text([tool_call_dict(c) for c in calls])
                n_calls += len(calls)
        elif role is Role.ENV:
            n_env += 1
            d["observation"] = json_text(_observation(m, text))
        elif role is Role.JUDGE and m.get("judge_role"):
            d["observation"] = json_text({"judge_role": clean_text(m["judge_role"])})
        mask |= ROLE_BITS.get(role, 0)
        rows.append(tuple(d.get(c, _TURN_DEFAULTS.get(c)) for c in TURN_COLUMNS))
    return rows, mask, n_gen, n_calls, n_env


def _text_field(value: Any, name: str, limit: int, where: str) -> str:
    text = clean_text(value)
    if len(text) > limit:
        raise ValueError(f"{where}: {name} {text[:40]!r}… is {len(text)} characters; the store keeps at most "
                         f"{limit}: shorten the benchmark's {name}")
    return text


def benchmark_bundles(benchmark: str, records: Sequence[Mapping[str, Any]], run_id: str, seed: int,
                      now: datetime | None = None) -> list[Bundle]:
    """One bundle per record (see the module docstring for the mapping)."""
    bench = _text_field(benchmark, "benchmark name", MAX_BENCHMARK, "benchmark")
    now = now or utcnow()
    out = []
    for pos, rec in enumerate(records):
        where = f"{benchmark} record {pos}"
        if not isinstance(rec, Mapping):
            raise ValueError(f"{where} is {type(rec).__name__}, expected a dict with id, category, sample, "
                             f"messages, score / reward / valid, error")
        task_id = clean_text(rec.get("id", rec.get("task_id", "")))
        if not task_id:
            raise ValueError(f"{where} has no task id (field 'id'); every per-task record names its task")
        split = _text_field(rec.get("category", rec.get("set", "")), "set (category)", MAX_SPLIT, where)
        try:
            attempt = int(rec.get("sample", rec.get("attempt", 0)) or 0)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: sample {rec.get('sample')!r} is not an attempt number") from None
        messages = list(rec.get("messages") or [])
        messages += [_judge_message(m) for m in rec.get("judge_messages") or []]
        turns, mask, n_gen, n_calls, n_env = message_turns(messages)
        rest = {k: v for k, v in rec.items() if k not in ("messages", "judge_messages")}
        error = record_error(rec)
        row = {"run_id": run_id, "step": int(seed), "split": split, "prompt_id": task_id[:128],
               "prompt_index": task_index(task_id), "sample_index": attempt, "mode": TrajectoryMode.EVAL.value,
               "rollout_mode": Mode.ENV.value, "domain": split, "reward": record_score(rec), "termination": None,
               "n_turns": n_gen, "n_tool_calls": n_calls, "env_calls": n_env, "role_mask": mask,
               "reward_breakdown": json_text({"record": rest}), "created_at": now, "benchmark": bench,
               "error": error}
        out.append(Bundle(row, turns))
    return out


def check_collisions(bundles: Iterable[Bundle], stored: Iterable[tuple[str, int, str]] = ()) -> None:
    """Raise when two different task ids of one set map to the same key (in `bundles`, or against the
    `stored` (split, prompt_index, prompt_id) rows of the run)."""
    seen: dict[tuple[str, int], str] = {(s, i): p for s, i, p in stored}
    for b in bundles:
        t = b.trajectory
        key = (t["split"], t["prompt_index"])
        other = seen.setdefault(key, t["prompt_id"])
        if other != t["prompt_id"]:
            raise ValueError(f"tasks {other!r} and {t['prompt_id']!r} of set {t['split']!r} hash to the same store "
                             f"key {t['prompt_index']}; rename one task id (or store this benchmark in another run)")


def put_benchmark_records(engine: Engine, run_id: str, benchmark: str, records: Sequence[Mapping[str, Any]],
                          seed: int, *, batch_size: int = 256, max_retries: int = 8) -> tuple[int, int]:
    """Insert the records' trajectories into `run_id` (which must exist: `register_run`); returns (new,
    already stored). Idempotent: a record whose (set, task, attempt, seed) is stored is skipped."""
    bundles = benchmark_bundles(benchmark, records, run_id, seed)
    T = TrajectoryRow.__table__
    with engine.connect() as conn:
        stored = conn.execute(sa.select(T.c.split, T.c.prompt_index, T.c.prompt_id)
                              .where(T.c.run_id == run_id, T.c.step == int(seed))).all()
    check_collisions(bundles, [tuple(r) for r in stored])
    new = 0
    for i in range(0, len(bundles), batch_size):
        batch = bundles[i:i + batch_size]
        for attempt in range(max_retries + 1):
            try:
                with engine.begin() as conn:
                    new += insert_bundles(conn, batch)
                break
            except Exception as exc:
                if attempt == max_retries or not is_transient(exc):
                    raise
                time.sleep(min(2.0, 0.05 * 2 ** attempt))
    return new, len(bundles) - new
