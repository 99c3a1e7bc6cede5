"""Typed records returned by the store's query API (query.py): plain dataclasses, detached from any
session, so the dashboard can cache and render them freely.

A stored turn comes back as a `TurnRecord` holding the same typed values the rollout's `Turn` held
(`Observation`, `ToolCall`, `CallRef`, its id), not their JSON dicts; only the token ids are replaced by
their statistics (the store keeps no token ids)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from envace.store.models import RunKind, RunStatus, TrajectoryMode
from envace.types import CallRef, ErrorCode, Mode, Observation, Role, TerminationReason, ToolCall

T = TypeVar("T")


@dataclass
class Page(Generic[T]):
    items: list[T]
    total: int  # a lower bound when total_exact is False (counting stops at the count limit)
    page: int
    page_size: int
    total_exact: bool = True

    @property
    def n_pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


@dataclass
class RunRecord:
    id: str
    name: str
    kind: RunKind
    status: RunStatus
    config: dict[str, Any] | None
    git_commit: str | None
    mlflow_run_id: str | None
    parent_id: str | None
    created_at: datetime
    updated_at: datetime


@dataclass
class TrajectorySummary:
    id: int
    run_id: str
    step: int
    split: str
    mode: TrajectoryMode
    rollout_mode: Mode
    prompt_id: str
    prompt_index: int
    sample_index: int
    domain: str
    reward: float | None
    termination: TerminationReason | None
    n_turns: int
    n_tool_calls: int
    env_calls: int
    created_at: datetime
    benchmark: str = ""  # "" = the tool world / training (envace.store.benchmark_rows)
    error: str | None = None  # a benchmark task's error (it scored 0)


def stored_call(d: Any) -> ToolCall | None:
    """A stored call dict ({"name", "arguments"[, "id"]} or OpenAI form) as a ToolCall. Never raises: a
    benchmark's calls are model output, so arguments that are not a JSON object are kept as they are."""
    if not isinstance(d, Mapping):
        return None
    fn = d.get("function", d)
    fn = fn if isinstance(fn, Mapping) else {}
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            pass
    return ToolCall(name=str(fn.get("name", "")), arguments=args, id=d.get("id"))


@dataclass
class TurnRecord:
    """A stored turn: a generation (`turn_id` = `Turn.id`; `answers` = `Turn.answers`) or a USER row."""

    turn_index: int  # position among the trajectory's stored rows (USER rows included)
    role: Role
    user_turn: int
    text: str
    tool_calls: list[ToolCall]
    parse_error: ErrorCode | None
    call: ToolCall | None
    observation: Observation | None
    real_observation: Observation | None
    n_tokens: int
    logprob_mean: float | None
    logprob_min: float | None
    temperature: float | None
    advantage: float | None
    trainable: bool
    id: int | None = None  # Turn.id; None for USER rows
    answers: CallRef | None = None  # the Act turn (its id) and call index this turn answers

    # the stored columns `from_row` reads (query.py selects them)
    COLUMNS = ("turn_index", "role", "user_turn", "text", "tool_calls", "parse_error", "call", "observation",
               "real_observation", "n_tokens", "logprob_mean", "logprob_min", "temperature", "advantage",
               "trainable", "turn_id", "answers_turn", "answers_call")

    @classmethod
    def from_row(cls, m: Mapping[str, Any]) -> TurnRecord:
        obs, real = m["observation"], m["real_observation"]
        link = None if m["answers_turn"] is None else CallRef(m["answers_turn"], m["answers_call"] or 0)
        return cls(turn_index=m["turn_index"], role=m["role"], user_turn=m["user_turn"], text=m["text"],
                   tool_calls=[c for c in map(stored_call, m["tool_calls"] or []) if c is not None],
                   parse_error=m["parse_error"], call=stored_call(m["call"]),
                   observation=None if obs is None else Observation.from_dict(obs),
                   real_observation=None if real is None else Observation.from_dict(real),
                   n_tokens=m["n_tokens"], logprob_mean=m["logprob_mean"], logprob_min=m["logprob_min"],
                   temperature=m["temperature"], advantage=m["advantage"], trainable=m["trainable"],
                   id=m["turn_id"], answers=link)


@dataclass
class RewardItemRecord:
    position: int
    user_turn: int
    item_id: str
    weight: float
    passed: bool | None
    question: str


@dataclass
class FidelityRecord:
    turn_index: int
    tool_name: str
    call: dict[str, Any] | None
    rehearsed_text: str
    rehearsed: Any
    real: Any
    exact_match: bool
    json_valid: bool
    schema_ok: bool
    field_f1: float


@dataclass
class TrajectoryRecord:
    summary: TrajectorySummary
    reward_breakdown: dict[str, Any] | None
    turns: list[TurnRecord] = field(default_factory=list)
    reward_items: list[RewardItemRecord] = field(default_factory=list)
    fidelity_pairs: list[FidelityRecord] = field(default_factory=list)


@dataclass
class ModeStats:
    mode: TrajectoryMode
    split: str
    n: int
    n_scored: int
    mean_reward: float | None


@dataclass
class RunSummary:
    run: RunRecord
    n_trajectories: int
    first_step: int | None
    last_step: int | None
    by_mode: list[ModeStats]
    terminations: dict[str, int]


@dataclass
class StepPoint:
    step: int
    n: int
    n_scored: int
    mean_reward: float | None
    mean_turns: float


@dataclass
class RoleStats:
    role: Role
    n_turns: int
    mean_tokens: float
    mean_advantage: float | None
    n_parse_errors: int
