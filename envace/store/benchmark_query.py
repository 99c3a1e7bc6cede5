"""Reads of benchmark trajectories for the dashboard (written by envace.store.benchmark_rows).

- `stored_benchmarks`: the benchmarks that have trajectories in the store (DISTINCT over the
  (benchmark, run_id) index: no scan of the trajectories);
- `benchmark_run_ids`: the runs holding a benchmark's trajectories (same index);
- `benchmark_trajectory`: one trajectory as its benchmark saw it: the per-task record, score, error and
  the messages in order (system, user, the policy's replies with their tool calls, tool results, judge),
  read from the stored rows as written (a tool result keeps the call id it answers; a judge turn the role
  it had in the judge's chat), independent of the tool world's typed turn records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.store.models import TrajectoryRow as T
from envace.store.models import TurnRow
from envace.types import Role


@dataclass
class BenchMessage:
    role: Role
    text: str
    user_turn: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments", "id"?}
    # tool results: {"content", "tool_call_id", "name"}; judge: {"judge_role"}
    observation: dict[str, Any] | None = None


@dataclass
class BenchTrajectory:
    id: int
    run_id: str
    benchmark: str
    set: str
    task_id: str
    attempt: int
    seed: int
    score: float | None
    error: str | None
    record: dict[str, Any]  # the benchmark's per-task record without its messages
    messages: list[BenchMessage] = field(default_factory=list)


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v  # SQLite drivers may hand JSON back as text


def stored_benchmarks(session: Session) -> list[str]:
    """Benchmarks with trajectories in the store, sorted."""
    q = sa.select(T.benchmark).where(T.benchmark != "").distinct()
    return sorted(session.execute(q).scalars())


def benchmark_run_ids(session: Session, benchmark: str) -> list[str]:
    """The runs holding trajectories of `benchmark`."""
    q = sa.select(T.run_id).where(T.benchmark == benchmark).distinct()
    return sorted(session.execute(q).scalars())


def benchmark_trajectory(session: Session, trajectory_id: int) -> BenchTrajectory | None:
    """A benchmark trajectory with its messages; None when absent or not a benchmark trajectory."""
    row = session.execute(sa.select(T.id, T.run_id, T.benchmark, T.split, T.prompt_id, T.sample_index, T.step,
                                    T.reward, T.error, T.reward_breakdown)
                          .where(T.id == trajectory_id, T.benchmark != "")).first()
    if row is None:
        return None
    breakdown = _json(row.reward_breakdown) or {}
    record = breakdown.get("record") if isinstance(breakdown, dict) else None
    out = BenchTrajectory(row.id, row.run_id, row.benchmark, row.split, row.prompt_id, row.sample_index, row.step,
                          row.reward, row.error, record if isinstance(record, dict) else {})
    turns = session.execute(sa.select(TurnRow.role, TurnRow.text, TurnRow.user_turn, TurnRow.tool_calls,
                                      TurnRow.observation)
                            .where(TurnRow.trajectory_id == trajectory_id).order_by(TurnRow.turn_index))
    for t in turns:
        calls = _json(t.tool_calls)
        obs = _json(t.observation)
        out.messages.append(BenchMessage(Role(t.role), t.text or "", t.user_turn,
                                         calls if isinstance(calls, list) else [],
                                         obs if isinstance(obs, dict) else None))
    return out
