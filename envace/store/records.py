"""Typed records returned by the store's query API (query.py): plain dataclasses, detached from any
session, so the dashboard can cache and render them freely."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from envace.store.models import RunKind, RunStatus, TrajectoryMode
from envace.types import ErrorCode, Mode, Role, TerminationReason

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


@dataclass
class TurnRecord:
    turn_index: int
    role: Role
    user_turn: int
    text: str
    tool_calls: list[dict[str, Any]] | None
    parse_error: ErrorCode | None
    call: dict[str, Any] | None
    observation: dict[str, Any] | None
    real_observation: dict[str, Any] | None
    n_tokens: int
    logprob_mean: float | None
    logprob_min: float | None
    temperature: float | None
    advantage: float | None
    trainable: bool


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
